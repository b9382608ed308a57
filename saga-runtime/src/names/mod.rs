//! The rules for names given at run time: instance ids, step, sleep and
//! wait names of the hand-written API (the macros check the same rules at
//! compile time), and event types.
//!
//! Also here: `id`, instance ids, chosen and derived.

pub(crate) mod id;

use crate::error::Result;
use crate::names::id::InstanceId;

/// The longest step, sleep or wait name.
const MAX_NAME: usize = 64;
/// The longest event type, in bytes.
const MAX_EVENT_TYPE: usize = 256;

/// Checks a step, sleep or wait name: `[a-z0-9][a-z0-9-]*`, at most 64
/// characters. A `#` or `:` in a name would make its idempotency keys
/// collide with another step's.
pub(crate) fn check_name(kind: &str, name: &str) -> Result<(), String> {
    let problem = if name.is_empty() {
        Some("it is empty".to_owned())
    } else if name.len() > MAX_NAME {
        Some(format!("it is longer than {MAX_NAME} characters"))
    } else if name.starts_with('-') {
        Some("it starts with '-'".to_owned())
    } else {
        name.chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
            .map(|c| format!("it contains {c:?}"))
    };
    match problem {
        None => Ok(()),
        Some(problem) => Err(format!(
            "invalid {kind} name {name:?}: {problem}; names use 1-{MAX_NAME} characters of \
             [a-z0-9-], starting with a letter or digit, such as \"charge-card\""
        )),
    }
}

/// Checks an event type: 1-256 bytes, no control characters. Webhook
/// types such as `payment_intent.succeeded` pass.
pub(crate) fn check_event_type(event_type: &str) -> Result<(), String> {
    let problem = if event_type.is_empty() {
        Some("it is empty".to_owned())
    } else if event_type.len() > MAX_EVENT_TYPE {
        Some(format!(
            "it is {} bytes long, over the limit of {MAX_EVENT_TYPE}",
            event_type.len()
        ))
    } else {
        event_type
            .chars()
            .find(|c| c.is_control())
            .map(|c| format!("it contains the control character {c:?}"))
    };
    match problem {
        None => Ok(()),
        Some(problem) => Err(format!(
            "invalid event type {:?}: {problem}; use 1-{MAX_EVENT_TYPE} bytes of printable text, such as \"payment_intent.succeeded\"",
            event_type.chars().take(80).collect::<String>()
        )),
    }
}

/// Checks an id a caller chose for a new instance (see [`InstanceId::new`]).
pub(crate) fn validate_id(id: &str) -> Result<()> {
    InstanceId::new(id).map(drop)
}

/// Checks the id of an instance to look up: chosen, or derived by the
/// engine (see [`InstanceId::parse`]).
pub(crate) fn validate_any_id(id: &str) -> Result<()> {
    InstanceId::parse(id).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_macro_rules() {
        assert!(check_name("step", "charge-card").is_ok());
        assert!(check_name("step", "a#1").is_err());
        assert!(check_name("step", "rollback:x").is_err());
        assert!(check_name("step", "").is_err());
        assert!(check_name("step", "Charge").is_err());
        assert!(check_name("step", &"a".repeat(65)).is_err());
    }

    #[test]
    fn event_types_are_printable_and_bounded() {
        assert!(check_event_type("payment_intent.succeeded").is_ok());
        assert!(check_event_type("").is_err());
        assert!(check_event_type("a\nb").is_err());
        assert!(check_event_type(&"x".repeat(257)).is_err());
        assert!(check_event_type(&"x".repeat(256)).is_ok());
    }
}
