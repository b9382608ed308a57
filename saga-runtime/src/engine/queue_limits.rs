//! `set_queue_limits`: a queue's limits changed for every worker while
//! they run (see `queue::stored`).

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::queue::stored::{self, SharedLimits};
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
        crate::queue::Queues::new(vec![queue.clone()], None)?;
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
        let before = stored::replace(journal, queue.name(), limits).await?;
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
