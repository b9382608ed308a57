//! A queue's rate limit: at most `starts` instances take a slot in any
//! window of `per`, on the engine's clock. A start is a `Dequeued`
//! record; its time is the record's.
//!
//! One piece of code for both stores: a store of one process keeps the
//! latest starts of each queue in memory, rebuilt from the journals on
//! open; a store shared by workers reads them, in the transaction that
//! takes, from its table of starts.

use std::collections::VecDeque;
use std::time::Duration;

/// At most `starts` starts in any window of `per_ms` milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rate {
    pub(crate) starts: u32,
    pub(crate) per_ms: u64,
}

impl Rate {
    /// `starts` per `per`, if both are at least 1 (and `per` at least a
    /// millisecond, the unit times are stored in).
    pub(crate) fn new(starts: u32, per: Duration) -> Option<Rate> {
        let per_ms = u64::try_from(per.as_millis()).unwrap_or(u64::MAX);
        (starts > 0 && per_ms > 0).then_some(Rate { starts, per_ms })
    }

    /// The first instant a start at `at` no longer counts: a window is
    /// `(now - per, now]`.
    fn expires(&self, at: u64) -> u64 {
        at.saturating_add(self.per_ms)
    }
}

/// The latest starts of a queue, oldest first; at most `rate.starts` of
/// them, since only those can still fill a window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Window {
    starts: VecDeque<u64>,
}

impl Window {
    /// An instance took a slot at `at` (the latest starts are kept,
    /// whatever the order they are told in).
    pub(crate) fn started(&mut self, at: u64, rate: Rate) {
        let place = self.starts.partition_point(|&t| t <= at);
        self.starts.insert(place, at);
        while self.starts.len() > rate.starts as usize {
            self.starts.pop_front();
        }
    }

    /// How many may start at `now`.
    pub(crate) fn room(&self, rate: Rate, now: u64) -> u32 {
        let counted = self
            .starts
            .iter()
            .filter(|&&t| rate.expires(t) > now)
            .count();
        rate.starts
            .saturating_sub(u32::try_from(counted).unwrap_or(u32::MAX))
    }

    /// When one more may start, if none may at `now`: when the oldest of
    /// the `rate.starts` latest starts leaves the window.
    pub(crate) fn opens_at(&self, rate: Rate, now: u64) -> Option<u64> {
        if self.room(rate, now) > 0 {
            return None;
        }
        self.starts.front().map(|&t| rate.expires(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_a_minute() -> Rate {
        Rate::new(2, Duration::from_secs(60)).unwrap()
    }

    #[test]
    fn a_window_counts_the_starts_of_the_last_period() {
        let rate = two_a_minute();
        let mut window = Window::default();
        assert_eq!(window.room(rate, 0), 2);
        window.started(1_000, rate);
        assert_eq!(window.room(rate, 1_000), 1);
        window.started(1_000, rate);
        assert_eq!(window.room(rate, 1_000), 0);
        assert_eq!(window.opens_at(rate, 1_000), Some(61_000));
        assert_eq!(window.room(rate, 60_999), 0);
        assert_eq!(window.room(rate, 61_000), 2);
        assert_eq!(window.opens_at(rate, 61_000), None);
    }

    #[test]
    fn only_the_latest_starts_are_kept_and_their_order_does_not_matter() {
        let rate = two_a_minute();
        let of = |times: &[u64]| {
            let mut window = Window::default();
            for &at in times {
                window.started(at, rate);
            }
            window
        };
        let window = of(&[30_000, 1_000, 20_000]);
        assert_eq!(window, of(&[20_000, 30_000]));
        assert_eq!(window.opens_at(rate, 30_000), Some(80_000));
        assert_eq!(window.room(rate, 80_000), 1);
    }

    #[test]
    fn nothing_and_no_time_are_no_rate() {
        assert_eq!(Rate::new(0, Duration::from_secs(1)), None);
        assert_eq!(Rate::new(1, Duration::ZERO), None);
        assert_eq!(Rate::new(1, Duration::from_micros(999)), None);
        assert!(Rate::new(1, Duration::from_millis(1)).is_some());
    }
}
