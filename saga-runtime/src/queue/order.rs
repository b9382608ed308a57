//! Which waiting instances take the free slots of a queue: the highest
//! priority first; within a priority, keys take turns (the key served
//! longest ago goes first, so one key with 10,000 waiting does not starve
//! the others); within a key, first come first served. No pick takes a
//! key past its limit, the queue past its concurrency or its rate, or
//! this worker past its capacity.
//!
//! One piece of code for both stores: a store of one process keeps its
//! waiting instances in memory ([`Local`]); a store shared by workers
//! reads them, and what holds slots, in the transaction that takes them.

use std::collections::{BTreeMap, HashMap};

use super::Limits;
use super::rate::{Rate, Window};

/// An instance waiting for a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Waiting {
    pub(crate) id: String,
    pub(crate) key: Option<String>,
    pub(crate) priority: i32,
    /// First come, first served: lower goes first.
    pub(crate) order: u64,
}

/// The slots of a queue held now.
#[derive(Clone, Debug, Default)]
pub(crate) struct Held {
    /// By every worker.
    pub(crate) total: u32,
    /// By this one.
    pub(crate) here: u32,
    /// By key, by every worker.
    pub(crate) by_key: HashMap<String, u32>,
}

/// When each key was last served: the higher, the more recently. A key
/// never served (or forgotten) goes first.
pub(crate) type Turns = HashMap<Option<String>, u64>;

/// Picks, from `waiting`, the instances that take free slots now, in the
/// order they take them, at most `starts` of them (what the queue's rate
/// allows now); `held` and `turns` are updated with each pick.
pub(crate) fn pick(
    waiting: &[Waiting],
    limits: Limits,
    starts: u32,
    held: &mut Held,
    turns: &mut Turns,
) -> Vec<String> {
    let mut taken = vec![false; waiting.len()];
    let mut picked = Vec::new();
    while held.total < limits.concurrency
        && held.here < limits.per_worker
        && picked.len() < starts as usize
    {
        let Some(next) = best(waiting, &taken, limits, held, turns) else {
            break;
        };
        taken[next] = true;
        let chosen = &waiting[next];
        held.total += 1;
        held.here += 1;
        if let Some(key) = &chosen.key {
            *held.by_key.entry(key.clone()).or_default() += 1;
        }
        let turn = turns.values().copied().max().unwrap_or(0) + 1;
        turns.insert(chosen.key.clone(), turn);
        picked.push(chosen.id.clone());
    }
    picked
}

/// The index of the instance that goes next, if any may.
fn best(
    waiting: &[Waiting],
    taken: &[bool],
    limits: Limits,
    held: &Held,
    turns: &Turns,
) -> Option<usize> {
    let eligible = |w: &Waiting| {
        w.key
            .as_ref()
            .is_none_or(|k| held.by_key.get(k).copied().unwrap_or(0) < limits.per_key)
    };
    let candidates = || {
        waiting
            .iter()
            .enumerate()
            .filter(|(i, w)| !taken[*i] && eligible(w))
    };
    let priority = candidates().map(|(_, w)| w.priority).max()?;
    candidates()
        .filter(|(_, w)| w.priority == priority)
        .min_by_key(|(_, w)| (turns.get(&w.key).copied().unwrap_or(0), w.order))
        .map(|(i, _)| i)
}

/// The queue of a store of one process, in memory: rebuilt from the
/// journals on open (`run::dequeue`), told of each instance that waits
/// and of each that stops holding its slot.
#[derive(Debug, Default)]
pub(crate) struct Local {
    /// By id.
    waiting: BTreeMap<String, Waiting>,
    /// The instances holding a slot, and their keys.
    holders: BTreeMap<String, Option<String>>,
    turns: Turns,
    /// The latest starts, for the queue's rate.
    window: Window,
}

impl Local {
    /// `waiting` waits for a slot (again, after a restart).
    pub(crate) fn wait(&mut self, waiting: Waiting) {
        self.holders.remove(&waiting.id);
        self.waiting.insert(waiting.id.clone(), waiting);
    }

    /// `waiting` waits for a slot, unless it holds one here: told from a
    /// read that may be stale, it leaves a holder be (only
    /// [`Local::wait`] puts one back).
    pub(crate) fn arrive(&mut self, waiting: Waiting) {
        if !self.holders.contains_key(&waiting.id) {
            self.waiting.insert(waiting.id.clone(), waiting);
        }
    }

    /// Instance `id` holds a slot.
    pub(crate) fn hold(&mut self, id: &str, key: Option<String>) {
        self.waiting.remove(id);
        self.holders.insert(id.to_owned(), key);
    }

