//! Child workflows: `ctx.child("book-flight", book_flight, input)` starts
//! an instance of another registered workflow as a durable call of the
//! parent, and returns its typed result.
//!
//! - **The call.** Its start (`ChildStarted`, with the child's id) is
//!   recorded before the child exists; its outcome (`ChildEnded`) when the
//!   child ended. Replay answers from those records and never starts a
//!   second child: the child's id is derived from the parent's id, the
//!   call's name and occurrence and the parent's generation (see
//!   [`InstanceId::child`]), so a crash between the record and the child's
//!   creation finds or creates that one child.
//! - **Waiting.** The parent waits as it waits for an event: asleep, so a
//!   driver with nothing else to do lets go of it (hibernation). The
//!   child's end wakes it (`Command::ChildEnded`, posted to the parent's
//!   worker on a store shared by workers), and the parent reads the
//!   child's outcome from the store, wherever the child ran.
//! - **Rollback.** A child the parent's rollback compensates has a
//!   compensation of its own kind, built from history alone
//!   ([`ChildRollback`]): a completed child is recalled (its own
//!   compensations run, and it ends `Compensated`), a running one is
//!   terminated with rollback, and one that failed or was terminated is
//!   left as it is (it compensated itself already, or was ended on
//!   purpose).
//!
//! What the engine does for a child (start it, tell it, find whether a
//! workflow is registered) is above this module, in the runner: it is
//! reached through [`Kin`], which the runner implements.

use std::future::{Future, pending};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::codec::Payload;
use crate::error::failure::{Failure, FailureKind, StepError};
use crate::journal::command::Command;
use crate::journal::{Change, InstanceState, SlotKind, SlotState};
use crate::model::status::Status;
use crate::names::id::InstanceId;
use crate::workflow::Workflow;
use crate::workflow::compensation::{BoxFuture, ErasedRollback};
use crate::workflow::config::StepConfig;
use crate::workflow::context::{Mode, Reserved, RunScope, Slot, WorkflowContext};
use crate::workflow::engine_core::Core;
use crate::workflow::key::IdempotencyKey;
use crate::workflow::live::Live;
use crate::workflow::service::Services;

/// How often a parent that waits for a child looks at it again on a store
/// shared by workers, where the child's end is told through the store and
/// a worker that dies between the child's end and the telling would leave
/// the parent waiting. Real time, as the store's leases: a test clock
/// that skips ahead does not see it.
pub(crate) const RECHECK_SHARED: std::time::Duration = std::time::Duration::from_secs(60);

/// The wake time of a parent that waits for a child: none. Its child's
/// end wakes it (and on a store shared by workers, a look every
/// [`RECHECK_SHARED`]).
pub(crate) const NEVER: u64 = u64::MAX;

/// A child workflow of the parent that failed, was terminated or was
/// compensated: what a `ctx.child(..)` call resolves to when the child did
/// not complete.
///
/// The workflow may catch it and go on, or propagate it with `?`: then the
/// parent fails and its rollback begins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildFailed {
    name: String,
    child: String,
    status: Status,
    failure: Option<Box<Failure>>,
}

impl ChildFailed {
    /// The call's name (`"book-flight"`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The child instance's id.
    pub fn child(&self) -> &str {
        &self.child
    }

    /// How the child ended: `Errored`, `Terminated` or `Compensated`.
    pub fn status(&self) -> Status {
        self.status
    }

    /// Why the child failed, when it ended `Errored`.
    pub fn failure(&self) -> Option<&Failure> {
        self.failure.as_deref()
    }

    /// The child workflow's own error, typed, when it returned one of
    /// type `E` (see [`Failure::downcast`]).
    pub fn downcast<E: DeserializeOwned>(&self) -> Option<E> {
        self.failure.as_ref()?.downcast()
    }
}

