//! Handles on instances: status, result, history, and control.

use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;
use std::time::SystemTime;

use serde::de::DeserializeOwned;

use crate::clock::from_millis;
use crate::codec::decode_payload;
use crate::engine::EngineInner;
use crate::error::{Error, Result};
use crate::failure::{Failure, FailureKind};
use crate::history::{Event, EventKind};
use crate::live::Interrupt;
use crate::record::{InstanceRecord, RollbackPlan, SlotKind, SlotState};
use crate::status::Status;
use crate::store::Op;

/// A handle on one instance. Cheap to clone.
#[derive(Clone)]
pub struct Instance {
    engine: Arc<EngineInner>,
    id: String,
}

/// What `list()` and `info()` tell about an instance.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstanceInfo {
    /// The instance id.
    pub id: String,
    /// The workflow it runs.
    pub workflow: String,
    /// Where it is.
    pub status: Status,
    /// When it was started.
    pub created_at: SystemTime,
    /// When its record last changed.
    pub updated_at: SystemTime,
    /// When it finished.
    pub finished_at: Option<SystemTime>,
    /// Why it failed, when it ended `Errored`.
    pub failure: Option<Failure>,
    /// The compensation that failed, when one did.
    pub rollback_failure: Option<Failure>,
    /// Whether its workflow is registered in this process. An unfinished
    /// instance whose workflow is not stays untouched until it is.
    pub workflow_registered: bool,
}

impl InstanceInfo {
    pub(crate) fn from_record(engine: &EngineInner, id: &str, record: &InstanceRecord) -> Self {
        InstanceInfo {
            id: id.to_owned(),
            workflow: record.workflow.clone(),
            status: record.status,
            created_at: from_millis(record.created_at),
            updated_at: from_millis(record.updated_at),
            finished_at: record.finished_at.map(from_millis),
            failure: record.failure.clone(),
            rollback_failure: record.rollback.as_ref().and_then(|p| p.failure.clone()),
            workflow_registered: engine.is_registered(&record.workflow),
        }
    }
}

/// Which instances `Engine::list` returns.
#[derive(Clone, Debug, Default)]
pub struct ListFilter {
    status: Option<Status>,
    workflow: Option<String>,
    unregistered: bool,
}

impl ListFilter {
    /// Every instance.
    pub fn all() -> Self {
        ListFilter::default()
    }

    /// Only instances in `status`.
    pub fn status(mut self, status: Status) -> Self {
        self.status = Some(status);
        self
    }

    /// Only instances of the workflow named `name`.
    pub fn workflow(mut self, name: impl Into<String>) -> Self {
        self.workflow = Some(name.into());
        self
    }

    /// Only instances whose workflow is not registered in this process.
    pub fn unregistered(mut self) -> Self {
        self.unregistered = true;
        self
    }

    pub(crate) fn matches(&self, info: &InstanceInfo) -> bool {
        self.status.is_none_or(|s| s == info.status)
            && self.workflow.as_ref().is_none_or(|w| *w == info.workflow)
            && (!self.unregistered || !info.workflow_registered)
    }
}

impl Instance {
    pub(crate) fn new(engine: Arc<EngineInner>, id: String) -> Self {
        Instance { engine, id }
    }

    /// The instance id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where the instance is.
    pub fn status(&self) -> Result<Status> {
        Ok(self.engine.record(&self.id)?.status)
    }

    /// Status, timestamps, failure and rollback failure.
    pub fn info(&self) -> Result<InstanceInfo> {
        let record = self.engine.record(&self.id)?;
        Ok(InstanceInfo::from_record(&self.engine, &self.id, &record))
    }

    /// Every event of the instance, in order.
    pub fn history(&self) -> Result<Vec<Event>> {
        self.engine.record(&self.id)?;
        Ok(self
            .engine
            .store
            .history(&self.id)?
            .into_iter()
            .map(|(seq, record)| Event {
                instance: self.id.clone(),
                seq,
                at: from_millis(record.at),
                kind: record.kind,
            })
            .collect())
    }

