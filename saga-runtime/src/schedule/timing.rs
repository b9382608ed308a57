//! When a schedule's ticks fall: a cron expression read in a time zone,
//! or a fixed interval counted from the Unix epoch. Ticks are whole
//! seconds since the epoch, UTC.
//!
//! Daylight saving, for cron: a local time that does not exist (the clock
//! springs forward over it) fires once, at the first instant after the
//! gap; a local time that happens twice (the clock falls back) fires
//! once, at its first occurrence. So in America/New_York, `30 2 * * *`
//! fires at 03:00 EDT on 2030-03-10 and `30 1 * * *` at 01:30 EDT (not
//! again at 01:30 EST) on 2030-11-03.

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone};

use super::cron::Cron;

/// When ticks fall.
#[derive(Clone, Debug)]
pub(crate) enum Timing {
    /// A cron expression's matches in a time zone.
    Cron { cron: Cron, zone: TimeZone },
    /// `offset + k * every`, in seconds since the epoch.
    Every { every: i64, offset: i64 },
}

/// How many matches of a cron expression the search for the next tick
/// passes over (a fold's repeated hour, the current minute) before it
/// gives up.
const MAX_PASSED: usize = 4096;

impl Timing {
    /// The first tick strictly after `after` (seconds since the epoch);
    /// `None` when there is none within the years a search covers.
    pub(crate) fn next_after(&self, after: i64) -> Option<i64> {
        match self {
            Timing::Every { every, offset } => {
                let k = (after - offset).div_euclid(*every) + 1;
                k.checked_mul(*every)?.checked_add(*offset)
            }
            Timing::Cron { cron, zone } => next_cron_after(cron, zone, after),
        }
    }
}

/// How long after its time schedule `name`'s tick at `at` (seconds)
/// fires, milliseconds in `[0, jitter_ms)`: a hash of the name and the
/// time, so every worker, every run and every release agrees (FNV-1a,
/// then SplitMix64's finalizer to spread the low bits; pinned by a test,
/// since a change would move ticks workers already agree on).
pub(crate) fn jitter_delay(name: &str, at: i64, jitter_ms: u64) -> u64 {
    if jitter_ms == 0 {
        return 0;
    }
    let mut bytes = Vec::with_capacity(name.len() + 9);
    bytes.extend_from_slice(name.as_bytes());
    // Not a name's character: "a" at 1 and "a1" at 0 hash apart.
    bytes.push(b'.');
    bytes.extend_from_slice(&at.to_le_bytes());
    let mut z = crate::names::id::fnv1a(&bytes);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % jitter_ms
}

fn next_cron_after(cron: &Cron, zone: &TimeZone, after: i64) -> Option<i64> {
    let local = zone.to_datetime(Timestamp::from_second(after).ok()?);
    let mut from = local.date().at(local.hour(), local.minute(), 0, 0);
    for _ in 0..MAX_PASSED {
        let matched = cron.next_match(from)?;
        let at = instant_of(zone, matched)?;
        if at > after {
            return Some(at);
        }
        // Passed already: this minute, or its second occurrence in a fold.
        from = matched
            .checked_add(jiff::SignedDuration::from_mins(1))
            .ok()?;
    }
    None
}

