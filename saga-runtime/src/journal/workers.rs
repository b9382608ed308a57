//! The journal on a store shared by workers: ownership and the claim of
//! a gone worker's instances, taking queued instances, and the intents
//! other processes post here (events and control calls for the instances
//! this worker owns).

use tokio::sync::watch;

use super::{Change, Entry, Journal};
use crate::error::Result;
use crate::store::Told;

/// The instances a claim took ([`Journal::claim`]).
#[derive(Default)]
pub(crate) struct Claimed {
    /// Those that may run now.
    pub(crate) may_run: Vec<String>,
    /// Those that only wait for a later time: `(id, wake, deadline)`.
    pub(crate) asleep: Vec<(String, u64, bool)>,
}

impl Journal {
    /// Whether the store is shared by workers and this engine writes it:
    /// other processes post intents here for it to take, and it claims the
    /// instances of workers that are gone.
    pub(crate) fn shared(&self) -> bool {
        self.store.shared()
    }

    /// A count that moves when another process may have changed `what`
    /// this engine waits for (see [`Store::changes`]).
    pub(crate) fn changes(&self, what: Told) -> Option<watch::Receiver<u64>> {
        self.store.changes(what)
    }

    /// Whether this engine writes the journal of `id` (on a shared store:
    /// this worker owns it; else its events and control calls are posted).
    pub(crate) fn owns(&self, id: &str) -> bool {
        self.store.owns(id)
    }

    /// Takes ownership of instances whose worker is gone (see
    /// [`Store::claim`]); their index entries are brought up to date, as
    /// on open, since their worker may have died between the two writes.
    /// On a store whose timer index is kept, those that only wait for a
    /// later time are answered apart, with their timers, unread (their
    /// entry filed the timer, so it agrees with their journal): they are
    /// loaded when due, as at start-up.
    pub(crate) async fn claim(&self, workflows: &[&str], limit: usize) -> Result<Claimed> {
        let ids = self.store.claim(workflows, limit).await?;
        crate::metrics::claimed(ids.len());
        let now = self.now_millis();
        let mut claimed = Claimed::default();
        for id in ids {
            if self.timers_kept()
                && let Ok(Some((at, deadline))) = self.store.timer_of(&id).await
                && at > now
            {
                claimed.asleep.push((id, at, deadline));
                continue;
            }
            self.refresh_index(&id).await;
            claimed.may_run.push(id);
        }
        Ok(claimed)
    }

    /// Takes the queued instances of `queue` that may run on this worker
    /// now, of the `workflows` it runs (see [`Store::take_queued`]): each
    /// is this worker's from then on, its `Dequeued` record written in the
    /// transaction that took it. Also says when the queue's rate lets the
    /// next start, if it lets none now.
    pub(crate) async fn take_queued(
        &self,
        queue: &crate::queue::Queue,
        workflows: &[&str],
    ) -> Result<crate::store::QueueTaken> {
        let at = self.now_millis();
        let record = self.sealer.encode_record(&Entry {
            at,
            change: Change::Dequeued,
        })?;
        let limits = queue.limits();
        let take = crate::store::QueueTake {
            queue: queue.name(),
            concurrency: limits.concurrency,
            per_key: limits.per_key,
            per_worker: limits.per_worker,
            rate: limits
                .rate
                .map(|r| (r.starts, std::time::Duration::from_millis(r.per_ms))),
            workflows,
            record: &record,
            at,
        };
        let taken = self.store.take_queued(&take).await?;
        for id in &taken.ids {
            // Read again: the store wrote a record this engine did not.
            self.hold(id).cached().invalidate();
            self.refresh_index(id).await;
        }
        Ok(taken)
    }

    /// Lets go of `id` if it waits in its queue, on a store shared by
    /// workers (see [`Store::disown`]): decided under the instance's lock,
    /// so no write of this worker's follows.
    pub(crate) async fn disown_if_queued(&self, id: &str) -> Result<()> {
        if !self.store.shared() || !self.store.owns(id) {
            return Ok(());
        }
        let held = self.hold_loaded(id).await?;
        let mut cached = held.cached();
        let waits = cached
            .loaded
            .as_ref()
            .is_some_and(|l| l.state.waits_in_queue());
        if waits {
            self.store.disown(id)?;
            cached.invalidate();
        }
        Ok(())
    }

    /// Posts an intent for `id` (see `intent`); its token.
    pub(crate) async fn post(&self, id: &str, intent: &[u8]) -> Result<String> {
        self.store.post(id, intent).await
    }

    /// The answer to the post with `token`, if there is one yet (see
    /// [`Store::answer`]).
    pub(crate) async fn answer(&self, token: &str) -> Result<Option<Option<Vec<u8>>>> {
        self.store.answer(token).await
    }

    /// Removes the post with `token`, its answer read.
    pub(crate) async fn forget_post(&self, token: &str) -> Result<()> {
        self.store.forget_post(token).await
    }

    /// Whether the worker that owns `id` holds a live lease.
    pub(crate) async fn owner_live(&self, id: &str) -> Result<Option<bool>> {
        self.store.owner_live(id).await
    }

    /// Posted intents waiting, oldest first.
    pub(crate) async fn posts(&self, limit: usize) -> Result<Vec<(i64, String, Vec<u8>)>> {
        self.store.posts(limit).await
    }

    /// Answers post `n`, acted on.
    pub(crate) async fn answer_post(&self, n: i64, answer: &[u8]) -> Result<()> {
        self.store.answer_post(n, answer).await
    }
}
