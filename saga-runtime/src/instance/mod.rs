//! Handles on instances: status, result, history, and control.
//!
//! Also here: what a caller does to one instance: events (`send`), the
//! inbox of commands posted from other processes and their answers
//! (`post`, `inbox`), and its inspection (`inspect`). Every call goes
//! through [`Instance::command`], with the one `Command` type.

mod control;
pub(crate) mod filter;
pub(crate) mod inbox;
pub(crate) mod inspect;
pub(crate) mod kin;
pub(crate) mod post;
pub(crate) mod published;
pub(crate) mod send;
pub(crate) mod update;

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::failure::{Failure, FailureKind};
use crate::error::{Error, Result};
use crate::journal::command::Command;
use crate::journal::{Facts, InstanceState, Summary};
use crate::model::history::Event;
use crate::model::status::Status;
use crate::names::id::InstanceId;
use crate::run::runner::Runner;
use crate::time::clock::from_millis;

/// A handle on one instance. Cheap to clone.
#[derive(Clone)]
pub struct Instance {
    runner: Arc<Runner>,
    id: InstanceId,
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
    /// Its tags, given at start or by `ctx.tag`.
    pub tags: BTreeMap<String, String>,
    /// The instance that started it (child workflows).
    pub parent: Option<String>,
    /// Whether a compensation of it failed at least once.
    pub failed_compensation: bool,
    /// Who drives it while it is not finished: on PostgreSQL the worker
    /// that owns it, on sled this process. `None` too for one that waits
    /// in its queue on PostgreSQL: no worker has taken it yet.
    pub owner: Option<Owner>,
    /// The queue it was started on (`Engine::start_on`); `status` is
    /// `Queued` while it waits there for a slot.
    pub queue: Option<String>,
}

/// The worker that drives an unfinished instance, and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Owner {
    /// The worker's name (on PostgreSQL, as `workers.name`; on sled,
    /// `this process (pid N)`).
    pub worker: String,
    /// Since when it owns the instance (on sled: since this process
    /// opened its first engine).
    pub since: SystemTime,
}

impl InstanceInfo {
    pub(crate) fn from_summary(
        runner: &Runner,
        id: &str,
        summary: Summary,
        facts: Facts,
        owner: Option<(String, SystemTime)>,
    ) -> Self {
        let owner = if summary.status.is_terminal() {
            None
        } else {
            owner
                .or_else(|| runner.core.journal.local_owner())
                .map(|(worker, since)| Owner { worker, since })
        };
        InstanceInfo {
            queue: facts.queue.map(|spot| spot.queue),
            tags: facts.tags.into_iter().collect(),
            parent: facts.parent,
            failed_compensation: facts.failed_compensation,
            owner,
            id: id.to_owned(),
            workflow_registered: runner.is_registered(&summary.workflow),
            workflow: summary.workflow,
            status: summary.status,
            created_at: from_millis(summary.created_at),
            updated_at: from_millis(summary.updated_at),
            finished_at: summary.finished_at.map(from_millis),
            failure: summary.failure,
            rollback_failure: summary.rollback_failure,
        }
    }
}

impl Instance {
    /// A handle on instance `id`, checked by the caller (or stored).
    pub(crate) fn new(runner: Arc<Runner>, id: impl AsRef<str>) -> Self {
        let id = InstanceId::stored(id.as_ref());
        Instance { runner, id }
    }

    pub(crate) fn journal(&self) -> &crate::journal::Journal {
        &self.runner.core.journal
    }

    /// The instance id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where the instance is.
    ///
    /// # Cancel safety
    ///
    /// a read; dropping the future changes nothing.
    pub async fn status(&self) -> Result<Status> {
        self.journal().read_durable(&self.id, |s| s.status).await
    }

