//! Finished instances are removed after the retention period, journal and
//! all, so the store does not grow without bound. So are the runs of an
//! instance that continued as new, while it goes on: a run counts as
//! ended when the next one began.
//!
//! On a store that keeps an index of the ended instances by end time
//! (`Store::ended_kept`: sled, where every writer kept it), a sweep walks
//! the expired ones [`SWEEP_BATCH`] at a time, yielding between batches,
//! and reads no other ended instance; the long loops whose old runs may go
//! are found among the active instances (a paused loop's old runs go once
//! it runs again). On any other store it reads every index entry, and
//! files each ended instance in the store's index of them as it goes
//! (`Store::file_ended`), which is then trusted (`Store::ended_rebuilt`).

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::journal::Summary;
use crate::run::runner::Runner;
use crate::time::clock::{add_millis, from_millis};

/// How often the engine looks for expired instances, on its clock.
const SWEEP_EVERY: Duration = Duration::from_secs(60 * 60);

/// How many ended instances a sweep reads at a time from the store's
/// index of them.
const SWEEP_BATCH: usize = 512;

pub(crate) fn spawn_sweeper(runner: &Arc<Runner>) {
    let weak = Arc::downgrade(runner);
    let clock = runner.core.clock.clone();
    let task = runner.core.spawn(async move {
        loop {
            let at = from_millis(add_millis(
                crate::time::clock::to_millis(clock.now()),
                SWEEP_EVERY,
            ));
            // Housekeeping must not make a time-skipping test clock jump.
            clock.timeout_at(at).await;
            let Some(runner) = weak.upgrade() else { return };
            // A sweep under way (a user's `sweep_expired`) does this one's
            // work: skip rather than race it for the same instances.
            let Ok(_sweeping) = runner.sweeping.try_lock() else {
                continue;
            };
            if let Err(e) = sweep_locked(&runner).await {
                tracing::warn!(error = %e, "retention sweep failed");
            }
        }
    });
    runner.core.track(task);
}

/// Removes every finished instance whose end is older than the retention
/// period; returns how many.
pub(crate) async fn sweep(runner: &Arc<Runner>) -> Result<usize> {
    let _sweeping = runner.sweeping.lock().await;
    sweep_locked(runner).await
}

/// What a sweep judges by: the time now and the retention period.
struct Expiry {
    now: u64,
    retention: Duration,
}

impl Expiry {
    fn ended_before(&self, at: u64) -> bool {
        add_millis(at, self.retention) <= self.now
    }

    fn expired(&self, status: crate::Status, finished_at: Option<u64>) -> bool {
        status.is_terminal() && finished_at.is_some_and(|at| self.ended_before(at))
    }
}

/// [`sweep`], its lock held.
async fn sweep_locked(runner: &Arc<Runner>) -> Result<usize> {
    let journal = &runner.core.journal;
    let expiry = Expiry {
        now: runner.core.now_millis(),
        retention: runner.retention,
    };
    let removed = if journal.store().ended_kept() && !journal.read_only() {
        let removed = sweep_ended(runner, &expiry).await?;
        let loops = journal.active_summaries().await?;
        trim_loops(runner, &expiry, &loops).await;
        removed
    } else {
        sweep_every_entry(runner, &expiry).await?
    };
    if removed > 0 {
        journal.flush().await?;
    }
    Ok(removed)
}

