//! Runs one instance: replays its workflow function forward, or, after a
//! crash mid-rollback, only far enough to rebuild its compensations; then
//! records how it ended.

use std::collections::BTreeSet;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use crate::context::{Ctx, Mode, Shared, WorkflowContext};
use crate::engine::{EngineInner, RegisteredWorkflow};
use crate::error::{Error, Result};
use crate::failure::{Failure, FailureKind};
use crate::history::EventKind;
use crate::live::{Interrupt, Live};
use crate::panic::CatchUnwind;
use crate::record::{InstanceRecord, RollbackPlan, RollbackState, SlotKind, SlotRecord, SlotState};
use crate::saga::{Registered, compensate};
use crate::status::Status;
use crate::store::Op;

/// How many times a rebuild polls the workflow future for handlers that
/// history says exist; replayed calls complete at once, so a handful is
/// plenty.
const REBUILD_POLLS: usize = 16;

/// Runs the instance until it ends or is stopped; `true` if it stopped
/// because it was paused.
pub(crate) async fn drive(engine: &Arc<EngineInner>, id: &Arc<str>, live: &Arc<Live>) -> bool {
    match drive_once(engine, id, live).await {
        Ok(exit) => exit == Exit::Suspended,
        Err(e) => {
            tracing::error!(instance = %id, error = %e, "instance driver stopped on an error");
            match e {
                Error::Corrupt { .. } => end_corrupt(engine, id, &e).await,
                // The store failed: the instance stays where it is and
                // resumes on the next open; result() says why meanwhile.
                _ => engine.stopped_by_store(id, &e),
            }
            false
        }
    }
}

/// A record of the instance no longer decodes, so replay cannot go on:
/// the instance ends `Errored` with a `Decode` failure naming the record,
/// instead of waiting forever for a driver that cannot run it.
async fn end_corrupt(engine: &Arc<EngineInner>, id: &str, error: &Error) {
    let message =
        format!("the instance cannot be replayed and its compensations did not run: {error}");
    let written = engine.write(id, |txn| {
        let now = txn.now();
        let record = txn.record()?;
        if record.status.is_terminal() {
            return Ok(());
        }
        record.status = Status::Errored;
        record.finished_at = Some(now);
        record.failure = Some(Failure::new(FailureKind::Decode, message.clone()));
        txn.event(EventKind::InstanceErrored {
            error: message.clone(),
        });
        Ok(())
    });
    let flushed = match written {
        Ok(()) => engine.flush().await,
        Err(e) => Err(e),
    };
    if let Err(e) = flushed {
        tracing::error!(instance = %id, error = %e, "could not record that the instance is corrupt");
    }
}

#[derive(PartialEq, Eq)]
enum Exit {
    Suspended,
    Other,
}

/// Called after a driver let go of a paused instance: if a user resumed it
/// in the meantime, run it again.
pub(crate) fn after_suspend(engine: &Arc<EngineInner>, id: &str) {
    if engine.is_closed() {
        return;
    }
    if let Ok(Some(record)) = engine.store.instance(id)
        && matches!(record.status, Status::Running | Status::Queued)
        && engine.is_registered(&record.workflow)
    {
        engine.spawn_driver(id);
    }
}

async fn drive_once(engine: &Arc<EngineInner>, id: &Arc<str>, live: &Arc<Live>) -> Result<Exit> {
    let record = engine.record(id)?;
    let Some(workflow) = engine.workflow(&record.workflow) else {
        return Ok(Exit::Other);
    };
    match record.status {
        Status::RollingBack => {
            Box::pin(rebuild_and_compensate(engine, id, live, workflow, record)).await?;
            Ok(Exit::Other)
        }
        Status::Queued | Status::Running | Status::Waiting => {
            run_forward(engine, id, live, workflow, record).await
        }
        // Paused before this driver got going: a resume may race with it,
        // so let `after_suspend` look again once this driver is gone.
        Status::Paused => Ok(Exit::Suspended),
        Status::Complete | Status::Errored | Status::Terminated => Ok(Exit::Other),
    }
}

enum Outcome {
    Finished(std::result::Result<std::result::Result<Vec<u8>, Failure>, String>),
    Interrupted(Interrupt),
}

