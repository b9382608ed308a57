//! The queues' stored limits, as the engine keeps them (see
//! `queue::stored`): made to agree with the declaration when it opens,
//! and `set_queue_limits`, changed for every worker while they run.

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::queue::stored::SharedLimits;
use crate::queue::{Queue, QueueLimits};

impl Engine {
    /// Changes the limits of the declared queue `queue.name()` for every
    /// worker on the store: its concurrency, per-key limit and rate
    /// limit become `queue`'s. Each worker takes by them from its next
    /// take of the queue's instances; the slots already held are kept.
    ///
    /// A worker that connects later declaring other limits is refused
    /// ([`Error::QueueLimitsDiffer`]): deploy the new declaration next (or
    /// mark it [`Queue::replaces_stored_limits`]). A worker's capacity
    /// ([`Queue::per_worker`]) and [`Queue::release_while_waiting`] are
    /// its declaration's, and not changed here.
    ///
    /// Only on a store shared by workers (PostgreSQL): on sled the code's
    /// declaration is the queue's limits, so this refuses
    /// ([`Error::InvalidArgument`]); change the declaration instead.
    /// `saga queues set` calls it (through `saga --url`, with the token).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownQueue`] for a queue this engine does not declare,
    /// [`Error::InvalidQueue`] for a limit of 0 or a `per_worker`, and
    /// [`Error::ReadOnly`] on an engine that only reads.
    ///
    /// # Cancel safety
    ///
    /// One compare-and-swap of the stored value: dropped before it
    /// answers, the change was made or not, whole.
    pub async fn set_queue_limits(&self, queue: Queue) -> Result<QueueLimits> {
        let runner = self.runner();
        let declared = runner.queues.queue(queue.name())?.clone();
        queue.check()?;
        if queue.declared().per_worker.is_some() {
            return Err(Error::InvalidQueue {
                queue: queue.name().to_owned(),
                reason: "per_worker is each worker's own capacity, set in its declaration, and not shared: leave it out here".into(),
            });
        }
        let journal = &runner.core.journal;
        if !journal.shared() && !journal.read_only() {
            return Err(Error::InvalidArgument(format!(
                "on an embedded store the code's declaration is the limits of queue {:?}: change Queue::new({:?}) and open the store again",
                queue.name(),
                queue.name()
            )));
        }
        // Its slot-keeping is the declaration's.
        let queue = if queue.declared().release_while_waiting
            == declared.declared().release_while_waiting
        {
            queue
        } else if declared.declared().release_while_waiting {
            queue.release_while_waiting()
        } else {
            return Err(Error::InvalidQueue {
                queue: queue.name().to_owned(),
                reason: "release_while_waiting is the declaration's, and not changed at run time: deploy a declaration with it, marked replaces_stored_limits".into(),
            });
        };
        let limits = SharedLimits::of(&queue);
        let before = replace(journal, queue.name(), limits).await?;
        tracing::info!(
            queue = %queue.name(),
            limits = %limits.describe(),
            before = %before.map_or_else(|| "none stored".to_owned(), |b| b.describe()),
            "queue limits changed for every worker"
        );
        Ok(limits.limits())
    }

    /// The limits the store holds for each queue, by name: those every
    /// worker takes by.
    pub(crate) async fn stored_queue_limits(&self) -> Result<Vec<(String, QueueLimits)>> {
        let runner = self.runner();
        let mut all = Vec::new();
        for (name, bytes) in runner.core.journal.all_queue_limits().await? {
            all.push((name.clone(), SharedLimits::decode(&name, &bytes)?.limits()));
        }
        Ok(all)
    }
}

/// Makes the stored limits of every queue `queues` declares agree with
/// the declaration, as the module docs say; the queues to run with.
pub(crate) async fn reconcile(journal: &Journal, queues: &[Queue]) -> Result<()> {
    for queue in queues {
        let declared = SharedLimits::of(queue);
        // A swap that lost to another worker's reads again.
        loop {
            let stored = journal.queue_limits(&queue.name).await?;
            let stored_limits = match &stored {
                Some(bytes) => Some(SharedLimits::decode(&queue.name, bytes)?),
                None => None,
            };
            if stored_limits == Some(declared) {
                break;
            }
            if let Some(stored_limits) = stored_limits {
                if journal.shared() && !queue.replaces_stored {
                    return Err(Error::QueueLimitsDiffer {
                        queue: queue.name.clone(),
                        declared: declared.describe(),
                        stored: stored_limits.describe(),
                    });
                }
                tracing::info!(
                    queue = %queue.name,
                    declared = %declared.describe(),
                    stored = %stored_limits.describe(),
                    "the queue's declared limits replace the stored ones"
                );
            }
            if journal
                .swap_queue_limits(&queue.name, stored.as_deref(), &declared.encode())
                .await?
            {
                break;
            }
        }
    }
    Ok(())
}

/// Stores `limits` for the queue `name` in place of what is stored; the
/// limits replaced, if any were.
pub(crate) async fn replace(
    journal: &Journal,
    name: &str,
    limits: SharedLimits,
) -> Result<Option<SharedLimits>> {
    loop {
        let stored = journal.queue_limits(name).await?;
        let before = match &stored {
            Some(bytes) => Some(SharedLimits::decode(name, bytes)?),
            None => None,
        };
        if journal
            .swap_queue_limits(name, stored.as_deref(), &limits.encode())
            .await?
        {
            return Ok(before);
        }
    }
}