/// Walks the store's index of ended instances, a batch at a time, up to
/// those that ended a retention period ago; removes the expired ones and
/// drops the keys that went stale.
async fn sweep_ended(runner: &Arc<Runner>, expiry: &Expiry) -> Result<usize> {
    let journal = &runner.core.journal;
    let store = journal.store();
    let retention = u64::try_from(expiry.retention.as_millis()).unwrap_or(u64::MAX);
    let Some(until) = expiry.now.checked_sub(retention) else {
        return Ok(0);
    };
    let mut removed = 0;
    let mut after: Option<(u64, String)> = None;
    loop {
        let from = after.as_ref().map(|(at, id)| (*at, id.as_str()));
        let batch = store.ended_until(until, from, SWEEP_BATCH).await?;
        for (at, id) in &batch {
            let summary = match journal.summary_of(id).await? {
                None => {
                    store.drop_ended(id, *at)?;
                    continue;
                }
                // Not readable: kept, as a scan keeps it.
                Some(Err(_)) => continue,
                Some(Ok(summary)) => summary,
            };
            if !summary.status.is_terminal() || summary.finished_at != Some(*at) {
                // Restarted since: it is filed again when it ends.
                store.drop_ended(id, *at)?;
                continue;
            }
            if expiry.expired(summary.status, summary.finished_at)
                && remove(runner, id, expiry).await?
            {
                store.drop_ended(id, *at)?;
                removed += 1;
            }
        }
        if batch.len() < SWEEP_BATCH {
            return Ok(removed);
        }
        after = batch.last().cloned();
        tokio::task::yield_now().await;
    }
}

/// Reads every index entry (a store without an index of ended
/// instances, or one a release before did not keep): removes the expired
/// instances and trims the long loops, filing every ended instance kept
/// in the store's index of them, which is trusted from then on.
async fn sweep_every_entry(runner: &Arc<Runner>, expiry: &Expiry) -> Result<usize> {
    let journal = &runner.core.journal;
    let store = journal.store();
    let files = !journal.read_only();
    let mut removed = 0;
    let summaries = journal.summaries().await?;
    for (id, summary) in &summaries {
        let Ok(summary) = summary else { continue };
        if expiry.expired(summary.status, summary.finished_at) && remove(runner, id, expiry).await?
        {
            removed += 1;
            continue;
        }
        if files
            && summary.status.is_terminal()
            && let Some(at) = summary.finished_at
        {
            store.file_ended(id, at)?;
        }
    }
    trim_loops(runner, expiry, &summaries).await;
    if files {
        store.ended_rebuilt()?;
    }
    Ok(removed)
}

/// A long loop (continue-as-new) keeps running, and its runs that ended
/// longer ago than the retention period go.
async fn trim_loops(
    runner: &Arc<Runner>,
    expiry: &Expiry,
    summaries: &[(String, Result<Summary>)],
) {
    let journal = &runner.core.journal;
    for (id, summary) in summaries {
        let Ok(summary) = summary else { continue };
        if expiry.expired(summary.status, summary.finished_at)
            || crate::journal::handover::run_of(summary.last_seq) == 0
        {
            continue;
        }
        if let Err(e) = journal
            .remove_ended_runs(id, |at| expiry.ended_before(at))
            .await
        {
            tracing::warn!(instance = %id, error = %e, "retention could not remove the old runs of an instance");
        }
    }
}

/// Removes `id`, which expired, unless an unfinished ancestor may still
/// undo it or it changed since; whether it did.
async fn remove(runner: &Arc<Runner>, id: &str, expiry: &Expiry) -> Result<bool> {
    let journal = &runner.core.journal;
    // A child whose parent has not finished may still be undone by the
    // parent's rollback: kept (a parent asleep for days must find it).
    match runner.has_unfinished_ancestor(id).await {
        Ok(false) => {}
        Ok(true) => return Ok(false),
        Err(e @ (Error::NewerRelease { .. } | Error::Corrupt { .. })) => {
            tracing::warn!(instance = %id, error = %e, "retention keeps an instance whose parent it cannot read");
            return Ok(false);
        }
        Err(e) => return Err(e),
    }
    // Checked again under the instance's write lock: a restart that
    // came in between keeps it. A driver may still be letting go of an
    // instance that ended; it writes nothing more, so that is no reason
    // to keep it.
    let removed_it = match journal
        .remove_if(id, |state| expiry.expired(state.status, state.finished_at))
        .await
    {
        Ok(removed_it) => removed_it,
        // Not this release's to remove (or not readable): kept.
        Err(e @ (Error::NewerRelease { .. } | Error::Corrupt { .. })) => {
            tracing::warn!(instance = %id, error = %e, "retention keeps an instance it cannot read");
            false
        }
        Err(e) => return Err(e),
    };
    if removed_it {
        runner.forget_timer(id);
    }
    Ok(removed_it)
}