async fn run_forward(
    engine: &Arc<EngineInner>,
    id: &Arc<str>,
    live: &Arc<Live>,
    workflow: Arc<dyn RegisteredWorkflow>,
    record: InstanceRecord,
) -> Result<Exit> {
    let slots = engine.store.slots(id)?;
    let ctx = Ctx::new(
        engine.clone(),
        id.clone(),
        Arc::from(record.workflow.as_str()),
        live.clone(),
        Mode::Forward,
        slots,
    );
    engine.write(id, |txn| {
        let record = txn.record()?;
        if record.status == Status::Queued {
            record.status = Status::Running;
        }
        txn.event(EventKind::InstanceResumed);
        Ok(())
    })?;
    let run =
        CatchUnwind::new(workflow.run_erased(WorkflowContext { ctx: ctx.clone() }, &record.input));
    let outcome = tokio::select! {
        result = run => Outcome::Finished(result),
        why = live.interrupted() => Outcome::Interrupted(why),
    };
    ctx.stop_tasks().await;
    let shared = ctx.shared.clone();
    if let Outcome::Interrupted(Interrupt::Suspend) = outcome {
        return Ok(Exit::Suspended);
    }
    // The rollback paths are boxed: a driver that only waits (thousands of
    // sleeping instances) then does not carry room for them in its task.
    match outcome {
        Outcome::Finished(Ok(Ok(output))) => {
            finish(
                &shared,
                Status::Complete,
                Some(output),
                None,
                EventKind::InstanceCompleted,
            )
            .await
        }
        Outcome::Finished(Ok(Err(failure))) => Box::pin(fail(&ctx, failure, Status::Errored)).await,
        Outcome::Finished(Err(panic)) => {
            let failure = Failure::new(
                FailureKind::Panic,
                format!("the workflow panicked: {panic}"),
            );
            Box::pin(fail(&ctx, failure, Status::Errored)).await
        }
        Outcome::Interrupted(Interrupt::Suspend | Interrupt::Stop) => Ok(()),
        Outcome::Interrupted(Interrupt::Terminate { rollback: false }) => {
            finish(
                &shared,
                Status::Terminated,
                None,
                None,
                EventKind::InstanceTerminated,
            )
            .await
        }
        Outcome::Interrupted(Interrupt::Terminate { rollback: true }) => {
            let cause = Failure::new(FailureKind::Workflow, "terminated by user");
            Box::pin(fail(&ctx, cause, Status::Terminated)).await
        }
        Outcome::Interrupted(Interrupt::Fail(failure)) => {
            let error = failure.message().to_owned();
            finish(
                &shared,
                Status::Errored,
                None,
                Some(failure),
                EventKind::InstanceErrored { error },
            )
            .await
        }
    }?;
    Ok(Exit::Other)
}

/// The workflow failed (or was terminated with rollback): compensate the
/// started steps, if any have a compensation, then end as `then`.
async fn fail(ctx: &Arc<Ctx>, cause: Failure, then: Status) -> Result<()> {
    let shared = &ctx.shared;
    let handlers = ctx.take_rollbacks();
    let slots = shared.engine.store.slots(&shared.id)?;
    let any_eligible = !handlers.is_empty() || slots.iter().any(|(_, s)| s.has_rollback);
    if !any_eligible {
        return end_after(shared, cause, then, None, false).await;
    }
    shared.write(|txn| {
        // Steps still running were stopped with the workflow: they will
        // never run again, and their compensation gets no output.
        for (index, slot) in &slots {
            if matches!(slot.state, SlotState::Running { .. }) {
                let mut slot = slot.clone();
                slot.state = SlotState::Cancelled;
                txn.put(Op::PutSlot(shared.id.to_string(), *index, slot));
            }
        }
        // A step that was called but stopped before its task stored
        // anything is started too: record it, or a crash from here on
        // would forget its compensation (recovery rebuilds handlers only
        // for steps history knows).
        let recorded: BTreeSet<u32> = slots.iter().map(|(i, _)| *i).collect();
        for handler in handlers.iter().filter(|h| !recorded.contains(&h.index)) {
            let slot = SlotRecord {
                kind: SlotKind::Step,
                name: handler.step.clone(),
                occurrence: handler.occurrence,
                has_rollback: true,
                history_seq: txn.next_seq(),
                state: SlotState::Cancelled,
            };
            txn.put(Op::PutSlot(shared.id.to_string(), handler.index, slot));
        }
        let record = txn.record()?;
        record.status = Status::RollingBack;
        record.rollback = Some(RollbackPlan {
            cause: cause.clone(),
            then,
            failure: None,
        });
        txn.event(EventKind::RollbackStarted {
            cause: cause.message().to_owned(),
        });
        Ok(())
    })?;
    shared.engine.flush().await?;
    run_compensations(shared, handlers, cause, then).await
}

