//! A queue's limits as the store keeps them, one value per queue name,
//! so that every worker on a store runs a queue with the same limits.
//!
//! - On a store shared by workers (PostgreSQL), the first worker to
//!   declare a queue stores its limits; a worker that declares other
//!   limits is refused when it connects ([`Error::QueueLimitsDiffer`]),
//!   unless its declaration says it replaces them
//!   ([`Queue::replaces_stored_limits`]). Every take of a queue's
//!   instances reads the stored limits, so a change made while workers
//!   run ([`Engine::set_queue_limits`](crate::Engine::set_queue_limits),
//!   `saga queues set`) holds for each of them from its next take.
//! - On a store of one process (sled), the process cannot disagree with
//!   itself: the declared limits replace the stored ones, and a change is
//!   logged.
//!
//! A worker's capacity ([`Queue::per_worker`]) is its own, and not
//! stored. Every change is a compare-and-swap of the whole value, as a
//! schedule's is.
//!
//! Encoded as the engine's records are (`codec::encode_record`: a format
//! version byte, then bincode), golden bytes below. A value of a newer
//! layout is refused, and left as it is.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Queue, QueueLimits};
use crate::error::{Error, Result};

/// The limits every worker shares, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SharedLimits {
    concurrency: Option<u32>,
    per_key: Option<u32>,
    /// At most `.0` starts in any window of `.1` milliseconds.
    rate: Option<(u32, u64)>,
    release_while_waiting: bool,
}

impl SharedLimits {
    /// What `queue` declares that every worker shares.
    pub(crate) fn of(queue: &Queue) -> SharedLimits {
        let declared = queue.declared();
        SharedLimits {
            concurrency: declared.concurrency,
            per_key: declared.per_key,
            rate: declared
                .rate
                .map(|(n, per)| (n, u64::try_from(per.as_millis()).unwrap_or(u64::MAX))),
            release_while_waiting: declared.release_while_waiting,
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        crate::codec::encode_record(self)
    }

    pub(crate) fn decode(queue: &str, bytes: &[u8]) -> Result<SharedLimits> {
        crate::codec::decode_record(bytes).map_err(|detail| Error::Corrupt {
            what: format!("the stored limits of queue {queue:?}"),
            detail,
        })
    }

    /// `limits` (a worker's own) with these in their place: the worker's
    /// capacity and slot-keeping are its declaration's. A PostgreSQL take
    /// takes by them.
    #[cfg(any(feature = "postgres", test))]
    pub(crate) fn over(&self, limits: super::Limits) -> super::Limits {
        super::Limits {
            concurrency: self.concurrency.unwrap_or(u32::MAX),
            per_key: self.per_key.unwrap_or(u32::MAX),
            rate: self
                .rate
                .and_then(|(n, ms)| super::rate::Rate::new(n, Duration::from_millis(ms))),
            ..limits
        }
    }

    /// What a person reads of them, as declared.
    pub(crate) fn limits(&self) -> QueueLimits {
        QueueLimits {
            concurrency: self.concurrency,
            per_key: self.per_key,
            per_worker: None,
            rate: self.rate.map(|(n, ms)| (n, Duration::from_millis(ms))),
            release_while_waiting: self.release_while_waiting,
        }
    }

    /// As a person reads them: "concurrency 5, per key 1, ...".
    pub(crate) fn describe(&self) -> String {
        self.limits().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stored bytes never change: workers of two releases share them.
    #[test]
    fn golden_bytes() {
        let queue = Queue::new("bank-api")
            .concurrency(5)
            .per_key(1)
            .per_worker(3)
            .rate_limit(100, Duration::from_secs(1))
            .release_while_waiting();
        let limits = SharedLimits::of(&queue);
        assert_eq!(limits.encode(), [2, 1, 5, 1, 1, 1, 100, 251, 232, 3, 1]);
        assert_eq!(
            SharedLimits::decode("bank-api", &limits.encode()).unwrap(),
            limits
        );
        let none = SharedLimits::of(&Queue::new("idle"));
        assert_eq!(none.encode(), [2, 0, 0, 0, 0]);
    }

    #[test]
    fn a_worker_keeps_its_own_capacity() {
        let mine = Queue::new("q").per_worker(4).concurrency(2).limits();
        let stored = SharedLimits::of(&Queue::new("q").concurrency(7));
        let taken_by = stored.over(mine);
        assert_eq!(taken_by.concurrency, 7);
        assert_eq!(taken_by.per_worker, 4);
    }
}
