//! Saga rollback: the compensations registered by started steps run in
//! reverse step-start order when the workflow fails for good. Each is
//! durable (started and ended in the journal), so a crash mid-rollback
//! resumes where it stopped and never runs a finished compensation again.
//! A child workflow is compensated at its place in that order, by its own
//! compensations (`workflow::child`).

use std::collections::BTreeMap;

use tracing::Instrument;

use crate::error::Result;
use crate::error::failure::{Failure, FailureKind};
use crate::journal::{Change, CompensationState, SlotKind, SlotState};
use crate::workflow::child::ChildRollback;
use crate::workflow::compensation::Registered;
use crate::workflow::context::RunScope;
use crate::workflow::key::IdempotencyKey;
use crate::workflow::retry::{Resume, Retried, retry};

/// Runs the compensations of every started step that has one, in reverse
/// start order, skipping those the journal says finished. Returns the
/// failure of the compensation that gave up, if one did (the rest did not
/// run).
pub(crate) async fn compensate(
    shared: &RunScope,
    handlers: Vec<Registered>,
    cause: &Failure,
) -> Result<Option<Failure>> {
    let state = shared
        .core
        .journal
        .read(&shared.id, |s| (s.slots.clone(), s.compensations.clone()))
        .await?;
    let (slots, done) = state;
    let mut handlers: BTreeMap<u32, Registered> =
        handlers.into_iter().map(|h| (h.index, h)).collect();
    // Eligible: started steps with a compensation. A step's start is in the
    // journal before the step runs, so the journal alone says which.
    let eligible: Vec<u32> = slots
        .iter()
        .rev()
        .filter(|(_, s)| s.has_rollback)
        .map(|(i, _)| *i)
        .collect();
    // The first compensation that could not be rebuilt, if any.
    let mut unbuilt = None;
    for index in eligible {
        let resume = match done.get(&index) {
            Some(CompensationState::Completed) => continue,
            // It gave up before a crash that came before the instance's
            // end was stored: it stays given up, the rest stay skipped.
            Some(CompensationState::Failed { error }) => {
                let step = slots
                    .get(&index)
                    .map(|s| s.name.clone())
                    .unwrap_or_default();
                return Ok(Some(gave_up(step, error)));
            }
            Some(CompensationState::Running { attempts, retry_at }) => Some(Resume {
                attempts: *attempts,
                retry_at: *retry_at,
            }),
            None => None,
        };
        let slot = slots.get(&index);
        // A child's compensation is built from history alone: a child
        // that failed (and compensated itself) or was terminated has none.
        let child = slot
            .filter(|s| s.kind == SlotKind::Child)
            .map(|s| (s, ChildRollback::of(shared, &s.state)));
        let handler = match child {
            Some((_, None)) => continue,
            Some((s, Some(undo))) => Some(Registered::erased(
                index,
                &s.name,
                s.occurrence,
                s.generation,
                Box::new(undo),
            )),
            None => handlers.remove(&index),
        };
        let Some(mut handler) = handler else {
            let step = slot.map_or_else(|| format!("#{index}"), |s| s.name.clone());
            let error = format!(
                "it could not be rebuilt: replaying the workflow code did not reach step {step:?} again"
            );
            shared.append(Change::CompensationFailed {
                slot: index,
                error: error.clone(),
            })?;
            return Ok(Some(gave_up(step, &error)));
        };
        // One that could not be rebuilt (its step is gone from the code)
        // is for a person to undo; the others still run.
        if let Some(reason) = handler.handler.unbuildable() {
            let error = reason.to_owned();
            shared.append(Change::CompensationFailed {
                slot: index,
                error: error.clone(),
            })?;
            unbuilt.get_or_insert_with(|| gave_up(handler.step.clone(), &error));
            continue;
        }
        let output = slot.and_then(|s| match &s.state {
            SlotState::Completed { output, .. } => Some(output),
            _ => None,
        });
        if let Err(error) = run_compensation(shared, &mut handler, output, cause, resume).await? {
            shared.append(Change::CompensationFailed {
                slot: index,
                error: error.clone(),
            })?;
            return Ok(Some(gave_up(handler.step, &error)));
        }
    }
    Ok(unbuilt)
}

/// The rollback failure of the compensation of `step`, which gave up with
/// `error`.
fn gave_up(step: String, error: &str) -> Failure {
    let message = format!("the compensation of step {step:?} failed: {error}");
    Failure::new(FailureKind::Rollback { step }, message)
}

/// Runs one compensation's attempts; `Ok(Err(message))` when it gave up.
/// `resume` is where it was when a crash stopped it, if it had started.
async fn run_compensation(
    shared: &RunScope,
    handler: &mut Registered,
    output: Option<&crate::codec::Payload>,
    cause: &Failure,
    resume: Option<Resume>,
) -> Result<std::result::Result<(), String>> {
    let journal = &shared.core.journal;
    let slot = handler.index;
    let config = handler.handler.config();
    let key = IdempotencyKey::rollback(
        &shared.id,
        &handler.step,
        handler.occurrence,
        handler.generation,
    );
    let resume = match resume {
        Some(resume) => resume,
        // Its start is durable before it runs: after a crash it resumes
        // (with the same key), it does not start over.
        None => {
            shared.append(Change::CompensationStarted { slot })?;
            journal.flush().await?;
            tracing::info!(instance = %shared.id, step = %handler.step, occurrence = handler.occurrence, "compensation started");
            Resume::default()
        }
    };
    let step = handler.step.clone();
    let occurrence = handler.occurrence;
    let erased = &mut handler.handler;
    let attempt = |attempts: u32| {
        let span = tracing::info_span!(
            "saga.rollback",
            instance = %shared.id,
            workflow = %shared.workflow,
            step = %step,
            occurrence,
            attempt = attempts,
        );
        let future = erased.attempt(output, cause, &key, attempts, &shared.core.services);
        async move {
            match future {
                Ok(future) => future.instrument(span).await,
                Err(decode) => Err(crate::error::failure::StepError::fatal(decode)),
            }
        }
    };
    let record_retry = |attempt: u32,
                        error: &crate::error::failure::StepError,
                        retry_at: u64,
                        delay| {
        tracing::warn!(instance = %shared.id, step = %step, attempt, error = %error, ?delay, "compensation attempt failed; retrying");
        shared.append(Change::CompensationRetrying {
            slot,
            attempt,
            retry_at,
        })
    };
    match retry(&shared.core.clock, &config, resume, attempt, record_retry).await? {
        Retried::Done((), attempts) => {
            shared.append(Change::CompensationCompleted { slot })?;
            journal.flush().await?;
            tracing::info!(instance = %shared.id, step = %step, occurrence, attempts, "compensation completed");
            Ok(Ok(()))
        }
        Retried::GaveUp(error, attempts) => {
            tracing::warn!(instance = %shared.id, step = %step, occurrence, attempts, error = %error, "compensation failed");
            Ok(Err(error.to_string()))
        }
    }
}
