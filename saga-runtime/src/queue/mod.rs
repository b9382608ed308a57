//! Flow control: the queues an engine declares, and the order in which
//! their waiting instances take slots.
//!
//! A queue is declared on the builder, the same on every worker:
//! `Engine::builder().queue(Queue::new("bank-api").concurrency(10))`.
//! `Engine::start_on` creates an instance waiting in a queue; it gets a
//! driver only when it takes a slot, and holds the slot until it ends.
//! Slots are derived from the instances' journals (taken, not finished),
//! so a crash never leaks one.
//!
//! Which waiting instance goes next: the highest priority, then keys in
//! turn, then first come first served; a rate limit counts starts. The
//! guide's queues chapter says each rule in full; [`QueueDepth`] is what
//! `Engine::queue_depths` counts.

mod depth;
pub(crate) mod order;
pub(crate) mod rate;
pub(crate) mod stored;

pub use depth::QueueDepth;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Error, Result};

/// A queue of instances waiting for a slot, with its limits; declared with
/// [`EngineBuilder::queue`](crate::EngineBuilder::queue), started on with
/// [`Engine::start_on`](crate::Engine::start_on).
///
/// Without limits, every queued instance runs at once. A limit of 0 is
/// refused when the engine opens ([`Error::InvalidQueue`]).
///
/// ```
/// # use saga_runtime::queue::Queue;
/// # use std::time::Duration;
/// // At most 10 transfers against the bank's API at once, one per
/// // customer, 4 on any one worker, and 100 begun per second.
/// let bank = Queue::new("bank-api")
///     .concurrency(10)
///     .per_key(1)
///     .per_worker(4)
///     .rate_limit(100, Duration::from_secs(1));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Queue {
    pub(crate) name: String,
    concurrency: Option<u32>,
    per_key: Option<u32>,
    per_worker: Option<u32>,
    /// At most `.0` starts in any window of `.1`.
    rate: Option<(u32, Duration)>,
    release_while_waiting: bool,
    /// Its limits replace those the store holds (see
    /// [`Queue::replaces_stored_limits`]).
    pub(crate) replaces_stored: bool,
}

impl Queue {
    /// A queue named `name` (the step-name grammar: 1-64 characters of
    /// `[a-z0-9-]`), without limits.
    pub fn new(name: impl Into<String>) -> Queue {
        Queue {
            name: name.into(),
            concurrency: None,
            per_key: None,
            per_worker: None,
            rate: None,
            release_while_waiting: false,
            replaces_stored: false,
        }
    }

    /// At most `n` instances of the queue hold a slot at once, across all
    /// workers.
    pub fn concurrency(mut self, n: u32) -> Queue {
        self.concurrency = Some(n);
        self
    }

    /// At most `n` instances started with one key
    /// ([`StartOn::key`](crate::StartOn::key)) hold a slot at once.
    /// Instances started without a key are not limited by it.
    pub fn per_key(mut self, n: u32) -> Queue {
        self.per_key = Some(n);
        self
    }

    /// At most `n` instances of the queue run on one worker at once: its
    /// capacity. On a store of one process it is one more global limit.
    pub fn per_worker(mut self, n: u32) -> Queue {
        self.per_worker = Some(n);
        self
    }

    /// At most `n` instances of the queue start (take a slot) in any
    /// window of length `per`, across all workers, on the engine's clock.
    /// One held back waits `Queued`, in its order, and starts when the
    /// window allows. Ends do not count: it limits how often work begins,
    /// not how much runs (that is [`concurrency`](Queue::concurrency)).
    /// `per` is counted in whole milliseconds.
    pub fn rate_limit(mut self, n: u32, per: Duration) -> Queue {
        self.rate = Some((n, per));
        self
    }