    /// When the instance's earliest pending sleep wakes, or its earliest
    /// pending event wait times out, on the engine's clock; `None` when it
    /// sleeps and waits for nothing. In a test,
    /// `clock.advance_to(run.next_wake().await?.unwrap())` moves a
    /// [`TestClock`](crate::testing::TestClock) to this instance's next wake, and no
    /// further, whatever else sleeps.
    ///
    /// # Cancel safety
    ///
    /// A read; dropping the future changes nothing.
    pub async fn next_wake(&self) -> Result<Option<std::time::SystemTime>> {
        use crate::journal::SlotState;
        let at = self
            .journal()
            .read_durable(&self.id, |s| {
                s.slots
                    .values()
                    .filter_map(|slot| match &slot.state {
                        SlotState::Sleeping { wake_at } => Some(*wake_at),
                        SlotState::Waiting { deadline, .. } => Some(*deadline),
                        _ => None,
                    })
                    .min()
            })
            .await?;
        Ok(at.map(crate::time::clock::from_millis))
    }

    /// Status, timestamps, failure and rollback failure.
    ///
    /// # Cancel safety
    ///
    /// A read; dropping the future changes nothing.
    pub async fn info(&self) -> Result<InstanceInfo> {
        let (summary, facts) = self
            .journal()
            .read_durable(&self.id, |s| (Summary::of(s, 0), Facts::of(s)))
            .await?;
        let owner = self.journal().owner_of(&self.id).await?;
        Ok(InstanceInfo::from_summary(
            &self.runner,
            &self.id,
            summary,
            facts,
            owner,
        ))
    }

    /// Every event of the instance, in order: of its current run, when it
    /// continued as new (`ctx.continue_as_new`; its first event then says
    /// which run, and [`Instance::history_of_run`] reads the earlier ones).
    ///
    /// # Cancel safety
    ///
    /// A read; dropping the future changes nothing.
    pub async fn history(&self) -> Result<Vec<Event>> {
        self.journal().history(&self.id).await
    }

    /// The events of run `run` of an instance that continued as new (run
    /// 0 is the first; [`Inspection::run`](crate::inspect::Inspection::run)
    /// is the current one), kept until retention removes it. An earlier
    /// run ends with its hand-over, [`EventKind::ContinuedAsNew`](crate::inspect::EventKind::ContinuedAsNew).
    /// [`Error::InvalidArgument`] for a run the instance does not keep.
    ///
    /// # Cancel safety
    ///
    /// A read; dropping the future changes nothing.
    pub async fn history_of_run(&self, run: u32) -> Result<Vec<Event>> {
        self.journal().history_of_run(&self.id, Some(run)).await
    }

    /// Waits for the instance to finish: its output when it completed,
    /// [`Error::WorkflowFailed`], [`Error::Terminated`] or
    /// [`Error::Compensated`] otherwise.
    ///
    /// # Cancel safety
    ///
    /// dropping the future changes nothing: the instance runs on.
    pub async fn result<O: DeserializeOwned>(&self) -> Result<O> {
        let mut ended = self.journal().subscribe_ends();
        let mut told = self.journal().changes(crate::store::Told::Stops);
        loop {
            ended.borrow_and_update();
            // Only the outcome is read, not a copy of the whole state: this
            // runs again whenever any instance ends.
            let (outcome, workflow) = self
                .journal()
                .read_durable(&self.id, |state| {
                    (self.outcome::<O>(state), state.workflow.clone())
                })
                .await?;
            if let Some(outcome) = outcome {
                return outcome;
            }
            if self.runner.core.is_closed() {
                return Err(Error::Closed);
            }
            if let Some(error) = self.runner.store_failure(&self.id) {
                return Err(Error::Store(format!(
                    "instance {:?} stopped on a store failure ({error}); it resumes when the store is opened again",
                    self.id
                )));
            }
            if !self.journal().owns(&self.id) {
                // Another worker drives it (or none yet, on a store shared
                // by workers): its end is not told here, so look again.
                tokio::select! {
                    // The end first: an engine that closed answers Closed before it looks again.
                    // Biased: a simulated run picks the same on every replay of its seed.
                    biased;
                    changed = ended.changed() => if changed.is_err() {
                        return Err(Error::Closed);
                    },
                    Some(()) = crate::journal::told_of_change(&mut told) => {}
                    () = tokio::time::sleep(self.runner.core.poll) => {}
                }
                continue;
            }
            if !self.runner.is_registered(&workflow) {
                return Err(Error::WorkflowNotRegistered {
                    id: self.id.to_string(),
                    workflow,
                });
            }
            if ended.changed().await.is_err() {
                return Err(Error::Closed);
            }
        }
    }

