//! Runs one instance: replays its workflow function forward, or, after a
//! crash mid-rollback, only far enough to rebuild its compensations; then
//! records how it ended.

use std::collections::BTreeSet;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use tracing::Instrument;

use crate::codec::Payload;
use crate::error::failure::{Failure, FailureKind};
use crate::error::{Error, Result};
use crate::journal::{Change, CompensationState, End, InstanceState};
use crate::model::status::Status;
use crate::names::id::InstanceId;
use crate::panic::CatchUnwind;
use crate::run::rollback::compensate;
use crate::workflow::ErasedWorkflow;
use crate::workflow::context::{Ctx, Mode, RunScope, Wake, WorkflowContext};
use crate::workflow::engine_core::Core;
use crate::workflow::live::{Interrupt, Live};

/// How many times a rebuild polls the workflow future for handlers that
/// history says exist; replayed calls complete at once, so a handful is
/// plenty.
const REBUILD_POLLS: usize = 16;

/// How long a run must have nothing to do but wait, at least, for its
/// driver to let go of the instance until the wait ends.
const HIBERNATE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Why a driver let go of its instance.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Paused: a resume may have raced with it, so look again.
    Suspended,
    /// It only waits, until the wake time given (an event may wake it
    /// sooner): it is rebuilt from its journal then.
    Hibernated(Wake),
    /// Recorded an end: a control call that runs the instance again
    /// (`retry_rollback`, `restart`) may have come while this driver still
    /// held it, so look again.
    Ended,
    /// Its wait was over while it held no slot of its queue: it waits in
    /// the queue again (`Requeued`).
    Requeued,
    /// Stopped for a restart, or by a failure.
    Other,
}

/// Runs the instance until it ends or is stopped.
/// `waking`: the instance hibernated in this process and wakes (its timer
/// or an event), rather than a process beginning to run it.
/// `releases`: its queue gives slots back while instances wait.
pub(crate) async fn drive(
    core: &Arc<Core>,
    workflow: Arc<dyn ErasedWorkflow>,
    id: &InstanceId,
    live: &Arc<Live>,
    mut waking: bool,
    releases: bool,
) -> Exit {
    // The instance continued as new: this driver runs its next run (it
    // keeps its queue slot, and control calls find the same driver).
    let driven = loop {
        match drive_once(core, workflow.clone(), id, live, waking, releases).await {
            Ok(None) => {
                waking = false;
                // A loop that continues without waiting on anything still
                // lets the other tasks of its thread run.
                tokio::task::yield_now().await;
            }
            Ok(Some(exit)) => break Ok(exit),
            Err(e) => break Err(e),
        }
    };
    match driven {
        Ok(exit) => exit,
        // A journal that does not fold cannot be written either: every call
        // on the instance answers `Error::Corrupt` (result() included), so
        // there is nothing to record, only to stop.
        // A control call ended the instance under this driver (it woke as
        // a terminate was written): nothing more is recorded; stop.
        Err(Error::InvalidState { status, .. }) if status.is_terminal() => {
            tracing::debug!(instance = %id, %status, "instance driver stopped: the instance ended under it");
            Exit::Other
        }
        // A newer release wrote it: not this release's to run, or to park.
        Err(e @ Error::NewerRelease { .. }) => {
            tracing::warn!(instance = %id, error = %e, "leaving an instance to a newer release");
            Exit::Other
        }
        Err(e @ Error::Corrupt { .. }) => {
            tracing::error!(instance = %id, error = %e, "instance driver stopped: its journal is corrupt");
            Exit::Other
        }
        // The store failed: the instance stays where it is and resumes on
        // the next open; result() says why meanwhile.
        Err(e) => {
            tracing::error!(instance = %id, error = %e, "instance driver stopped on a store error");
            live.store_failed(&e);
            Exit::Other
        }
    }
}

