//! Instance ids: the ones callers choose, and the ones the engine derives
//! from another id (a child workflow's from its parent's, a schedule
//! tick's from its schedule), by one grammar, so a derived id never equals
//! a chosen one and every id fits in a URL path segment as it is.
//!
//! ```text
//! id       = chosen | derived
//! chosen   = 1*100 of [A-Za-z0-9_-], not starting with "-"
//! derived  = base "." part [ "~" counters ]        (at most 100 characters,
//!                                                   else shortened, below)
//! base     = an id (chosen or derived), or a schedule name
//! part     = a child's call name ([a-z0-9-], as a step name)
//!          | a tick time in UTC: YYYYMMDD "T" hhmmss "Z"
//! counters = [ "o" occurrence ] [ "g" generation ] [ "r" run ] [ "m" manual ]
//!            (each only when it is not 0, in this order)
//! ```
//!
//! For example `trip-9.book-flight` (the first `book-flight` child of
//! instance `trip-9`), `trip-9.book-flight~o1g2` (its second call, in the
//! parent's third generation), `trip-9.book-flight~r3` (its call in run 3
//! of a parent that continued as new: each run's children are new
//! instances) and `nightly.20301012T020000Z` (the tick of schedule
//! `nightly` at 02:00 UTC on 12 October 2030).
//!
//! A chosen id has no `.` and no `~`, so no derived id is ever a chosen
//! one; a call name is lower case and a tick time upper case, so a child
//! and a tick never share an id either. A derived id over 100 characters
//! keeps its first 82 and ends in `~h` and 16 hex digits of a 64-bit
//! FNV-1a hash of the whole, so it stays unique (but not readable back).
//! Every character of either kind is unreserved in a URL.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The longest id, chosen or derived.
pub(crate) const MAX_ID: usize = 100;

/// What a derived id keeps of itself when it is too long: the rest is
/// `~h` and the 16 hex digits of its hash.
const KEPT_WHEN_HASHED: usize = MAX_ID - 18;

/// The id of an instance: one a caller chose, or one the engine derived
/// (see the grammar in this module). Cheap to clone.
///
/// Every public call that takes an id takes a `&str` as well; this type
/// says which ids are well formed, and builds derived ones.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct InstanceId(Arc<str>);

impl InstanceId {
    /// An id a caller chose: 1–100 characters of `[A-Za-z0-9_-]`, not
    /// starting with `-`.
    pub fn new(id: &str) -> Result<InstanceId> {
        check_chosen(id)?;
        Ok(InstanceId(Arc::from(id)))
    }

    /// Any well-formed id, chosen or derived: for looking an instance up.
    pub fn parse(id: &str) -> Result<InstanceId> {
        check_any(id)?;
        Ok(InstanceId(Arc::from(id)))
    }

    /// The id of an instance the store holds, as stored: not checked
    /// again (a store written by the first release may hold ids that
    /// today's grammar would refuse).
    pub(crate) fn stored(id: &str) -> InstanceId {
        InstanceId(Arc::from(id))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the engine derived it from another id (a child's, a tick's).
    pub fn is_derived(&self) -> bool {
        self.0.contains('.')
    }

    /// The id of the child that call `name` starts, at its `occurrence`,
    /// in generation `generation` and run `run` of this instance.
    #[allow(dead_code)] // child workflows use it
    pub(crate) fn child(&self, name: &str, occurrence: u32, generation: u32, run: u32) -> Self {
        derive(
            self.as_str(),
            name,
            &[('o', occurrence), ('g', generation), ('r', run)],
        )
    }

    /// The id of schedule `schedule`'s tick at `at` (seconds since the
    /// Unix epoch, UTC); `manual` counts the extra runs started by hand
    /// for that time (0 for the tick itself).
    pub(crate) fn tick(schedule: &str, at: i64, manual: u32) -> Self {
        derive(schedule, &utc_stamp(at), &[('m', manual)])
    }
}

/// `base.part~counters`, shortened with a hash when over the limit.
fn derive(base: &str, part: &str, counters: &[(char, u32)]) -> InstanceId {
    let mut id = format!("{base}.{part}");
    let counters: String = counters
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(tag, n)| format!("{tag}{n}"))
        .collect();
    if !counters.is_empty() {
        id.push('~');
        id.push_str(&counters);
    }
    if id.len() > MAX_ID {
        let hash = fnv1a(id.as_bytes());
        id.truncate(KEPT_WHEN_HASHED);
        id.push_str(&format!("~h{hash:016x}"));
    }
    InstanceId(Arc::from(id))
}