    /// Waits for the instance to finish: its output when it completed,
    /// [`Error::WorkflowFailed`] or [`Error::Terminated`] otherwise.
    pub async fn result<O: DeserializeOwned>(&self) -> Result<O> {
        let mut ended = self.engine.ended.subscribe();
        loop {
            ended.borrow_and_update();
            let record = self.engine.record(&self.id)?;
            match record.status {
                Status::Complete => {
                    let output = record.output.unwrap_or_default();
                    return decode_payload(&output).map_err(|detail| Error::Decode {
                        what: format!("output of instance {:?}", self.id),
                        type_name: std::any::type_name::<O>(),
                        detail,
                    });
                }
                Status::Errored => {
                    return Err(Error::WorkflowFailed {
                        id: self.id.clone(),
                        failure: Box::new(record.failure.unwrap_or_else(|| {
                            Failure::new(FailureKind::Workflow, "failed without a recorded error")
                        })),
                        rollback_failure: record.rollback.and_then(|p| p.failure).map(Box::new),
                    });
                }
                Status::Terminated => {
                    return Err(Error::Terminated {
                        id: self.id.clone(),
                        rollback_failure: record.rollback.and_then(|p| p.failure).map(Box::new),
                    });
                }
                _ if self.engine.store_failure(&self.id).is_some() => {
                    let error = self.engine.store_failure(&self.id).unwrap_or_default();
                    return Err(Error::Store(format!(
                        "instance {:?} stopped on a store failure ({error}); it resumes when the store is opened again",
                        self.id
                    )));
                }
                _ if !self.engine.is_registered(&record.workflow) => {
                    return Err(Error::WorkflowNotRegistered {
                        id: self.id.clone(),
                        workflow: record.workflow,
                    });
                }
                _ => {}
            }
            if ended.changed().await.is_err() {
                return Err(Error::Closed);
            }
        }
    }

    /// Pauses the instance: it stops at its next step boundary (a step,
    /// sleep or wait it has not started yet) with status `Paused`.
    pub async fn pause(&self) -> Result<()> {
        self.engine.write(&self.id, |txn| {
            let record = txn.record()?;
            match record.status {
                Status::Queued | Status::Running | Status::Waiting => {
                    record.status = Status::Paused;
                    txn.event(EventKind::Paused);
                    Ok(())
                }
                Status::Paused => Ok(()),
                status => Err(self.invalid(status, "pause it")),
            }
        })?;
        self.engine.flush().await?;
        if let Some(live) = self.engine.live(&self.id) {
            live.request_pause(true);
        }
        Ok(())
    }

    /// Resumes a paused instance.
    pub async fn resume(&self) -> Result<()> {
        let resumed = self.engine.write(&self.id, |txn| {
            let record = txn.record()?;
            match record.status {
                Status::Paused => {
                    record.status = Status::Running;
                    txn.event(EventKind::Resumed);
                    Ok(true)
                }
                Status::Queued | Status::Running | Status::Waiting => Ok(false),
                status => Err(self.invalid(status, "resume it")),
            }
        })?;
        self.engine.flush().await?;
        if resumed {
            match self.engine.live(&self.id) {
                Some(live) => live.request_pause(false),
                None => self.engine.spawn_driver(&self.id),
            }
        }
        Ok(())
    }

    /// Ends the instance now, without compensation. Returns once it is
    /// `Terminated`.
    pub async fn terminate(&self) -> Result<()> {
        self.end(false).await
    }

    /// Ends the instance after running the compensations of the steps it
    /// started, in reverse start order (as the workflow failing would).
    /// Returns once they ran and the instance is `Terminated`, or at once if
    /// its workflow is not registered here (they run when it is).
    pub async fn terminate_with_rollback(&self) -> Result<()> {
        self.end(true).await
    }

    async fn end(&self, rollback: bool) -> Result<()> {
        let operation = if rollback {
            "terminate it with rollback"
        } else {
            "terminate it"
        };
        if let Some(live) = self.engine.live(&self.id) {
            let status = self.status()?;
            if status.is_terminal() || status == Status::RollingBack {
                return Err(self.invalid(status, operation));
            }
            live.interrupt(Interrupt::Terminate { rollback });
            live.wait_stopped().await;
            // The driver may have stopped for a pause it saw first; then
            // ours was not acted on and the end is written below.
            if self.status()?.is_terminal() {
                return Ok(());
            }
        }
        // No driver runs it: write the end (or the start of the rollback)
        // here.
        self.engine.write(&self.id, |txn| {
            let now = txn.now();
            let record = txn.record()?;
            if record.status.is_terminal() || record.status == Status::RollingBack {
                return Err(self.invalid(record.status, operation));
            }
            if rollback {
                record.status = Status::RollingBack;
                record.rollback = Some(RollbackPlan {
                    cause: Failure::new(FailureKind::Workflow, "terminated by user"),
                    then: Status::Terminated,
                    failure: None,
                });
                txn.event(EventKind::RollbackStarted {
                    cause: "terminated by user".into(),
                });
            } else {
                record.status = Status::Terminated;
                record.finished_at = Some(now);
                txn.event(EventKind::InstanceTerminated);
            }
            Ok(())
        })?;
        self.engine.flush().await?;
        if rollback {
            self.engine.spawn_driver(&self.id);
            if let Some(live) = self.engine.live(&self.id) {
                live.wait_stopped().await;
            }
        }
        Ok(())
    }