    /// An instance gives its slot back while it only waits: a sleep, an
    /// event wait or a wait for a child workflow that lasts a second or
    /// more (the time after which a driver that only waits lets go of
    /// its instance). When the wait is over, the instance waits in the
    /// queue again (`Queued`, in its first place among its priority and
    /// key) and goes on from the wait once it takes a slot. Without it, a
    /// slot is held from the instance's dequeue to its end.
    ///
    /// For a queue whose limit protects something the workflow holds
    /// between its steps (a lock, a session), keep the default; for one
    /// that limits calls to an API, a sleeping instance need not hold a
    /// slot. Each time it takes a slot again counts as a start for the
    /// queue's [`rate_limit`](Queue::rate_limit).
    pub fn release_while_waiting(mut self) -> Queue {
        self.release_while_waiting = true;
        self
    }

    /// Its limits replace those the store holds for the queue, where they
    /// differ, when the engine opens.
    ///
    /// The store keeps each queue's limits, so that every worker runs it
    /// with the same ones. A worker connecting to PostgreSQL that declares
    /// other limits than those stored is refused
    /// ([`Error::QueueLimitsDiffer`]); with this, it stores its own
    /// instead, and every running worker takes by them from its next take
    /// of the queue's instances. Use it in the release that changes a
    /// limit (or change it first with
    /// [`Engine::set_queue_limits`](crate::Engine::set_queue_limits) or
    /// `saga queues set`, then deploy the new declaration). On sled, where
    /// one process cannot disagree with itself, the declared limits always
    /// replace the stored ones.
    pub fn replaces_stored_limits(mut self) -> Queue {
        self.replaces_stored = true;
        self
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it declares, for an operator's view (`saga queues`).
    pub fn declared(&self) -> QueueLimits {
        QueueLimits {
            concurrency: self.concurrency,
            per_key: self.per_key,
            per_worker: self.per_worker,
            rate: self.rate,
            release_while_waiting: self.release_while_waiting,
        }
    }

    /// Its limits, once checked (see [`Queues::new`]).
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            concurrency: self.concurrency.unwrap_or(u32::MAX),
            per_key: self.per_key.unwrap_or(u32::MAX),
            per_worker: self.per_worker.unwrap_or(u32::MAX),
            rate: self.rate.and_then(|(n, per)| rate::Rate::new(n, per)),
            release_while_waiting: self.release_while_waiting,
        }
    }

    /// Refuses a bad name or a limit of 0.
    pub(crate) fn check(&self) -> Result<()> {
        let invalid = |reason: String| Error::InvalidQueue {
            queue: self.name.clone(),
            reason,
        };
        crate::names::check_name("queue", &self.name).map_err(invalid)?;
        for (what, limit) in [
            ("concurrency", self.concurrency),
            ("per_key", self.per_key),
            ("per_worker", self.per_worker),
        ] {
            if limit == Some(0) {
                return Err(invalid(format!(
                    "its {what} limit is 0, so nothing would ever run; give at least 1, or leave the limit out"
                )));
            }
        }
        if let Some((n, per)) = self.rate
            && rate::Rate::new(n, per).is_none()
        {
            return Err(invalid(format!(
                "its rate limit is {n} per {per:?}, so nothing would ever start; give at least 1 per at least 1ms, or leave the limit out"
            )));
        }
        Ok(())
    }
}

/// What a queue declares (see [`Queue::declared`]): `None` where it sets
/// no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueLimits {
    /// [`Queue::concurrency`].
    pub concurrency: Option<u32>,
    /// [`Queue::per_key`].
    pub per_key: Option<u32>,
    /// [`Queue::per_worker`].
    pub per_worker: Option<u32>,
    /// [`Queue::rate_limit`]: at most `.0` starts in any window of `.1`.
    pub rate: Option<(u32, Duration)>,
    /// [`Queue::release_while_waiting`].
    pub release_while_waiting: bool,
}

