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
use crate::workflow::RollbackOrder;
use crate::workflow::child::ChildRollback;
use crate::workflow::compensation::Registered;
use crate::workflow::context::RunScope;
use crate::workflow::fault::{self, Attempt, Site};
use crate::workflow::key::IdempotencyKey;
use crate::workflow::retry::{Resume, Retried, retry};

/// Runs the compensations of every started step that has one, in reverse
/// start order (or, for a workflow whose rollback is concurrent, reverse
/// happens-before order), skipping those the journal says finished.
/// Returns the failure of the compensation that gave up, if one did (those
/// after it did not begin).
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
    let mut jobs = Vec::new();
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
        let Some(slot) = slots.get(&index) else {
            continue;
        };
        // A wait that received no event has nothing to undo.
        if slot.kind == SlotKind::Event && !matches!(slot.state, SlotState::Received { .. }) {
            continue;
        }
        // A child's compensation is built from history alone: a child
        // that failed (and compensated itself) or was terminated has none.
        let handler = if slot.kind == SlotKind::Child {
            let Some(undo) = ChildRollback::of(shared, &slot.state) else {
                continue;
            };
            Some(Registered::erased(
                index,
                &slot.name,
                slot.occurrence,
                slot.generation,
                Box::new(undo),
            ))
        } else {
            handlers.remove(&index)
        };
        // A step's stored output; a wait's event.
        let output = match &slot.state {
            SlotState::Completed { output, .. } => Some(output.clone()),
            SlotState::Received { payload, .. } => Some(payload.clone()),
            _ => None,
        };
        jobs.push(Job {
            index,
            name: slot.name.clone(),
            began: slot.began,
            ended: slot.ended,
            handler,
            output,
            resume,
        });
    }
    match shared.rollback_order {
        RollbackOrder::Concurrent => concurrently(shared, jobs, cause).await,
        _ => one_by_one(shared, jobs, cause).await,
    }
}

/// One compensation to run: its step's slot, when the step began and
/// ended (records' sequence numbers), its handler (`None` when replay did
/// not rebuild it) and where it was when a crash stopped it.
struct Job {
    index: u32,
    name: String,
    began: u64,
    ended: Option<u64>,
    handler: Option<Registered>,
    output: Option<crate::codec::Payload>,
    resume: Option<Resume>,
}

impl Job {
    /// Whether this job's step ended before `later`'s began: then
    /// `later`'s compensation completes before this one's begins.
    fn happened_before(&self, later: &Job) -> bool {
        self.ended.is_some_and(|ended| ended < later.began)
    }
}

/// What a job comes to before it runs: its handler, or why it cannot run.
enum Ready {
    Run(Registered),
    /// Its step is gone from the code: recorded as failed, for a person
    /// to undo; the others still run.
    Unbuildable(Failure),
    /// Replay did not rebuild it: recorded as failed, and the rollback
    /// gives up.
    Missing(Failure),
}

/// Records what stops `job` from running, if anything.
fn prepare(shared: &RunScope, job: &mut Job) -> Result<Ready> {
    let Some(handler) = job.handler.take() else {
        let error = format!(
            "it could not be rebuilt: replaying the workflow code did not reach step {:?} again",
            job.name
        );
        shared.append(Change::CompensationFailed {
            slot: job.index,
            error: error.clone(),
        })?;
        return Ok(Ready::Missing(gave_up(job.name.clone(), &error)));
    };
    if let Some(reason) = handler.handler.unbuildable() {
        let error = reason.to_owned();
        shared.append(Change::CompensationFailed {
            slot: job.index,
            error: error.clone(),
        })?;
        return Ok(Ready::Unbuildable(gave_up(handler.step.clone(), &error)));
    }
    Ok(Ready::Run(handler))
}