    /// Instance `id` neither waits nor holds a slot (it ended, or was
    /// removed, or is paused while it waited).
    pub(crate) fn forget(&mut self, id: &str) {
        self.waiting.remove(id);
        self.holders.remove(id);
    }

    /// The instances holding a slot.
    pub(crate) fn holders(&self) -> Vec<String> {
        self.holders.keys().cloned().collect()
    }

    /// An instance of the queue took its slot at `at` (its `Dequeued`
    /// record's time), for the queue's rate.
    pub(crate) fn started(&mut self, at: u64, rate: Rate) {
        self.window.started(at, rate);
    }

    /// When the rate lets the next waiting instance start, if it holds
    /// one back at `now`.
    pub(crate) fn opens_at(&self, rate: Rate, now: u64) -> Option<u64> {
        if self.waiting.is_empty() {
            return None;
        }
        self.window.opens_at(rate, now)
    }

    /// The instances that take free slots at `now`, of those `runnable`
    /// says this engine can run, in order; each then holds its slot here
    /// until [`Local::forget`] or [`Local::wait`]. Their starts count
    /// against the rate once taken ([`Local::started`]).
    pub(crate) fn pick(
        &mut self,
        limits: Limits,
        now: u64,
        runnable: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let mut held = Held {
            total: u32::try_from(self.holders.len()).unwrap_or(u32::MAX),
            ..Held::default()
        };
        held.here = held.total;
        for key in self.holders.values().flatten() {
            *held.by_key.entry(key.clone()).or_default() += 1;
        }
        let mut waiting: Vec<Waiting> = self
            .waiting
            .values()
            .filter(|w| runnable(&w.id))
            .cloned()
            .collect();
        waiting.sort_by_key(|w| w.order);
        let starts = limits
            .rate
            .map_or(u32::MAX, |rate| self.window.room(rate, now));
        let picked = pick(&waiting, limits, starts, &mut held, &mut self.turns);
        for id in &picked {
            if let Some(w) = self.waiting.remove(id) {
                self.holders.insert(w.id, w.key);
            }
        }
        picked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(id: &str, key: Option<&str>, priority: i32, order: u64) -> Waiting {
        Waiting {
            id: id.into(),
            key: key.map(str::to_owned),
            priority,
            order,
        }
    }

    fn limits(concurrency: u32, per_key: u32) -> Limits {
        Limits {
            concurrency,
            per_key,
            per_worker: u32::MAX,
            rate: None,
            release_while_waiting: false,
        }
    }

    #[test]
    fn priority_first_then_first_come() {
        let queue = [
            waiting("a", None, 0, 1),
            waiting("b", None, 5, 2),
            waiting("c", None, 5, 3),
            waiting("d", None, 0, 4),
        ];
        let picked = pick(
            &queue,
            limits(10, 10),
            u32::MAX,
            &mut Held::default(),
            &mut Turns::new(),
        );
        assert_eq!(picked, ["b", "c", "a", "d"]);
    }

    #[test]
    fn keys_take_turns_and_respect_their_limit() {
        let mut queue: Vec<Waiting> = (0..5)
            .map(|n| waiting(&format!("a{n}"), Some("a"), 0, n))
            .collect();
        queue.push(waiting("b0", Some("b"), 0, 10));
        queue.push(waiting("b1", Some("b"), 0, 11));
        let picked = pick(
            &queue,
            limits(4, 10),
            u32::MAX,
            &mut Held::default(),
            &mut Turns::new(),
        );
        assert_eq!(picked, ["a0", "b0", "a1", "b1"]);
        let mut held = Held::default();
        let picked = pick(
            &queue,
            limits(10, 1),
            u32::MAX,
            &mut held,
            &mut Turns::new(),
        );
        assert_eq!(picked, ["a0", "b0"]);
        assert_eq!(held.total, 2);
    }

    #[test]
    fn a_full_queue_picks_nothing() {
        let queue = [waiting("a", None, 0, 1)];
        let mut held = Held {
            total: 2,
            ..Held::default()
        };
        assert!(pick(&queue, limits(2, 1), u32::MAX, &mut held, &mut Turns::new()).is_empty());
    }

    #[test]
    fn no_more_start_than_the_rate_allows() {
        let queue = [waiting("a", None, 0, 1), waiting("b", None, 0, 2)];
        let picked = pick(
            &queue,
            limits(10, 10),
            1,
            &mut Held::default(),
            &mut Turns::new(),
        );
        assert_eq!(picked, ["a"]);
    }
}