/// In a few words: `concurrency 10, per key 1, 100 per 1s, released
/// while waiting`, or `no limits`.
impl std::fmt::Display for QueueLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(n) = self.concurrency {
            parts.push(format!("concurrency {n}"));
        }
        if let Some(n) = self.per_key {
            parts.push(format!("per key {n}"));
        }
        if let Some(n) = self.per_worker {
            parts.push(format!("per worker {n}"));
        }
        if let Some((n, per)) = self.rate {
            parts.push(format!("{n} per {per:?}"));
        }
        if self.release_while_waiting {
            parts.push("released while waiting".to_owned());
        }
        if parts.is_empty() {
            return f.write_str("no limits");
        }
        f.write_str(&parts.join(", "))
    }
}

/// The limits of a queue; `u32::MAX` where none was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) concurrency: u32,
    pub(crate) per_key: u32,
    pub(crate) per_worker: u32,
    pub(crate) rate: Option<rate::Rate>,
    /// Sleeps, event waits and child waits give the slot back.
    pub(crate) release_while_waiting: bool,
}

/// The queues an engine declared, by name.
#[derive(Debug, Default)]
pub(crate) struct Queues {
    declared: BTreeMap<String, Queue>,
    /// The queue of `start` and `start_with`, if one was declared so.
    default: Option<String>,
}

impl Queues {
    /// Checks `queues` (each valid, no name twice); `default` is one of
    /// them.
    pub(crate) fn new(queues: Vec<Queue>, default: Option<String>) -> Result<Queues> {
        let mut declared = BTreeMap::new();
        for queue in queues {
            queue.check()?;
            if declared.contains_key(&queue.name) {
                return Err(Error::InvalidQueue {
                    queue: queue.name,
                    reason: "it is declared twice; declare each queue once".into(),
                });
            }
            declared.insert(queue.name.clone(), queue);
        }
        Ok(Queues { declared, default })
    }

    /// The queue of `start` and `start_with`, if one was declared so.
    pub(crate) fn default_queue(&self) -> Option<&str> {
        self.default.as_deref()
    }

    /// The queue named `name`, or [`Error::UnknownQueue`].
    pub(crate) fn get(&self, name: &str) -> Result<&Queue> {
        self.declared.get(name).ok_or_else(|| {
            let mut known: Vec<String> = self.declared.keys().cloned().collect();
            known.sort();
            Error::UnknownQueue {
                queue: name.to_owned(),
                known,
            }
        })
    }

    /// Every declared queue.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Queue> {
        self.declared.values()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.declared.is_empty()
    }
}

/// Checks a key given to [`StartOn::key`](crate::StartOn::key): the
/// instance-id grammar (1-100 characters of `[A-Za-z0-9_-]`, not starting
/// with `-`).
pub(crate) fn check_key(key: &str) -> Result<()> {
    crate::names::validate_id(key).map_err(|e| Error::InvalidQueueKey {
        key: key.to_owned(),
        reason: match e {
            Error::InvalidInstanceId { reason, .. } => reason.to_owned(),
            other => other.to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_declarations_are_refused() {
        assert!(Queues::new(vec![Queue::new("bank-api").concurrency(3)], None).is_ok());
        for bad in [
            Queue::new("Bank"),
            Queue::new(""),
            Queue::new("q").concurrency(0),
            Queue::new("q").per_key(0),
            Queue::new("q").per_worker(0),
            Queue::new("q").rate_limit(0, Duration::from_secs(1)),
            Queue::new("q").rate_limit(1, Duration::ZERO),
        ] {
            assert!(
                matches!(
                    Queues::new(vec![bad.clone()], None),
                    Err(Error::InvalidQueue { .. })
                ),
                "{bad:?}"
            );
        }
        let twice = Queues::new(vec![Queue::new("q"), Queue::new("q")], None);
        assert!(matches!(twice, Err(Error::InvalidQueue { .. })));
    }

    #[test]
    fn keys_follow_the_id_grammar() {
        assert!(check_key("customer-42").is_ok());
        assert!(matches!(check_key(""), Err(Error::InvalidQueueKey { .. })));
        let long = "k".repeat(101);
        assert!(matches!(
            check_key(&long),
            Err(Error::InvalidQueueKey { .. })
        ));
    }
}