/// One run of the instance: `None` when it continued as new, and its
/// next run is to be driven.
async fn drive_once(
    core: &Arc<Core>,
    workflow: Arc<dyn ErasedWorkflow>,
    id: &InstanceId,
    live: &Arc<Live>,
    waking: bool,
    releases: bool,
) -> Result<Option<Exit>> {
    let state = core
        .journal
        .state(id)
        .await?
        .ok_or_else(|| Error::UnknownInstance { id: id.to_string() })?;
    let span = tracing::info_span!(
        "saga.workflow",
        instance = %id,
        workflow = %state.workflow,
        generation = state.generation,
        run = state.run,
    );
    match state.status {
        Status::RollingBack => {
            Box::pin(rebuild_and_compensate(core, id, live, workflow, state))
                .instrument(span)
                .await?;
            Ok(Some(Exit::Ended))
        }
        // A damaged journal never runs forward: a step whose completion was
        // in the damaged record would run again. A person decides.
        Status::Blocked
            if state
                .failure
                .as_ref()
                .is_some_and(|f| matches!(f.kind(), FailureKind::Corrupt { .. })) =>
        {
            // Loading it refreshed its index entry (`list()` shows it
            // parked); a `result()` waiting for it learns it now.
            core.journal.notify_ended();
            Ok(Some(Exit::Other))
        }
        Status::Queued | Status::Running | Status::Waiting | Status::Blocked => {
            run_forward(core, id, live, workflow, state, waking, releases)
                .instrument(span)
                .await
        }
        // A paused instance that hibernated wakes to finish the wait it was
        // in, and stops at the next step boundary, as a live one would.
        Status::Paused if waking => {
            live.request_pause(true);
            run_forward(core, id, live, workflow, state, waking, releases).await
        }
        // Paused before this driver got going: a resume may race with it,
        // so let the runner look again once this driver is gone.
        Status::Paused => Ok(Some(Exit::Suspended)),
        _ => Ok(Some(Exit::Other)),
    }
}

enum Outcome {
    Finished(std::result::Result<std::result::Result<crate::codec::Payload, Failure>, String>),
    Interrupted(Interrupt),
    Hibernate(Wake),
    /// `ctx.continue_as_new`, with the next run's input.
    Continued(Payload),
}

async fn run_forward(
    core: &Arc<Core>,
    id: &InstanceId,
    live: &Arc<Live>,
    workflow: Arc<dyn ErasedWorkflow>,
    state: InstanceState,
    waking: bool,
    releases: bool,
) -> Result<Option<Exit>> {
    let ctx = Ctx::new(
        core.clone(),
        id.clone(),
        live.clone(),
        Mode::Forward,
        &state,
        workflow.order_of_rollback(),
    );
    // A wake from hibernation is no news: the instance was waiting (or
    // paused in a wait) and still is, until its replay gets past the wait.
    if !(waking && matches!(state.status, Status::Waiting | Status::Paused)) {
        core.journal.append_kept(id, Change::DriverStarted)?;
    }
    match state.status {
        Status::Queued => tracing::info!("workflow started"),
        _ => tracing::info!("workflow resumed"),
    }
    let outcome = match start_run(&workflow, &ctx, &state) {
        Ok(mut run) => {
            drop(state);
            loop {
                let parked = ctx.parked();
                tokio::select! {
                    biased;
                    why = live.interrupted() => break Outcome::Interrupted(why),
                    result = &mut run => break Outcome::Finished(result),
                    input = ctx.continue_asked() => break Outcome::Continued(input),
                    () = parked => {
                        if let Some(wake_at) = ctx.hibernation(HIBERNATE_AFTER) {
                            break Outcome::Hibernate(wake_at);
                        }
                    }
                }
            }
        }
        Err(panic) => Outcome::Finished(Err(panic)),
    };
    if let Outcome::Interrupted(Interrupt::Suspend) = outcome {
        // A pause stops at the step boundary: steps already in flight
        // finish and are recorded.
        ctx.finish_tasks().await;
    } else {
        ctx.stop_tasks().await;
    }
    let shared = ctx.scope.clone();
    // The rollback paths are boxed: a driver that only waits (thousands of
    // sleeping instances) then does not carry room for them in its task.
    match outcome {
        Outcome::Interrupted(Interrupt::Suspend) => {
            tracing::info!("workflow paused");
            return Ok(Some(Exit::Suspended));
        }
        Outcome::Hibernate(wake) => {
            let holds_slot = || {
                core.journal
                    .read_kept(id, |s| s.queue.as_ref().is_some_and(|q| q.taken))
                    .unwrap_or(false)
            };
            if releases && holds_slot() {
                shared.append(Change::SlotReleased)?;
                core.journal.flush().await?;
                tracing::debug!("workflow only waits: giving its queue's slot back");
            }
            tracing::debug!(wake_at = ?crate::time::clock::from_millis(wake.at), "workflow only waits: letting go until it wakes");
            return Ok(Some(Exit::Hibernated(wake)));
        }
        Outcome::Interrupted(Interrupt::Stop) => return Ok(Some(Exit::Other)),
        // Its step tasks are stopped (above): nothing of this run is
        // written after the hand-over.
        Outcome::Continued(input) => {
            shared.core.journal.continue_as_new(&shared.id, input)?;
            tracing::info!("workflow continued as new");
            return Ok(None);
        }
        Outcome::Interrupted(Interrupt::Requeue) => return Ok(Some(Exit::Requeued)),
        Outcome::Finished(Ok(Ok(output))) => {
            end(
                &shared,
                End {
                    status: Status::Complete,
                    output: Some(output),
                    failure: None,
                    rollback: None,
                },
            )
            .await?;
        }
        Outcome::Finished(Ok(Err(failure))) => {
            Box::pin(fail(&ctx, failure, Status::Errored)).await?
        }
        Outcome::Finished(Err(panic)) => {
            let failure = Failure::new(
                FailureKind::Panic,
                format!("the workflow panicked: {panic}"),
            );
            Box::pin(fail(&ctx, failure, Status::Errored)).await?;
        }
        Outcome::Interrupted(Interrupt::Terminate { rollback: false }) => {
            end(
                &shared,
                End {
                    status: Status::Terminated,
                    output: None,
                    failure: None,
                    rollback: None,
                },
            )
            .await?;
        }
        Outcome::Interrupted(Interrupt::Terminate { rollback: true }) => {
            let cause = Failure::new(FailureKind::Workflow, "terminated by user");
            Box::pin(fail(&ctx, cause, Status::Terminated)).await?;
        }
        // The code no longer matches the history: park the instance,
        // nothing after the divergence ran and no compensation runs
        // without a decision.
        Outcome::Interrupted(Interrupt::Fail(failure)) => {
            shared.append(Change::Blocked { failure })?;
            shared.core.journal.flush().await?;
            return Ok(Some(Exit::Other));
        }
    }
    Ok(Some(Exit::Ended))
}