/// `YYYYMMDDThhmmssZ` of `at` seconds since the epoch (proleptic
/// Gregorian calendar, UTC).
fn utc_stamp(at: i64) -> String {
    let days = at.div_euclid(86_400);
    let secs = at.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// The 64-bit FNV-1a hash: stable across releases and platforms.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn check_chosen(id: &str) -> Result<()> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    check(id, allowed, "it contains a character outside [A-Za-z0-9_-]")
}

fn check_any(id: &str) -> Result<()> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'~');
    check(
        id,
        allowed,
        "it contains a character outside [A-Za-z0-9_.~-]",
    )?;
    if id.contains("..") {
        return Err(invalid(id, "it contains \"..\""));
    }
    Ok(())
}

fn check(id: &str, allowed: impl Fn(u8) -> bool, outside: &'static str) -> Result<()> {
    let reason = if id.is_empty() {
        "it is empty"
    } else if id.len() > MAX_ID {
        "it is longer than 100 characters"
    } else if !id.bytes().all(allowed) {
        outside
    } else if id.starts_with(['-', '.', '~']) {
        "it starts with '-', '.' or '~'"
    } else {
        return Ok(());
    };
    Err(invalid(id, reason))
}

fn invalid(id: &str, reason: &'static str) -> Error {
    Error::InvalidInstanceId {
        id: id.chars().take(120).collect(),
        reason,
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl AsRef<str> for InstanceId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for InstanceId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for InstanceId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for InstanceId {
    type Error = Error;

    fn try_from(id: String) -> Result<InstanceId> {
        check_any(&id)?;
        Ok(InstanceId(Arc::from(id)))
    }
}

impl From<InstanceId> for String {
    fn from(id: InstanceId) -> String {
        id.0.to_string()
    }
}

impl std::str::FromStr for InstanceId {
    type Err = Error;

    fn from_str(id: &str) -> Result<InstanceId> {
        InstanceId::parse(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chosen_ids_follow_the_grammar() {
        assert!(InstanceId::new("transfer-42").is_ok());
        assert!(InstanceId::new("_x").is_ok());
        assert!(InstanceId::new(&"a".repeat(100)).is_ok());
        for bad in ["", "-a", "a.b", "a~b", "a/b", "a b", "ü", &"a".repeat(101)] {
            assert!(InstanceId::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn derived_ids_are_documented_and_never_chosen_ones() {
        let trip = InstanceId::new("trip-9").unwrap();
        let flight = trip.child("book-flight", 0, 0, 0);
        assert_eq!(flight.as_str(), "trip-9.book-flight");
        assert_eq!(
            trip.child("book-flight", 1, 2, 0).as_str(),
            "trip-9.book-flight~o1g2"
        );
        assert_eq!(
            flight.child("pay", 0, 0, 3).as_str(),
            "trip-9.book-flight.pay~r3"
        );
        assert!(flight.is_derived() && !trip.is_derived());
        assert!(InstanceId::new(flight.as_str()).is_err());
        assert_eq!(InstanceId::parse(flight.as_str()).unwrap(), flight);
        // 2030-10-12 02:00:00 UTC.
        let tick = InstanceId::tick("nightly", 1_918_000_800, 0);
        assert_eq!(tick.as_str(), "nightly.20301012T020000Z");
        assert_eq!(
            InstanceId::tick("nightly", 1_918_000_800, 2).as_str(),
            "nightly.20301012T020000Z~m2"
        );
        assert_eq!(
            InstanceId::tick("nightly", 0, 0).as_str(),
            "nightly.19700101T000000Z"
        );
    }

    #[test]
    fn a_long_derived_id_is_shortened_with_its_hash() {
        let parent = InstanceId::new(&"p".repeat(95)).unwrap();
        let a = parent.child("book-flight", 0, 0, 0);
        let b = parent.child("book-hotel", 0, 0, 0);
        assert_eq!(a.len(), MAX_ID);
        assert_ne!(a, b);
        assert!(a.as_str().starts_with(&"p".repeat(82)));
        assert!(InstanceId::parse(a.as_str()).is_ok());
        // Stable: the hash is part of the stored id.
        assert_eq!(a, parent.child("book-flight", 0, 0, 0));
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn lookups_refuse_what_no_grammar_makes() {
        for bad in [".a", "~a", "a..b", "a/b", "a:b", "a#1", "a@2"] {
            assert!(InstanceId::parse(bad).is_err(), "{bad:?}");
        }
    }
}