impl std::fmt::Display for ChildFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (name, child) = (&self.name, &self.child);
        match (self.failure.as_deref(), self.status) {
            (Some(failure), _) => {
                write!(f, "child {name:?} (instance {child:?}) failed: {failure}")
            }
            (None, Status::Terminated) => {
                write!(f, "child {name:?} (instance {child:?}) was terminated")
            }
            (None, status) => write!(f, "child {name:?} (instance {child:?}) ended {status}"),
        }
    }
}

impl std::error::Error for ChildFailed {}

/// What a child workflow is to the parent that calls it, for
/// `Workflow::children`: `register` refuses a parent whose children's
/// workflows are not registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChildNeed {
    /// The call's name.
    pub call: &'static str,
    /// The child's workflow name.
    pub workflow: &'static str,
}

impl ChildNeed {
    /// The need of call `call` for `workflow`.
    pub fn of<W: Workflow>(call: &'static str, workflow: &W) -> ChildNeed {
        ChildNeed {
            call,
            workflow: workflow.name(),
        }
    }
}

/// A `ctx.child(..)` call: a future of the child's result. The child's
/// slot is taken when the call is made (in call order, as every durable
/// call), so `tokio::join!` of children replays; the child starts when the
/// future is first polled.
#[must_use = "a child workflow starts when its call is awaited"]
pub struct ChildCall<O> {
    begun: Option<Begun>,
    running: Option<BoxFuture<Result<O, ChildFailed>>>,
    output: PhantomData<fn() -> O>,
}

/// What a call knows before it is first polled.
struct Begun {
    scope: Arc<RunScope>,
    reserved: Option<Reserved>,
    name: &'static str,
    workflow: &'static str,
    input: crate::Result<Payload>,
    rollback: bool,
    renamed_from: Option<&'static str>,
}

impl<O> ChildCall<O> {
    /// The parent's rollback leaves this child as it is: for a child whose
    /// effects stand on their own (a notification). By default a completed
    /// child is compensated when the parent rolls back.
    pub fn no_rollback(mut self) -> Self {
        if let Some(begun) = &mut self.begun {
            begun.rollback = false;
        }
        self
    }

    /// The name earlier releases gave this call: a replay finds the child
    /// recorded under it (and its id, derived from that name).
    pub fn renamed_from(mut self, old: &'static str) -> Self {
        if let Some(begun) = &mut self.begun {
            begun.renamed_from = Some(old);
        }
        self
    }
}