    /// Runs the instance again from the beginning with the same input and
    /// a new history.
    pub async fn restart(&self) -> Result<()> {
        self.restart_at(None).await
    }

    /// Runs the instance again from the first call of step `step`: history
    /// before it is kept (those steps are not run again), the rest is
    /// discarded. Events its discarded waits took are delivered again.
    pub async fn restart_from(&self, step: &str) -> Result<()> {
        self.restart_at(Some(step)).await
    }

    async fn restart_at(&self, step: Option<&str>) -> Result<()> {
        self.engine.record(&self.id)?;
        if let Some(live) = self.engine.live(&self.id) {
            live.interrupt(Interrupt::Stop);
            live.wait_stopped().await;
        }
        let slots = self.engine.store.slots(&self.id)?;
        let (first_slot, first_seq) = match step {
            None => (0, 1),
            Some(step) => slots
                .iter()
                .find(|(_, s)| s.kind == SlotKind::Step && s.name == step)
                .map(|(i, s)| (*i, s.history_seq))
                .ok_or_else(|| Error::UnknownStep {
                    id: self.id.clone(),
                    step: step.to_owned(),
                })?,
        };
        let mut requeue = Vec::new();
        for (_, slot) in slots.iter().filter(|(i, _)| *i >= first_slot) {
            if let SlotState::Received {
                event_type,
                payload,
            } = &slot.state
            {
                requeue.push((
                    self.engine.store.unique_id()?,
                    event_type.clone(),
                    payload.clone(),
                ));
            }
        }
        self.engine.write(&self.id, |txn| {
            for (i, _) in slots.iter().filter(|(i, _)| *i >= first_slot) {
                txn.put(Op::DeleteSlot(self.id.clone(), *i));
            }
            for (i, _) in self.engine.store.rollbacks(&self.id)? {
                txn.put(Op::DeleteRollback(self.id.clone(), i));
            }
            for (seq, event_type, payload) in requeue {
                txn.put(Op::PutPendingEvent(
                    self.id.clone(),
                    seq,
                    crate::record::PendingEvent {
                        event_type,
                        payload,
                        sent_at: txn.now(),
                    },
                ));
            }
            txn.truncate_history(first_seq)?;
            let record = txn.record()?;
            record.status = Status::Queued;
            record.finished_at = None;
            record.output = None;
            record.failure = None;
            record.rollback = None;
            txn.event(EventKind::InstanceRestarted {
                from_step: step.map(str::to_owned),
            });
            Ok(())
        })?;
        self.engine.flush().await?;
        self.engine.spawn_driver(&self.id);
        Ok(())
    }

    fn invalid(&self, status: Status, operation: &'static str) -> Error {
        Error::InvalidState {
            id: self.id.clone(),
            status,
            operation,
        }
    }
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance").field("id", &self.id).finish()
    }
}

/// The handle `Engine::start` returns: an [`Instance`] whose `result()`
/// knows the output type.
pub struct Run<O> {
    instance: Instance,
    output: PhantomData<fn() -> O>,
}

impl<O: DeserializeOwned> Run<O> {
    pub(crate) fn new(instance: Instance) -> Self {
        Run {
            instance,
            output: PhantomData,
        }
    }

    /// Waits for the instance to finish; see [`Instance::result`].
    pub async fn result(&self) -> Result<O> {
        self.instance.result::<O>().await
    }

    /// The untyped handle.
    pub fn instance(&self) -> &Instance {
        &self.instance
    }
}

impl<O> Deref for Run<O> {
    type Target = Instance;

    fn deref(&self) -> &Instance {
        &self.instance
    }
}

impl<O> Clone for Run<O> {
    fn clone(&self) -> Self {
        Run {
            instance: self.instance.clone(),
            output: PhantomData,
        }
    }
}

impl<O> std::fmt::Debug for Run<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.instance.fmt(f)
    }
}