/// The workflow function's future, made so that a panic of user code that
/// runs before its first await (a `workflow_fn` closure) is contained.
pub(super) type Run =
    CatchUnwind<crate::workflow::compensation::BoxFuture<std::result::Result<Payload, Failure>>>;

pub(super) fn start_run(
    workflow: &Arc<dyn ErasedWorkflow>,
    ctx: &Arc<Ctx>,
    state: &InstanceState,
) -> std::result::Result<Run, String> {
    crate::panic::catch(|| {
        CatchUnwind::new(workflow.run_erased(WorkflowContext { run: ctx.clone() }, &state.input))
    })
}

/// The workflow failed (or was terminated with rollback): compensate the
/// started steps, if any have a compensation, then end as `then`.
async fn fail(ctx: &Arc<Ctx>, cause: Failure, then: Status) -> Result<()> {
    let shared = &ctx.scope;
    if let Some(value) = cause.value() {
        shared.append(Change::FailureValue {
            value: value.clone(),
        })?;
    }
    let handlers = ctx.take_rollbacks();
    let any_eligible = shared
        .core
        .journal
        .read(&shared.id, |s| {
            s.slots.values().any(|slot| slot.has_rollback)
        })
        .await?;
    if !any_eligible {
        return end_after(shared, cause, then, None).await;
    }
    shared.append(Change::RollbackStarted {
        cause: cause.clone(),
        then,
    })?;
    shared.core.journal.flush().await?;
    tracing::info!(cause = %cause, "rollback started");
    run_compensations(shared, handlers, cause, then).await
}

async fn run_compensations(
    shared: &RunScope,
    handlers: Vec<crate::workflow::compensation::Registered>,
    cause: Failure,
    then: Status,
) -> Result<()> {
    let failure = compensate(shared, handlers, &cause).await?;
    let outcome = match failure {
        None => {
            tracing::info!("rollback completed");
            Ok(())
        }
        Some(failure) => {
            tracing::warn!(error = %failure, "rollback failed");
            Err(failure)
        }
    };
    end_after(shared, cause, then, Some(outcome)).await
}