    /// What `result()` answers for an instance that finished; `None` while
    /// it has not.
    fn outcome<O: DeserializeOwned>(&self, state: &InstanceState) -> Option<Result<O>> {
        let rollback_failure = || {
            state
                .rollback
                .as_ref()
                .and_then(|p| p.failure.clone())
                .map(Box::new)
        };
        match state.status {
            Status::Complete => {
                let what = || format!("output of instance {:?}", self.id);
                if let Some(key) = state.output.as_ref().and_then(|o| o.sealed_key()) {
                    return Some(Err(crate::seal::missing_key(what(), key)));
                }
                let decoded = match &state.output {
                    Some(output) => output.decode::<O>(),
                    None => Err("no output was stored".to_owned()),
                };
                Some(decoded.map_err(|detail| Error::Decode {
                    what: what(),
                    type_name: std::any::type_name::<O>(),
                    detail,
                }))
            }
            Status::Errored => Some(Err(Error::WorkflowFailed {
                id: self.id.to_string(),
                failure: Box::new(state.failure.clone().unwrap_or_else(|| {
                    Failure::new(FailureKind::Workflow, "failed without a recorded error")
                })),
                rollback_failure: rollback_failure(),
            })),
            Status::Terminated => Some(Err(Error::Terminated {
                id: self.id.to_string(),
                rollback_failure: rollback_failure(),
            })),
            Status::Compensated => Some(Err(Error::Compensated {
                id: self.id.to_string(),
                rollback_failure: rollback_failure(),
            })),
            // Parked until a decision: waiting would wait for a person.
            Status::Blocked => Some(Err(Error::Blocked {
                id: self.id.to_string(),
                failure: Box::new(state.failure.clone().unwrap_or_else(|| {
                    Failure::new(FailureKind::Workflow, "blocked without a recorded error")
                })),
            })),
            _ => None,
        }
    }

    /// Pauses the instance: it stops at its next step boundary (a step,
    /// sleep or wait it has not started yet) with status `Paused`.
    ///
    /// # Cancel safety
    ///
    /// the pause is recorded and the driver told at the first poll; dropping the future after
    /// that only gives up waiting for durability.
    pub async fn pause(&self) -> Result<()> {
        self.command(Command::Pause).await.map(drop)
    }

    /// Resumes a paused instance.
    ///
    /// # Cancel safety
    ///
    /// the instance is resumed at the first poll; dropping the future after that only gives up
    /// waiting for durability.
    pub async fn resume(&self) -> Result<()> {
        self.command(Command::Resume).await.map(drop)
    }

    /// Ends the instance now, without compensation. Returns once it is
    /// `Terminated`.
    ///
    /// # Cancel safety
    ///
    /// the work runs in a task of the engine's, started at the first poll; dropping the future
    /// leaves it to finish.
    pub async fn terminate(&self) -> Result<()> {
        self.command(Command::Terminate { rollback: false })
            .await
            .map(drop)
    }

    /// Ends the instance after running the compensations of the steps it
    /// started, in reverse start order (as the workflow failing would).
    /// Returns once they ran and the instance is `Terminated`, or at once if
    /// its workflow is not registered here (they run when it is).
    ///
    /// # Cancel safety
    ///
    /// the work runs in a task of the engine's, started at the first poll; dropping the future
    /// leaves it to finish.
    pub async fn terminate_with_rollback(&self) -> Result<()> {
        self.command(Command::Terminate { rollback: true })
            .await
            .map(drop)
    }

    /// Runs again the compensations of an instance whose rollback gave up
    /// (it ended with a rollback failure beside its error): once the
    /// downstream is fixed, the compensations that did not complete run, in
    /// reverse start order, with the same keys. Returns once they ran.
    ///
    /// # Cancel safety
    ///
    /// The retry is recorded and its driver started before
    /// the first await; dropping the future leaves them running.
    pub async fn retry_rollback(&self) -> Result<()> {
        self.command(Command::RetryRollback).await.map(drop)
    }

    /// Runs the instance again from the beginning with the same input, as a
    /// new generation: its steps run again with new idempotency keys.
    ///
    /// # Cancel safety
    ///
    /// the work runs in a task of the engine's, started at the first poll; dropping the future
    /// leaves it to finish.
    pub async fn restart(&self) -> Result<()> {
        self.command(Command::Restart { from: None })
            .await
            .map(drop)
    }