impl<O: DeserializeOwned + Send + 'static> Future for ChildCall<O> {
    type Output = Result<O, ChildFailed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(begun) = self.begun.take() {
            self.running = Some(Box::pin(begin(begun)));
        }
        match &mut self.running {
            Some(running) => running.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

impl WorkflowContext {
    /// Starts child workflow `workflow` with `input` as call `name`, and
    /// waits for its result. The child is a full instance (`list`, `show`,
    /// control), with a derived id: `{parent}.{name}`, then
    /// `~o{occurrence}g{generation}r{run}` where those are not 0 (`run`:
    /// the parent's run, once it continued as new).
    ///
    /// - The call is durable: replay never starts a second child, and a
    ///   crash anywhere finds the one child again.
    /// - A child that fails, is terminated or compensated resolves to
    ///   [`ChildFailed`]; catch it, or let `?` fail the parent.
    /// - When the parent rolls back, a child that completed is undone at
    ///   its place in reverse start order (its own compensations run; it
    ///   ends `Compensated`), a child still running is terminated with
    ///   rollback, a child that failed is left as it is. Opt out with
    ///   [`ChildCall::no_rollback`].
    ///
    /// `name` follows the step-name rules, is unique in the workflow and
    /// listed in `saga.lock` (checked by `#[workflow]`); `workflow` must be
    /// registered with the engine (`register` refuses a `#[workflow]`
    /// parent whose children are not).
    pub fn child<W: Workflow>(
        &self,
        name: &'static str,
        workflow: W,
        input: W::Input,
    ) -> ChildCall<W::Output> {
        let scope = self.run.scope.clone();
        let reserved = self.run.reserve_slot(SlotKind::Child, name, None);
        let input = scope
            .core
            .encode_readable(&input, || format!("input of child workflow {name:?}"));
        ChildCall {
            begun: Some(Begun {
                scope,
                reserved,
                name,
                workflow: workflow.name(),
                input,
                rollback: true,
                renamed_from: None,
            }),
            running: None,
            output: PhantomData,
        }
    }
}

async fn begin<O: DeserializeOwned>(begun: Begun) -> Result<O, ChildFailed> {
    let Begun {
        scope,
        reserved,
        name,
        workflow,
        input,
        rollback,
        renamed_from,
    } = begun;
    let Some(slot) = reserved.and_then(|r| r.matching(&scope, renamed_from)) else {
        return pending().await;
    };
    let span = tracing::info_span!(
        "saga.child",
        instance = %scope.id,
        workflow = %scope.workflow,
        name,
        occurrence = slot.occurrence,
        child_workflow = workflow,
    );
    let call = Call {
        scope,
        slot,
        workflow,
    };
    call.run(input, rollback).instrument(span).await
}

struct Call {
    scope: Arc<RunScope>,
    slot: Slot,
    workflow: &'static str,
}

impl Call {
    async fn run<O: DeserializeOwned>(
        self,
        input: crate::Result<Payload>,
        rollback: bool,
    ) -> Result<O, ChildFailed> {
        let shared = &self.scope;
        let child = match self.slot.recorded.as_ref().map(|r| &r.state) {
            Some(SlotState::ChildEnded {
                child,
                status,
                output,
                failure,
            }) => {
                let ended = Ended {
                    status: *status,
                    output: output.clone(),
                    failure: failure.as_deref().cloned(),
                };
                return self.answer(child, ended);
            }
            Some(SlotState::ChildRunning { child, .. }) if shared.mode == Mode::Forward => {
                InstanceId::stored(child)
            }
            None if shared.mode == Mode::Forward => {
                if shared.pause_here() {
                    return pending().await;
                }
                let child = shared.id.child(
                    &self.slot.name,
                    self.slot.occurrence,
                    self.slot.generation,
                    shared.run,
                );
                // Appended at once; made durable by the creation below.
                if let Err(e) = shared.append(Change::ChildStarted {
                    slot: self.slot.index,
                    name: self.slot.name.to_string(),
                    occurrence: self.slot.occurrence,
                    workflow: self.workflow.to_owned(),
                    child: child.to_string(),
                    rollback,
                }) {
                    return shared.stall(e).await;
                }
                tracing::info!(child = %child, "child workflow started");
                child
            }
            _ => return pending().await,
        };
        let Some(kin) = shared.core.kin() else {
            return pending().await;
        };
        // Not registered here (a hand-written parent, whose children
        // `register` cannot know): parked until a release registers it.
        if !kin.registered(self.workflow) {
            shared.fail(Failure::new(
                FailureKind::Workflow,
                format!(
                    "child {:?} runs workflow {:?}, which is not registered: register it and the instance resumes",
                    self.slot.name, self.workflow
                ),
            ));
            return pending().await;
        }
        let input = match input {
            Ok(input) => input,
            Err(e) => {
                shared.fail(Failure::new(FailureKind::Workflow, e.to_string()));
                return pending().await;
            }
        };
        // Created once (a start of the child id that exists is a no-op),
        // in a task of the engine's: a call dropped after its record was
        // appended still creates its child, never leaving half of one.
        let created = shared
            .core
            .spawn(kin.start_child(&shared.id, &child, self.workflow, input));
        match created.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return shared.stall(e).await,
            Err(_) => return pending().await,
        }
        let ended = self.wait(&child).await;
        shared
            .record(Change::ChildEnded {
                slot: self.slot.index,
                status: ended.status,
                output: ended.output.clone(),
                failure: ended.failure.clone(),
                value: ended.failure.as_ref().and_then(|f| f.value().cloned()),
            })
            .await;
        tracing::info!(child = %child, status = %ended.status, "child workflow ended");
        self.answer(&child, ended)
    }

    /// Waits, asleep, until the child ended.
    async fn wait(&self, child: &InstanceId) -> Ended {
        let shared = &self.scope;
        loop {
            let told = shared.live.event_sent.notified();
            match outcome(&shared.core, child).await {
                Ok(Some(ended)) => {
                    // Its end is taken only while it holds its queue's slot.
                    shared.hold_slot().await;
                    return ended;
                }
                Ok(None) => {}
                Err(e) => return shared.stall(e).await,
            }
            let asleep = shared.asleep_until(self.slot.index, NEVER);
            tokio::select! {
                // Told first: either looks again.
                // Biased: a simulated run picks the same on every replay of its seed.
                biased;
                () = told => {}
                () = tokio::time::sleep(RECHECK_SHARED), if shared.core.journal.shared() => {}
            }
            drop(asleep);
        }
    }

    /// What the call returns for a child that ended so.
    fn answer<O: DeserializeOwned>(&self, child: &str, ended: Ended) -> Result<O, ChildFailed> {
        let failed = |failure: Option<Failure>| ChildFailed {
            name: self.slot.name.to_string(),
            child: child.to_owned(),
            status: ended.status,
            failure: failure.map(Box::new),
        };
        if ended.status != Status::Complete {
            return Err(failed(ended.failure.clone()));
        }
        let decoded = match &ended.output {
            Some(output) if output.sealed_key().is_some() => Err(crate::codec::missing_key_detail(
                output.sealed_key().unwrap_or_default(),
            )),
            Some(output) => output.decode::<O>(),
            None => Err("no output was stored".to_owned()),
        };
        decoded.map_err(|detail| {
            failed(Some(Failure::new(
                FailureKind::Decode,
                format!(
                    "the output of child {:?} does not decode as `{}`: {detail}",
                    self.slot.name,
                    std::any::type_name::<O>()
                ),
            )))
        })
    }
}