/// The instant a local time fires at: itself; in a gap, the first instant
/// after the gap; in a fold, its first occurrence.
fn instant_of(zone: &TimeZone, local: DateTime) -> Option<i64> {
    let at = match zone.to_ambiguous_timestamp(local).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(local).ok()?,
        AmbiguousOffset::Fold { before, .. } => before.to_timestamp(local).ok()?,
        AmbiguousOffset::Gap { after, .. } => {
            // With the offset after the gap the time reads as an instant
            // before the transition: the transition is the next one.
            let before_gap = after.to_timestamp(local).ok()?;
            zone.following(before_gap).next()?.timestamp()
        }
    };
    Some(at.as_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> i64 {
        text.parse::<Timestamp>().unwrap().as_second()
    }

    fn cron(expression: &str, zone: &str) -> Timing {
        Timing::Cron {
            cron: Cron::parse(expression).unwrap(),
            zone: TimeZone::get(zone).unwrap(),
        }
    }

    /// The ticks from `from` (exclusive) to `until` (inclusive).
    fn ticks(timing: &Timing, from: &str, until: &str) -> Vec<i64> {
        let (mut at, until) = (utc(from), utc(until));
        let mut out = Vec::new();
        while let Some(next) = timing.next_after(at).filter(|n| *n <= until) {
            out.push(next);
            at = next;
        }
        out
    }

    #[test]
    fn intervals_count_from_the_epoch_with_their_offset() {
        let quarter = Timing::Every {
            every: 900,
            offset: 0,
        };
        assert_eq!(quarter.next_after(0), Some(900));
        assert_eq!(quarter.next_after(899), Some(900));
        assert_eq!(quarter.next_after(900), Some(1800));
        let offset = Timing::Every {
            every: 900,
            offset: 300,
        };
        assert_eq!(offset.next_after(0), Some(300));
        assert_eq!(offset.next_after(300), Some(1200));
        assert_eq!(offset.next_after(-1000), Some(-600));
    }

    #[test]
    fn a_jitter_delay_is_pinned_and_within_the_jitter() {
        assert_eq!(jitter_delay("nightly", 1_893_456_000, 0), 0);
        let delays: Vec<u64> = (0..4)
            .map(|k| jitter_delay("nightly", 1_893_456_000 + k * 3600, 600_000))
            .collect();
        assert_eq!(
            delays,
            [339_605, 362_533, 126_261, 491_234],
            "the jitter delays changed"
        );
        for k in 0..1000 {
            assert!(jitter_delay("r", k, 1000) < 1000);
        }
        // Spread over the window, not bunched at its start.
        let late = (0..1000)
            .filter(|k| jitter_delay("r", *k, 1000) >= 500)
            .count();
        assert!((400..600).contains(&late), "{late}");
    }

    #[test]
    fn cron_reads_local_time_in_its_zone() {
        let nightly = cron("0 2 * * *", "Europe/Paris");
        // 02:00 in Paris in winter is 01:00 UTC, in summer 00:00 UTC.
        assert_eq!(
            nightly.next_after(utc("2030-01-01T00:00:00Z")),
            Some(utc("2030-01-01T01:00:00Z"))
        );
        assert_eq!(
            nightly.next_after(utc("2030-07-01T00:00:00Z")),
            Some(utc("2030-07-02T00:00:00Z"))
        );
    }

    #[test]
    fn a_time_in_the_spring_gap_fires_once_after_it() {
        // America/New_York springs forward at 02:00 EST (07:00 UTC) on 2030-03-10.
        let timing = cron("30 2 * * *", "America/New_York");
        assert_eq!(
            ticks(&timing, "2030-03-09T12:00:00Z", "2030-03-11T12:00:00Z"),
            vec![utc("2030-03-10T07:00:00Z"), utc("2030-03-11T06:30:00Z")]
        );
        // Two times in the gap make one tick.
        let both = cron("0,30 2 * * *", "America/New_York");
        assert_eq!(
            ticks(&both, "2030-03-10T05:00:00Z", "2030-03-10T12:00:00Z"),
            vec![utc("2030-03-10T07:00:00Z")]
        );
    }

    #[test]
    fn a_time_in_the_autumn_fold_fires_once_at_its_first() {
        // America/New_York falls back at 02:00 EDT (06:00 UTC) on 2030-11-03.
        let timing = cron("30 1 * * *", "America/New_York");
        assert_eq!(
            ticks(&timing, "2030-11-02T12:00:00Z", "2030-11-04T12:00:00Z"),
            vec![utc("2030-11-03T05:30:00Z"), utc("2030-11-04T06:30:00Z")]
        );
        // Every half hour: 01:00 and 01:30 once each, 02:00 EST after them.
        let half = cron("*/30 * * * *", "America/New_York");
        assert_eq!(
            ticks(&half, "2030-11-03T04:45:00Z", "2030-11-03T07:00:00Z"),
            vec![
                utc("2030-11-03T05:00:00Z"),
                utc("2030-11-03T05:30:00Z"),
                utc("2030-11-03T07:00:00Z"),
            ]
        );
    }
}
