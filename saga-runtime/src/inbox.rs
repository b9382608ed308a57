//! The driving worker's side of intents (see `intent`): a task that takes
//! the inbox, oldest first, and acts on each post through the same calls
//! a local user would make, then removes it.

use std::sync::Arc;
use std::time::Duration;

use crate::codec::decode_record;
use crate::error::{Error, Result};
use crate::instance::Instance;
use crate::intent::Intent;
use crate::runner::Runner;

/// How often a worker looks at its inbox.
const POLL_EVERY: Duration = Duration::from_millis(200);
/// The most posts taken at once.
const BATCH: usize = 256;

/// Starts the task that takes this worker's inbox, when its store has one.
pub(crate) fn spawn_inbox_reader(runner: &Arc<Runner>) {
    if !runner.core.journal.has_inbox() {
        return;
    }
    let weak = Arc::downgrade(runner);
    let task = runner.core.runtime.spawn(async move {
        // Real time: the inbox is the database's, not the engine clock's.
        let mut every = tokio::time::interval(POLL_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let Some(runner) = weak.upgrade() else { return };
            if runner.core.is_closed() {
                return;
            }
            if let Err(e) = take(&runner).await {
                tracing::warn!(error = %e, "could not take the inbox; trying again");
            }
        }
    });
    runner.core.track(task);
}

/// Acts on every post waiting, oldest first.
async fn take(runner: &Arc<Runner>) -> Result<()> {
    let journal = &runner.core.journal;
    for (n, id, bytes) in journal.posts(BATCH)? {
        let intent: Intent = match decode_record(&bytes) {
            Ok(intent) => intent,
            Err(detail) => {
                tracing::error!(post = n, instance = %id, %detail, "dropping a post that does not decode");
                journal.done_post(n)?;
                continue;
            }
        };
        if matches!(intent, Intent::Restart { .. }) {
            // At most once: see the module's documentation.
            journal.done_post(n)?;
        }
        let outcome = act(runner, &id, intent, n).await;
        match outcome {
            Ok(()) => {}
            // The store failed or this worker lost its lease: the post stays
            // for the next look (or the next worker).
            Err(e @ (Error::Store(_) | Error::Fenced { .. } | Error::Closed)) => return Err(e),
            // Refused (the instance ended, is unknown, ...): nothing to do
            // but say so; the poster was told it was only asked.
            Err(e) => {
                tracing::warn!(post = n, instance = %id, error = %e, "a posted intent was refused");
            }
        }
        journal.done_post(n)?;
    }
    Ok(())
}

async fn act(runner: &Arc<Runner>, id: &str, intent: Intent, n: i64) -> Result<()> {
    let instance = Instance::new(runner.clone(), id.to_owned());
    match intent {
        // As `engine.event(id, type).id(..).send(..)` would.
        Intent::Event {
            event_type,
            payload,
            event_id,
        } => {
            let event_id = event_id.unwrap_or_else(|| format!("inbox-{n}"));
            crate::send::EventSender::new(runner, id, &event_type)
                .id(event_id)
                .send_encoded(payload)
                .await
                .map(drop)
        }
        Intent::Pause => instance.pause().await,
        Intent::Resume => instance.resume().await,
        Intent::Terminate { rollback: false } => instance.terminate().await,
        Intent::Terminate { rollback: true } => instance.terminate_with_rollback().await,
        Intent::Restart { from: None } => instance.restart().await,
        Intent::Restart { from: Some(step) } => instance.restart_from(&step).await,
        Intent::RetryRollback => instance.retry_rollback().await,
    }
}