/// Reverse start order, one at a time: the first that gives up stops the
/// rest.
async fn one_by_one(shared: &RunScope, jobs: Vec<Job>, cause: &Failure) -> Result<Option<Failure>> {
    // The first compensation that could not be rebuilt, if any.
    let mut unbuilt = None;
    for mut job in jobs {
        let mut handler = match prepare(shared, &mut job)? {
            Ready::Run(handler) => handler,
            Ready::Missing(failure) => return Ok(Some(failure)),
            Ready::Unbuildable(failure) => {
                unbuilt.get_or_insert(failure);
                continue;
            }
        };
        let outcome =
            run_compensation(shared, &mut handler, job.output.as_ref(), cause, job.resume);
        if let Err(error) = outcome.await? {
            shared.append(Change::CompensationFailed {
                slot: job.index,
                error: error.clone(),
            })?;
            return Ok(Some(gave_up(handler.step, &error)));
        }
    }
    Ok(unbuilt)
}

/// What a compensation under way comes to: its slot, its step, and
/// whether it completed (`Ok(Err(error))`: it gave up).
type Finished = (u32, String, Result<std::result::Result<(), String>>);

/// A compensation under way.
type Running<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Finished> + Send + 'a>>;

/// Reverse happens-before order: a job begins once every job whose step
/// began after its step ended has completed; jobs whose steps overlapped
/// run at once. The first that gives up stops those not yet begun; those
/// under way finish and are recorded.
async fn concurrently(
    shared: &RunScope,
    mut pending: Vec<Job>,
    cause: &Failure,
) -> Result<Option<Failure>> {
    let mut running: Vec<(Job, Running<'_>)> = Vec::new();
    let mut failure: Option<Failure> = None;
    // The first compensation that could not be rebuilt: the others still run.
    let mut unbuilt: Option<Failure> = None;
    loop {
        if failure.is_none() {
            // Ready: no job still to complete began after this one ended.
            let mut at = 0;
            while at < pending.len() {
                let blocked = pending
                    .iter()
                    .chain(running.iter().map(|(job, _)| job))
                    .any(|later| pending[at].happened_before(later));
                if blocked {
                    at += 1;
                    continue;
                }
                let mut job = pending.remove(at);
                match prepare(shared, &mut job)? {
                    Ready::Run(handler) => {
                        let (output, resume) = (job.output.clone(), job.resume);
                        let future: Running<'_> = Box::pin(async move {
                            let mut handler = handler;
                            let outcome = run_compensation(
                                shared,
                                &mut handler,
                                output.as_ref(),
                                cause,
                                resume,
                            )
                            .await;
                            (handler.index, handler.step, outcome)
                        });
                        running.push((job, future));
                    }
                    Ready::Unbuildable(gave) => {
                        unbuilt.get_or_insert(gave);
                    }
                    Ready::Missing(gave) => {
                        failure.get_or_insert(gave);
                        break;
                    }
                }
                // Readiness of the others may have changed: look again.
                at = 0;
            }
        }
        if running.is_empty() {
            return Ok(failure.or(unbuilt));
        }
        let (slot, step, outcome) = next_finished(&mut running).await;
        if let Err(error) = outcome? {
            shared.append(Change::CompensationFailed {
                slot,
                error: error.clone(),
            })?;
            failure.get_or_insert_with(|| gave_up(step, &error));
        }
    }
}

/// Waits for the first of `running` to finish, and takes it out.
async fn next_finished(running: &mut Vec<(Job, Running<'_>)>) -> Finished {
    std::future::poll_fn(|cx| {
        for at in 0..running.len() {
            if let std::task::Poll::Ready(done) = running[at].1.as_mut().poll(cx) {
                drop(running.remove(at));
                return std::task::Poll::Ready(done);
            }
        }
        std::task::Poll::Pending
    })
    .await
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
        shared.run,
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
    let step_key = IdempotencyKey::forward(
        &shared.id,
        &handler.step,
        handler.occurrence,
        handler.generation,
        shared.run,
    );
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
        let future = erased.attempt(
            output,
            cause,
            &key,
            &step_key,
            attempts,
            &shared.core.services,
        );
        let faults = shared.core.faults.as_deref();
        let step = &step;
        let at = move || Attempt {
            site: Site::Compensation,
            instance: shared.id.to_string(),
            step: step.clone(),
            occurrence,
            attempt: attempts,
        };
        let body = async move {
            match future {
                Ok(future) => future.instrument(span).await,
                Err(decode) => Err(crate::error::failure::StepError::fatal(decode)),
            }
        };
        fault::attempt(faults, at, body)
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