    /// Runs the instance again from the first call of step `step`: the
    /// steps before it are kept (they are not run again), the rest run
    /// again as a new generation, with new idempotency keys. Events its
    /// discarded waits took are delivered again.
    ///
    /// # Cancel safety
    ///
    /// The work runs in a task of the engine's, started at the first poll; dropping the future leaves it to finish.
    pub async fn restart_from(&self, step: &str) -> Result<()> {
        let from = Some(step.to_owned());
        self.command(Command::Restart { from }).await.map(drop)
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

    /// The untyped handle, owned.
    pub fn into_instance(self) -> Instance {
        self.instance
    }
}

/// The calls of the untyped handle, on the typed one (see [`Instance`]).
impl<O> Run<O> {
    /// The instance id.
    pub fn id(&self) -> &str {
        self.instance.id()
    }

    /// See [`Instance::status`].
    pub async fn status(&self) -> Result<Status> {
        self.instance.status().await
    }

    /// See [`Instance::info`].
    pub async fn info(&self) -> Result<InstanceInfo> {
        self.instance.info().await
    }

    /// See [`Instance::next_wake`].
    pub async fn next_wake(&self) -> Result<Option<std::time::SystemTime>> {
        self.instance.next_wake().await
    }

    /// See [`Instance::history`].
    pub async fn history(&self) -> Result<Vec<Event>> {
        self.instance.history().await
    }

    /// See [`Instance::history_of_run`].
    pub async fn history_of_run(&self, run: u32) -> Result<Vec<Event>> {
        self.instance.history_of_run(run).await
    }

    /// See [`Instance::inspect`].
    pub async fn inspect(&self) -> Result<crate::instance::inspect::Inspection> {
        self.instance.inspect().await
    }

    /// See [`Instance::published`].
    pub async fn published<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        self.instance.published(name).await
    }

    /// See [`Instance::wait_for_published`].
    pub async fn wait_for_published<T: DeserializeOwned>(
        &self,
        name: &str,
        after: Option<u64>,
        timeout: std::time::Duration,
    ) -> Result<Option<crate::instance::published::Published<T>>> {
        self.instance.wait_for_published(name, after, timeout).await
    }

    /// See [`Instance::update`].
    pub async fn update<R: DeserializeOwned, Q: Serialize + ?Sized>(
        &self,
        name: &str,
        request: &Q,
    ) -> Result<R> {
        self.instance.update(name, request).await
    }

    /// See [`Instance::update_with_id`].
    pub async fn update_with_id<R: DeserializeOwned, Q: Serialize + ?Sized>(
        &self,
        name: &str,
        update_id: &str,
        request: &Q,
    ) -> Result<R> {
        self.instance.update_with_id(name, update_id, request).await
    }

    /// See [`Instance::pause`].
    pub async fn pause(&self) -> Result<()> {
        self.instance.pause().await
    }

    /// See [`Instance::resume`].
    pub async fn resume(&self) -> Result<()> {
        self.instance.resume().await
    }

    /// See [`Instance::terminate`].
    pub async fn terminate(&self) -> Result<()> {
        self.instance.terminate().await
    }

    /// See [`Instance::terminate_with_rollback`].
    pub async fn terminate_with_rollback(&self) -> Result<()> {
        self.instance.terminate_with_rollback().await
    }

    /// See [`Instance::retry_rollback`].
    pub async fn retry_rollback(&self) -> Result<()> {
        self.instance.retry_rollback().await
    }

    /// See [`Instance::restart`].
    pub async fn restart(&self) -> Result<()> {
        self.instance.restart().await
    }

    /// See [`Instance::restart_from`].
    pub async fn restart_from(&self, step: &str) -> Result<()> {
        self.instance.restart_from(step).await
    }
}

impl AsRef<Instance> for Instance {
    fn as_ref(&self) -> &Instance {
        self
    }
}

impl<O> AsRef<Instance> for Run<O> {
    fn as_ref(&self) -> &Instance {
        &self.instance
    }
}

impl<O> From<Run<O>> for Instance {
    fn from(run: Run<O>) -> Instance {
        run.instance
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
