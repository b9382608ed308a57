//! A worker's side of a store shared by workers: a task that, every poll
//! interval (and at once when the store tells of a post), claims the
//! instances whose worker is gone (and resumes them), then takes the inbox
//! of the instances it owns, oldest first, acting on each post as on the same
//! command called here (`Instance::act`) before it answers it (see `post`).

use std::sync::Arc;

use crate::codec::{encode_record, from_newer_release};
use crate::error::{Error, Result};
use crate::instance::Instance;
use crate::instance::post::{Answer, Refusal};
use crate::journal::command::Command;
use crate::run::runner::Runner;

/// The most posts taken at once.
const BATCH: usize = 256;
/// The most instances claimed at once: a worker that claims a batch at a
/// time leaves the rest of a dead worker's instances to the others.
const CLAIM_BATCH: usize = 32;

/// Starts the task, when the store is shared by workers.
pub(crate) fn spawn_inbox_reader(runner: &Arc<Runner>) {
    if !runner.core.journal.shared() {
        return;
    }
    let weak = Arc::downgrade(runner);
    let mut told = runner.core.journal.changes(crate::store::Told::Posts);
    let poll = runner.core.poll;
    let task = runner.core.spawn(async move {
        // Real time: leases and the inbox are the database's, not the
        // engine clock's.
        let mut every = tokio::time::interval(poll);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                // Either leads to the same look at the inbox.
                // Biased: a simulated run picks the same on every replay of its seed.
                biased;
                _ = every.tick() => {}
                Some(()) = crate::journal::told_of_change(&mut told) => every.reset(),
            }
            let Some(runner) = weak.upgrade() else { return };
            if runner.core.is_closed() || runner.core.is_draining() {
                return;
            }
            if let Err(e) = claim(&runner).await {
                tracing::warn!(error = %e, "could not claim the instances of gone workers; trying again");
            }
            if let Err(e) = take(&runner).await {
                tracing::warn!(error = %e, "could not take the inbox; trying again");
            }
        }
    });
    runner.core.track(task);
}

/// Claims instances whose worker is gone, of the workflows registered
/// here, and resumes them.
async fn claim(runner: &Arc<Runner>) -> Result<()> {
    let workflows = runner.workflow_names();
    if workflows.is_empty() {
        return Ok(());
    }
    let claimed = runner.core.journal.claim(&workflows, CLAIM_BATCH).await?;
    // Loaded when due, not now (see `Journal::claim`).
    for (id, at, deadline) in claimed.asleep {
        runner.set_alarm(&id, at, deadline);
    }
    for id in claimed.may_run {
        runner.spawn_driver_if_runnable(&id).await;
    }
    Ok(())
}

/// Acts on every post waiting, oldest first.
async fn take(runner: &Arc<Runner>) -> Result<()> {
    let journal = &runner.core.journal;
    for (n, id, bytes) in journal.posts(BATCH).await? {
        let command: Command = match journal.sealer().decode_record(&bytes) {
            Ok(command) => command,
            // Posted by a newer release, for one of its workers: left in
            // the inbox, not dropped as damage.
            Err(detail) if from_newer_release(&bytes, 0, Command::KINDS) => {
                tracing::warn!(post = n, instance = %id, %detail, "leaving a post of a newer release in the inbox");
                continue;
            }
            Err(detail) => {
                tracing::error!(post = n, instance = %id, %detail, "dropping a post that does not decode");
                let refusal = Refusal::Other(format!("the post does not decode: {detail}"));
                journal
                    .answer_post(n, &encode_record(&Answer::Refused(refusal)))
                    .await?;
                continue;
            }
        };
        if matches!(command, Command::Restart { .. }) {
            // At most once: see the module's documentation.
            journal
                .answer_post(n, &encode_record(&Answer::Taken))
                .await?;
        }
        let instance = Instance::new(runner.clone(), id.clone());
        let answer = match instance.act(command, Some(n)).await {
            Ok(answer) => answer,
            // The store failed or this worker lost its lease: the post stays
            // for the next look (or the next worker).
            Err(e @ (Error::Store(_) | Error::Fenced { .. } | Error::Closed)) => return Err(e),
            // Refused (the instance ended, is unknown, ...): the poster is
            // told why.
            Err(e) => {
                tracing::info!(post = n, instance = %id, error = %e, "a posted intent was refused");
                Answer::Refused(Refusal::of(&e))
            }
        };
        journal.answer_post(n, &encode_record(&answer)).await?;
        // Claimed only to act on its posts, an instance that waits in its
        // queue goes back to it, for any worker to take.
        if let Err(e) = journal.disown_if_queued(&id).await {
            tracing::warn!(instance = %id, error = %e, "could not put a queued instance back in its queue");
        }
    }
    Ok(())
}