/// How a child ended, as its parent records it.
struct Ended {
    status: Status,
    output: Option<Payload>,
    failure: Option<Failure>,
}

/// How child `child` ended, read from the store; `None` while it has not.
/// A child parked `Blocked` has not ended: a decision about it is still
/// to come.
async fn outcome(core: &Core, child: &InstanceId) -> crate::Result<Option<Ended>> {
    let read = core
        .journal
        .read_durable(child, |state| {
            state.status.is_terminal().then(|| Ended {
                status: state.status,
                output: state.output.clone(),
                failure: state.failure.clone(),
            })
        })
        .await;
    match read {
        Ok(ended) => Ok(ended),
        // Not created yet (a start that the store has yet to show).
        Err(crate::Error::UnknownInstance { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The compensation of a child workflow, built from the parent's history
/// alone: it needs no code of the parent's (see the module docs).
pub(crate) struct ChildRollback {
    core: Arc<Core>,
    live: Arc<Live>,
    child: InstanceId,
}

impl ChildRollback {
    /// The compensation of the child of slot `slot` of `state`, if the
    /// parent's rollback has one to run: a child that failed or was
    /// terminated (or compensated already) is left as it is.
    pub(crate) fn of(scope: &RunScope, state: &SlotState) -> Option<ChildRollback> {
        let child = match state {
            SlotState::ChildRunning { child, .. } => child,
            SlotState::ChildEnded {
                child,
                status: Status::Complete,
                ..
            } => child,
            _ => return None,
        };
        Some(ChildRollback {
            core: scope.core.clone(),
            live: scope.live.clone(),
            child: InstanceId::stored(child),
        })
    }
}

impl ErasedRollback for ChildRollback {
    fn config(&self) -> StepConfig {
        StepConfig::new()
    }

    fn attempt(
        &mut self,
        _output: Option<&Payload>,
        cause: &Failure,
        _key: &IdempotencyKey,
        _step_key: &IdempotencyKey,
        _attempt: u32,
        _services: &Arc<Services>,
    ) -> std::result::Result<BoxFuture<Result<(), StepError>>, String> {
        let (core, live, child) = (self.core.clone(), self.live.clone(), self.child.clone());
        let cause = cause.clone();
        Ok(Box::pin(async move {
            undo_child(&core, &live, &child, cause).await
        }))
    }
}

/// Undoes child `child`: recalls it if it completed, terminates it with
/// rollback if it runs, and waits until it ended; an error when its own
/// rollback gave up.
async fn undo_child(
    core: &Core,
    live: &Live,
    child: &InstanceId,
    cause: Failure,
) -> Result<(), StepError> {
    let Some(kin) = core.kin() else {
        return Err(StepError::retryable("the engine is closing"));
    };
    let store = |e: crate::Error| StepError::retryable(e);
    let read = |state: &InstanceState| {
        let gave_up = state.rollback.as_ref().is_some_and(|p| p.failure.is_some());
        (state.status, gave_up)
    };
    let (status, gave_up) = match core.journal.read_durable(child, read).await {
        Ok(read) => read,
        // Never created: the call was recorded and the parent failed
        // before it got to start it. Nothing to undo.
        Err(crate::Error::UnknownInstance { .. }) => return Ok(()),
        Err(e) => return Err(store(e)),
    };
    let command = match status {
        Status::Complete => Some(Command::Recall {
            cause: cause.clone(),
        }),
        // Undone by this rollback before, and its own rollback gave up:
        // the parent's `retry_rollback` retries the child's too.
        Status::Compensated | Status::Terminated if gave_up => Some(Command::RetryRollback),
        Status::RollingBack | Status::Errored | Status::Terminated | Status::Compensated => None,
        _ => Some(Command::Terminate { rollback: true }),
    };
    tracing::info!(child = %child, %status, gave_up, "undoing a child workflow");
    if let Some(command) = command {
        match kin.command(child, command).await {
            Ok(()) => {}
            // It ended on its own meanwhile: look at how, below.
            Err(crate::Error::InvalidState { .. }) => {}
            Err(e) => return Err(store(e)),
        }
    }
    // Its end tells this parent (`Command::ChildEnded`), which wakes this.
    loop {
        let told = live.event_sent.notified();
        let ended = core
            .journal
            .read_durable(child, |state| {
                let gave_up = state.rollback.as_ref().and_then(|p| p.failure.clone());
                (state.status, gave_up)
            })
            .await
            .map_err(store)?;
        match ended {
            (Status::Complete, _) => {
                // Completed as the terminate came: recall it now.
                match kin
                    .command(
                        child,
                        Command::Recall {
                            cause: cause.clone(),
                        },
                    )
                    .await
                {
                    Ok(()) | Err(crate::Error::InvalidState { .. }) => {}
                    Err(e) => return Err(store(e)),
                }
            }
            (status, Some(gave_up)) if status.is_terminal() => {
                return Err(StepError::fatal(format!(
                    "child instance {child:?} could not be compensated: {gave_up}"
                )));
            }
            (status, None) if status.is_terminal() => return Ok(()),
            _ => {}
        }
        let poll = core.poll;
        tokio::select! {
            // Told first: either looks again.
            // Biased: a simulated run picks the same on every replay of its seed.
            biased;
            () = told => {}
            // Real time: on a store shared by workers the child's end may
            // come from another process.
            () = tokio::time::sleep(poll), if core.journal.shared() => {}
        }
    }
}

/// For `#[workflow]`'s generated `Workflow::children`.
pub fn child_need<W: Workflow>(call: &'static str, workflow: &W) -> ChildNeed {
    ChildNeed::of(call, workflow)
}