/// Ends the instance `Errored` (with `cause`) or `Terminated`, with the
/// rollback's outcome when one ran; or `Compensated`, a completed child
/// that its parent's rollback undid.
async fn end_after(
    shared: &RunScope,
    cause: Failure,
    then: Status,
    rollback: Option<std::result::Result<(), Failure>>,
) -> Result<()> {
    if then == Status::Compensated {
        let rollback = rollback.unwrap_or(Ok(()));
        shared.append(Change::RecallEnded { rollback })?;
        shared.core.journal.flush().await?;
        tracing::info!("compensated: its parent rolled back");
        return Ok(());
    }
    let failure = (then == Status::Errored).then_some(cause);
    end(
        shared,
        End {
            status: then,
            output: None,
            failure,
            rollback,
        },
    )
    .await
}

async fn end(shared: &RunScope, end: End) -> Result<()> {
    let (status, failure) = (end.status, end.failure.clone());
    shared.append(Change::Ended(Box::new(end)))?;
    shared.core.journal.flush().await?;
    match (status, failure) {
        (Status::Complete, _) => tracing::info!("workflow completed"),
        (_, Some(failure)) => tracing::warn!(error = %failure, "workflow failed"),
        (status, None) => tracing::info!(%status, "workflow ended"),
    }
    Ok(())
}

/// After a crash mid-rollback: replay the workflow code with every call
/// answered from history (nothing runs forward) until the compensations of
/// the started steps are registered again, then go on compensating.
async fn rebuild_and_compensate(
    core: &Arc<Core>,
    id: &InstanceId,
    live: &Arc<Live>,
    workflow: Arc<dyn ErasedWorkflow>,
    state: InstanceState,
) -> Result<()> {
    let (cause, then) = match &state.rollback {
        Some(plan) => (plan.cause.clone(), plan.then),
        None => (
            Failure::new(
                FailureKind::Workflow,
                "rollback started without a recorded cause",
            ),
            Status::Errored,
        ),
    };
    // A Blocked instance of a `#[workflow]`: its code no longer matches
    // its history, so it is not run; each compensation is rebuilt from its
    // step's start record and the step table of the registered code.
    let blocked = state.rollback.as_ref().is_some_and(|plan| plan.by_name);
    let table = if blocked {
        workflow.step_table()
    } else {
        Vec::new()
    };
    let ctx = Ctx::new(
        core.clone(),
        id.clone(),
        live.clone(),
        Mode::Rebuild,
        &state,
        workflow.order_of_rollback(),
    );
    if !table.is_empty() {
        let handlers = crate::workflow::step_table::compensations_from_history(
            &state,
            &table,
            workflow.workflow_name(),
        );
        return run_compensations(&ctx.scope, handlers, cause, then).await;
    }
    let needed: BTreeSet<u32> = state
        .slots
        .iter()
        .filter(|(i, s)| {
            // A child's compensation needs no code: it is not rebuilt; nor
            // is that of a wait that received nothing (it has none to run).
            let nothing_to_undo = match s.kind {
                crate::journal::SlotKind::Child => true,
                crate::journal::SlotKind::Event => {
                    !matches!(s.state, crate::journal::SlotState::Received { .. })
                }
                _ => false,
            };
            s.has_rollback
                && !nothing_to_undo
                && state.compensations.get(i) != Some(&CompensationState::Completed)
        })
        .map(|(i, _)| *i)
        .collect();
    // A workflow that panics before its first await registers nothing:
    // the compensations history names then fail as not rebuilt.
    let Ok(mut run) = start_run(&workflow, &ctx, &state) else {
        let handlers = ctx.take_rollbacks();
        return run_compensations(&ctx.scope, handlers, cause, then).await;
    };
    for _ in 0..REBUILD_POLLS {
        let done = poll_fn(|cx| Poll::Ready(Pin::new(&mut run).poll(cx).is_ready())).await;
        let registered: BTreeSet<u32> = ctx.registered_rollback_slots().into_iter().collect();
        if done || live.is_interrupted() || needed.is_subset(&registered) {
            break;
        }
        tokio::task::yield_now().await;
    }
    drop(run);
    let handlers = ctx.take_rollbacks();
    run_compensations(&ctx.scope, handlers, cause, then).await
}
