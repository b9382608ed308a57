//! Calls that make a workflow body non-deterministic: replay would not see
//! the same values. Matched on the path as written, so `SystemTime::now`
//! after `use std::time::SystemTime` is found too.

/// How a rule's segments match a path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Match {
    /// The path starts with them (`rand::…`) and goes on.
    Prefix,
    /// The path ends with them (`…SystemTime::now`).
    Suffix,
}

use Match::{Prefix, Suffix};

const CLOCK: &str = "`{}` reads the clock, which gives a different answer when the workflow is \
    replayed after a restart; use `ctx.now().await`, which records the time in the workflow's \
    history";
const RANDOM: &str = "`{}` gives different values when the workflow is replayed; use \
    `ctx.random().await`, which records its value in the workflow's history, or create the \
    value inside a #[step]";
const SPAWN: &str = "`{}` starts a task the engine does not record, so a restart loses it or \
    runs it twice; put the work in #[step] functions and run them concurrently with \
    `tokio::join!(step_a(&ctx, ..), step_b(&ctx, ..))`";
const SLEEP: &str = "`{}` is a timer the engine does not record: a restart forgets it and a \
    replay waits again; use a durable sleep: `ctx.sleep(\"wait-name\", \"30 seconds\").await?`";
const IO: &str = "`{}` does I/O in the workflow body, which runs again on every replay and \
    whose result is not recorded; move it into a #[step] (with an `IdempotencyKey` if it \
    changes anything)";

/// Calls that make a workflow body non-deterministic, and the advice (`{}`
/// is the path as written).
const FORBIDDEN: &[(Match, &[&str], &str)] = &[
    (Suffix, &["SystemTime", "now"], CLOCK),
    (Suffix, &["Instant", "now"], CLOCK),
    (Suffix, &["Utc", "now"], CLOCK),
    (Suffix, &["Local", "now"], CLOCK),
    (Suffix, &["OffsetDateTime", "now_utc"], CLOCK),
    (Prefix, &["rand"], RANDOM),
    (Suffix, &["thread_rng"], RANDOM),
    (Suffix, &["Uuid", "new_v4"], RANDOM),
    (Suffix, &["tokio", "spawn"], SPAWN),
    (Suffix, &["task", "spawn"], SPAWN),
    (Suffix, &["task", "spawn_blocking"], SPAWN),
    (Suffix, &["task", "spawn_local"], SPAWN),
    (Suffix, &["thread", "spawn"], SPAWN),
    (Suffix, &["time", "sleep"], SLEEP),
    (Suffix, &["time", "sleep_until"], SLEEP),
    (Suffix, &["time", "interval"], SLEEP),
    (Suffix, &["thread", "sleep"], SLEEP),
    (Prefix, &["std", "fs"], IO),
    (Prefix, &["tokio", "fs"], IO),
    (Prefix, &["std", "net"], IO),
    (Prefix, &["tokio", "net"], IO),
    (Prefix, &["std", "process"], IO),
    (Prefix, &["tokio", "process"], IO),
    (Prefix, &["reqwest"], IO),
    (Suffix, &["File", "open"], IO),
    (Suffix, &["File", "create"], IO),
    (Suffix, &["TcpStream", "connect"], IO),
    (Suffix, &["TcpListener", "bind"], IO),
    (Suffix, &["UdpSocket", "bind"], IO),
];

/// The advice for a forbidden path, if `segments` is one.
pub(crate) fn forbidden(segments: &[String]) -> Option<String> {
    let (_, _, advice) = FORBIDDEN.iter().find(|(matching, rule, _)| {
        let n = rule.len();
        let part = match matching {
            // A prefix rule needs more after it: `rand` alone is a variable.
            Prefix if segments.len() > n => &segments[..n],
            Suffix if segments.len() >= n => &segments[segments.len() - n..],
            _ => return false,
        };
        part.iter().zip(rule.iter()).all(|(a, b)| a == b)
    })?;
    Some(advice.replace("{}", &segments.join("::")))
}

#[cfg(test)]
mod tests {
    use super::forbidden;

    fn path(text: &str) -> Vec<String> {
        text.split("::").map(str::to_owned).collect()
    }

    #[test]
    fn finds_the_listed_calls_however_they_are_imported() {
        for text in [
            "SystemTime::now",
            "std::time::Instant::now",
            "rand::random",
            "rand::rngs::OsRng::new",
            "tokio::spawn",
            "tokio::task::spawn_blocking",
            "tokio::time::sleep",
            "time::sleep",
            "std::thread::sleep",
            "thread::sleep",
            "std::fs::read_to_string",
            "tokio::fs::write",
            "reqwest::get",
            "File::open",
        ] {
            assert!(forbidden(&path(text)).is_some(), "{text}");
        }
    }

    #[test]
    fn leaves_the_rest_alone() {
        for text in [
            "rand",
            "ctx",
            "Instant",
            "std::time::Duration::from_secs",
            "fs::read",
        ] {
            assert!(forbidden(&path(text)).is_none(), "{text}");
        }
    }
}
