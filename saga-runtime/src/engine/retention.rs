//! Finished instances are removed after the retention period, journal and
//! all, so the store does not grow without bound. So are the runs of an
//! instance that continued as new, while it goes on: a run counts as
//! ended when the next one began.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::run::runner::Runner;
use crate::time::clock::{add_millis, from_millis};

/// How often the engine looks for expired instances, on its clock.
const SWEEP_EVERY: Duration = Duration::from_secs(60 * 60);

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

/// [`sweep`], its lock held.
async fn sweep_locked(runner: &Arc<Runner>) -> Result<usize> {
    let journal = &runner.core.journal;
    let now = runner.core.now_millis();
    let expired = |status: crate::Status, finished_at: Option<u64>| {
        status.is_terminal()
            && finished_at.is_some_and(|at| add_millis(at, runner.retention) <= now)
    };
    let ended_before = |at: u64| add_millis(at, runner.retention) <= now;
    let mut removed = 0;
    for (id, summary) in journal.summaries().await? {
        let Ok(summary) = summary else { continue };
        if !expired(summary.status, summary.finished_at) {
            // A long loop (continue-as-new) keeps running, and its runs
            // that ended longer ago than the retention period go.
            if crate::journal::handover::run_of(summary.last_seq) > 0
                && let Err(e) = journal.remove_ended_runs(&id, ended_before).await
            {
                tracing::warn!(instance = %id, error = %e, "retention could not remove the old runs of an instance");
            }
            continue;
        }
        // A child whose parent has not finished may still be undone by the
        // parent's rollback: kept (a parent asleep for days must find it).
        match runner.has_unfinished_ancestor(&id).await {
            Ok(false) => {}
            Ok(true) => continue,
            Err(e @ (Error::NewerRelease { .. } | Error::Corrupt { .. })) => {
                tracing::warn!(instance = %id, error = %e, "retention keeps an instance whose parent it cannot read");
                continue;
            }
            Err(e) => return Err(e),
        }
        // Checked again under the instance's write lock: a restart that
        // came in between keeps it. A driver may still be letting go of an
        // instance that ended; it writes nothing more, so that is no reason
        // to keep it.
        let removed_it = match journal
            .remove_if(&id, |state| expired(state.status, state.finished_at))
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
            runner.forget_timer(&id);
            removed += 1;
        }
    }
    if removed > 0 {
        journal.flush().await?;
    }
    Ok(removed)
}
