//! An instance's place in a queue, folded from its journal
//! (`CreatedOnQueue`, `Dequeued`, `Restarted`): which queue, its key and
//! priority, and whether it holds a slot. Slots are derived from this
//! alone: an instance holds one while it is taken and not finished, so a
//! crash never leaks one.

use serde::{Deserialize, Serialize};

use crate::model::status::Status;

/// Where an instance stands in its queue. Also kept, whole, in the index
/// facts (`list()` filters on the queue, a shared store's columns on
/// the rest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct QueueSpot {
    pub(crate) queue: String,
    pub(crate) key: Option<String>,
    pub(crate) priority: i32,
    /// Its place among the queue's instances of equal priority (on a
    /// store of one process).
    pub(crate) order: u64,
    /// It took a slot (`Dequeued`), and has not been put back since.
    pub(crate) taken: bool,
}

impl QueueSpot {
    /// Whether an instance in `status` waits for a slot: a paused one
    /// waits too, but is not taken before it is resumed.
    pub(crate) fn waits(&self, status: Status) -> bool {
        !self.taken && !status.is_terminal()
    }

    /// Whether an instance in `status` holds a slot of its queue: from
    /// its dequeue until it ends (paused, waiting or rolling back, it
    /// keeps it).
    pub(crate) fn holds_slot(&self, status: Status) -> bool {
        self.taken && !status.is_terminal()
    }
}

/// What a start on a queue asks for: see `Engine::start_on`.
#[derive(Clone, Debug)]
pub(crate) struct Enqueue {
    pub(crate) queue: String,
    pub(crate) key: Option<String>,
    pub(crate) priority: i32,
}

/// Hands out the places of instances in their queues on a store of one
/// process: growing with the clock (`now_ms` scaled, so places survive a
/// restart in order) and never twice.
#[derive(Debug, Default)]
pub(crate) struct Places {
    last: std::sync::atomic::AtomicU64,
}

impl Places {
    /// The next place, at `now_ms` on the engine's clock.
    pub(crate) fn next(&self, now_ms: u64) -> u64 {
        use std::sync::atomic::Ordering;
        let floor = now_ms.saturating_mul(1024);
        let mut last = self.last.load(Ordering::SeqCst);
        loop {
            let next = floor.max(last.saturating_add(1));
            match self
                .last
                .compare_exchange(last, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return next,
                Err(now) => last = now,
            }
        }
    }
}