async fn run_compensations(
    shared: &Shared,
    handlers: Vec<Registered>,
    cause: Failure,
    then: Status,
) -> Result<()> {
    let failure = compensate(shared, handlers, &cause).await?;
    end_after(shared, cause, then, failure, true).await
}

/// Ends the instance `Errored` (with `cause`) or `Terminated`, recording
/// the rollback's outcome when one ran.
async fn end_after(
    shared: &Shared,
    cause: Failure,
    then: Status,
    rollback_failure: Option<Failure>,
    rolled_back: bool,
) -> Result<()> {
    shared.write(|txn| {
        if rolled_back {
            match &rollback_failure {
                None => {
                    txn.event(EventKind::RollbackCompleted);
                }
                Some(f) => {
                    let step = match f.kind() {
                        FailureKind::Rollback { step } => step.clone(),
                        _ => String::new(),
                    };
                    txn.event(EventKind::RollbackFailed {
                        step,
                        error: f.message().to_owned(),
                    });
                }
            }
        }
        let now = txn.now();
        let record = txn.record()?;
        record.status = then;
        record.finished_at = Some(now);
        if let Some(plan) = &mut record.rollback {
            plan.failure = rollback_failure.clone();
        }
        if then == Status::Errored {
            record.failure = Some(cause.clone());
            txn.event(EventKind::InstanceErrored {
                error: cause.message().to_owned(),
            });
        } else {
            txn.event(EventKind::InstanceTerminated);
        }
        Ok(())
    })?;
    shared.engine.flush().await?;
    shared.engine.release_cursor(&shared.id);
    Ok(())
}

async fn finish(
    shared: &Shared,
    status: Status,
    output: Option<Vec<u8>>,
    failure: Option<Failure>,
    event: EventKind,
) -> Result<()> {
    shared.write(|txn| {
        let now = txn.now();
        let record = txn.record()?;
        record.status = status;
        record.finished_at = Some(now);
        record.output = output;
        record.failure = failure;
        txn.event(event);
        Ok(())
    })?;
    shared.engine.flush().await?;
    shared.engine.release_cursor(&shared.id);
    Ok(())
}

/// After a crash mid-rollback: replay the workflow code with every call
/// answered from history (nothing runs forward) until the compensations of
/// the started steps are registered again, then go on compensating.
async fn rebuild_and_compensate(
    engine: &Arc<EngineInner>,
    id: &Arc<str>,
    live: &Arc<Live>,
    workflow: Arc<dyn RegisteredWorkflow>,
    record: InstanceRecord,
) -> Result<()> {
    let (cause, then) = match &record.rollback {
        Some(plan) => (plan.cause.clone(), plan.then),
        None => (
            Failure::new(
                FailureKind::Workflow,
                "rollback started without a recorded cause",
            ),
            Status::Errored,
        ),
    };
    let slots = engine.store.slots(id)?;
    let finished: BTreeSet<u32> = engine
        .store
        .rollbacks(id)?
        .into_iter()
        .filter(|(_, r)| r.state == RollbackState::Completed)
        .map(|(i, _)| i)
        .collect();
    let needed: BTreeSet<u32> = slots
        .iter()
        .filter(|(i, s)| s.has_rollback && !finished.contains(i))
        .map(|(i, _)| *i)
        .collect();
    let ctx = Ctx::new(
        engine.clone(),
        id.clone(),
        Arc::from(record.workflow.as_str()),
        live.clone(),
        Mode::Rebuild,
        slots,
    );
    let mut run =
        CatchUnwind::new(workflow.run_erased(WorkflowContext { ctx: ctx.clone() }, &record.input));
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
    run_compensations(&ctx.shared, handlers, cause, then).await
}
