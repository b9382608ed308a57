//! Who runs what: the registered workflows, and one driver task per
//! instance that runs here. Starts drivers (on start, resume, recovery)
//! and lets go of them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::journal::{InstanceState, SlotState};
use crate::lock::lock;
use crate::model::status::Status;
use crate::names::id::InstanceId;
use crate::panic::CatchUnwind;
use crate::run::alarms::Alarms;
use crate::run::driver::{self, Exit};
use crate::run::resident::{Residents, Timer};
use crate::time::clock::TestClock;
use crate::workflow::ErasedWorkflow;
use crate::workflow::context::Wake;
use crate::workflow::engine_core::Core;
use crate::workflow::live::Live;

pub(crate) struct Runner {
    pub(crate) core: Arc<Core>,
    registry: RwLock<BTreeMap<&'static str, Arc<dyn ErasedWorkflow>>>,
    /// What this process holds for each instance it runs: driver, timer,
    /// control lock, store failure; and the alarms of those that hibernate.
    residents: Residents,
    /// How long finished instances are kept.
    pub(crate) retention: Duration,
    /// Held by the retention sweep under way: one at a time.
    pub(crate) sweeping: tokio::sync::Mutex<()>,
    /// The store's directory (`None` for a temporary store).
    pub(crate) path: Option<PathBuf>,
    /// The queues declared, and (on a store of one process) who waits in
    /// them and who holds their slots: see `run::dequeue`.
    pub(crate) queues: crate::run::dispatch::Dispatch,
    /// The workflows registered whose instances are not resumed yet, and
    /// whether a task resumes them (see [`Runner::resume_registered`]).
    to_resume: std::sync::Mutex<ToResume>,
}

/// See [`Runner::to_resume`].
#[derive(Default)]
struct ToResume {
    workflows: Vec<&'static str>,
    resuming: bool,
}

/// How many instances the resume on register starts at once: it waits for
/// them to let go (hibernate, end) before the next, so a store of any size
/// leaves the runtime free for new work (a first `start` is answered at
/// once) while it resumes.
const RESUME_BATCH: usize = 64;

/// How long (real time) the resume waits for a batch to let go before it
/// starts the next anyway: instances that run long steps pace nothing.
const RESUME_BATCH_PATIENCE: Duration = Duration::from_millis(200);

impl Runner {
    pub(crate) fn new(
        core: Arc<Core>,
        retention: Duration,
        path: Option<PathBuf>,
        queues: crate::queue::Queues,
        test_clock: Option<TestClock>,
    ) -> Runner {
        let alarms = Alarms::new(core.clock.clone(), test_clock);
        // A timer index every writer kept: only the next alarms stay here.
        if core.journal.timers_kept() {
            alarms.bound(core.journal.store());
        }
        Runner {
            registry: RwLock::new(BTreeMap::new()),
            residents: Residents::new(alarms),
            retention,
            sweeping: tokio::sync::Mutex::new(()),
            path,
            queues: crate::run::dispatch::Dispatch::new(queues, core.journal.shared()),
            to_resume: std::sync::Mutex::default(),
            core,
        }
    }

    pub(crate) fn workflow(&self, name: &str) -> Option<Arc<dyn ErasedWorkflow>> {
        self.registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    pub(crate) fn is_registered(&self, name: &str) -> bool {
        self.workflow(name).is_some()
    }

    /// The names of the workflows registered here.
    pub(crate) fn workflow_names(&self) -> Vec<&'static str> {
        self.registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect()
    }

    /// Makes `workflow` runnable here, and resumes its unfinished instances;
    /// a no-op for a workflow registered already.
    pub(crate) fn register(self: &Arc<Self>, workflow: Arc<dyn ErasedWorkflow>) -> Result<()> {
        if let Some(name) = self.add(workflow, &[])? {
            self.resume_registered([name]);
        }
        Ok(())
    }

    /// Registers `workflows` together: a parent's children may come after
    /// it in the list, and no instance resumes before all are registered
    /// (a resumed parent would find its child's workflow missing).
    pub(crate) fn register_all(
        self: &Arc<Self>,
        workflows: Vec<Arc<dyn ErasedWorkflow>>,
    ) -> Result<()> {
        let names: Vec<&'static str> = workflows.iter().map(|w| w.workflow_name()).collect();
        let mut added = Vec::new();
        for workflow in workflows {
            added.extend(self.add(workflow, &names)?);
        }
        self.resume_registered(added);
        Ok(())
    }

    /// Checks `workflow` and adds it to the registry, where the workflows
    /// named `coming` are about to be registered too; its name when it was
    /// not registered before (its instances are then to be resumed).
    fn add(
        self: &Arc<Self>,
        workflow: Arc<dyn ErasedWorkflow>,
        coming: &[&'static str],
    ) -> Result<Option<&'static str>> {
        let name = workflow.workflow_name();
        if let Some(need) = workflow.children_needed().into_iter().find(|need| {
            need.workflow != name
                && !coming.contains(&need.workflow)
                && !self.is_registered(need.workflow)
        }) {
            return Err(Error::ChildNotRegistered {
                workflow: name.to_owned(),
                call: need.call.to_owned(),
                child: need.workflow.to_owned(),
            });
        }
        if let Some(need) = workflow
            .services_needed()
            .into_iter()
            .find(|need| !self.core.services.contains(need))
        {
            return Err(Error::MissingService {
                workflow: name.to_owned(),
                service: (need.type_name)().to_owned(),
            });
        }
        {
            let mut registry = self.registry.write().unwrap_or_else(|p| p.into_inner());
            if let Some(existing) = registry.get(name) {
                if existing.workflow_type() != workflow.workflow_type() {
                    return Err(Error::WorkflowNameTaken {
                        name: name.to_owned(),
                    });
                }
                // Registered (and its instances resumed) already.
                return Ok(None);
            }
            registry.insert(name, workflow);
        }
        Ok(Some(name))
    }

    /// Recovery: every unfinished instance of the `workflows` just
    /// registered gets a driver, in the background. Workflows registered
    /// while a resume is under way join it: the instances that can run are
    /// read once for all the workflows registered together, not once per
    /// workflow, and never the ended ones (`Store::active_entries`).
    fn resume_registered(self: &Arc<Self>, workflows: impl IntoIterator<Item = &'static str>) {
        // An engine that only reads drives nothing: on a shared store it
        // owns no instance, and on sled it was opened to check.
        if self.core.journal.read_only() {
            return;
        }
        {
            let mut to_resume = lock(&self.to_resume);
            to_resume.workflows.extend(workflows);
            if to_resume.resuming || to_resume.workflows.is_empty() {
                return;
            }
            to_resume.resuming = true;
        }
        let runner = self.clone();
        let task = self.core.spawn(async move {
            loop {
                let workflows = {
                    let mut to_resume = lock(&runner.to_resume);
                    if to_resume.workflows.is_empty() || runner.core.is_closed() {
                        to_resume.resuming = false;
                        return;
                    }
                    std::mem::take(&mut to_resume.workflows)
                };
                runner.resume_instances_of(&workflows).await;
            }
        });
        self.core.track(task);
    }

    /// Starts a driver for every unfinished instance of `workflows`, a
    /// batch at a time ([`RESUME_BATCH`]). On a store whose timer index is
    /// kept, an instance that only waits for a time to come is not loaded:
    /// its alarm is set, and it loads when it is due (or an event or a
    /// control call comes). On one whose index a release before did not
    /// keep, every active instance's timer is filed again first, from its
    /// journal, and the index is trusted from then on.
    async fn resume_instances_of(self: &Arc<Self>, workflows: &[&'static str]) {
        let journal = &self.core.journal;
        let kept = journal.timers_kept();
        let now = journal.now_millis();
        let listed = if kept {
            journal.active_summaries_by(now).await
        } else {
            journal
                .active_summaries()
                .await
                .map(|all| (all, Vec::new()))
        };
        let (summaries, asleep) = match listed {
            Ok(listed) => listed,
            Err(e) => {
                tracing::error!(error = %e, "could not list instances to resume");
                return;
            }
        };
        if !kept && !journal.shared() && !self.core.is_closed() {
            for (id, _) in &summaries {
                journal.refresh_index(id).await;
            }
            match journal.timers_rebuilt() {
                Ok(()) if journal.timers_kept() => self.residents.alarms.bound(journal.store()),
                Ok(()) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "could not note the timer index as rebuilt; sleeping instances stay in memory");
                }
            }
        }
        // Loaded when they are due, not now; their entries were not read,
        // so whatever their workflow: an alarm that rings for one not
        // registered here finds no workflow to drive it, and the next
        // registration resumes it.
        for (id, at, deadline) in asleep {
            self.set_alarm(&id, at, deadline);
        }
        let mut ids = Vec::new();
        for (id, summary) in summaries {
            match summary {
                Ok(s) if workflows.contains(&s.workflow.as_str()) && s.status.resumes_on_open() => {
                    ids.push(id);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(instance = %id, error = %e, "not resuming an instance whose index entry is corrupt");
                }
            }
        }
        for batch in ids.chunks(RESUME_BATCH) {
            if self.core.is_closed() {
                return;
            }
            let drivers: Vec<Arc<Live>> = batch
                .iter()
                .filter_map(|id| {
                    self.spawn_driver(id);
                    self.live(id)
                })
                .collect();
            let settled = async {
                for live in drivers {
                    live.wait_stopped().await;
                }
            };
            let _ = tokio::time::timeout(RESUME_BATCH_PATIENCE, settled).await;
        }
    }

    /// Tells the driver of `id` here, if one runs it, that an event came
    /// (`false` when none does). Told under the lock that a driver lets go
    /// under: a driver letting go either was told, and looks again, or is
    /// gone, and the caller wakes the instance itself.
    pub(crate) fn tell_event(&self, id: &str) -> bool {
        self.residents
            .read(id, |resident| {
                resident.driver.as_ref().map(|driver| driver.tell_event())
            })
            .flatten()
            .is_some()
    }

    /// Tells the driver of `id` here, if one runs it, that a child of it
    /// ended (`false` when none does); see [`Runner::tell_event`].
    pub(crate) fn tell_child(&self, id: &str) -> bool {
        self.residents
            .read(id, |resident| {
                resident.driver.as_ref().map(|driver| driver.tell_child())
            })
            .flatten()
            .is_some()
    }

    /// The driver of `id` here, if one runs it.
    pub(crate) fn live(&self, id: &str) -> Option<Arc<Live>> {
        self.residents.driver(id)
    }

    /// The store failure that stopped the last driver of `id` here, if no
    /// driver ran it since.
    pub(crate) fn store_failure(&self, id: &str) -> Option<String> {
        self.residents
            .read(id, |r| r.store_failure.clone())
            .flatten()
    }

    /// Runs the instance unless a driver already does (or its workflow is
    /// not registered here).
    pub(crate) fn spawn_driver(self: &Arc<Self>, id: &str) {
        self.start_driver(id, false);
    }

    /// Like [`Runner::spawn_driver`]; `waking` when the instance
    /// hibernated here and its timer or an event wakes it.
    fn start_driver(self: &Arc<Self>, id: &str, waking: bool) {
        // A draining engine starts nothing: the instance runs on the next open.
        // An engine that only reads drives nothing, and a worker drives only
        // the instances it owns (on a store shared by workers).
        if self.core.is_closed() || self.core.is_draining() || !self.core.journal.owns(id) {
            return;
        }
        let started = self.residents.with(id, |resident| {
            // A hibernating instance is woken by whatever comes first.
            let waking = resident.stop_timer() || waking;
            if resident.driver.is_some() {
                return None;
            }
            let live = Arc::new(Live::new());
            resident.driver = Some(live.clone());
            crate::metrics::drivers(1.0);
            // A new driver: an earlier store failure is history.
            resident.store_failure = None;
            Some((live, waking))
        });
        let Some((live, waking)) = started else {
            return;
        };
        // Its alarm, if it slept, and its count with a test clock go.
        let waking = self.residents.alarms.forget(id) || waking;
        // Kept from here, so the state loaded to find the workflow is the
        // one the driver runs on; `release` undoes it all if none runs.
        self.core.journal.keep(id, true);
        let release = Release {
            runner: self.clone(),
            id: InstanceId::stored(id),
            live: live.clone(),
        };
        let (key, ours) = (release.id.clone(), live.clone());
        let runner = self.clone();
        let id = release.id.clone();
        let task = self.core.spawn(async move {
            let read = runner
                .core
                .journal
                .read(&id, |s| {
                    (s.workflow.clone(), s.queue.clone(), s.status, s.slot_released)
                })
                .await;
            let (workflow, spot, status, released) = match read {
                Ok((name, spot, status, released)) => {
                    (runner.workflow(&name), spot, status, released)
                }
                Err(e) => {
                    tracing::error!(instance = %id, error = %e, "cannot run an instance whose journal does not read");
                    return;
                }
            };
            let Some(workflow) = workflow else { return };
            // An instance on a queue runs only once it holds a slot: one
            // that waits is the dispatcher's to take.
            let releases = spot
                .as_ref()
                .is_some_and(|spot| runner.queues.releases_while_waiting(&spot.queue));
            if let Some(spot) = spot
                && !runner.queues.admits(&id, &spot, status, released)
            {
                // The dispatcher may take it while this task still holds
                // its driver's place, and its start then finds one: look
                // again once the place is free.
                drop(release);
                let taken = runner
                    .core
                    .journal
                    .read(&id, |s| s.queue.as_ref().is_some_and(|q| q.taken))
                    .await;
                if taken.unwrap_or(false) {
                    runner.spawn_driver(&id);
                }
                return;
            }
            // Lets go of the instance however the driver ends: done, a
            // panic, or aborted by shutdown (then `Drop` runs it).
            let exit =
                CatchUnwind::new(driver::drive(&runner.core, workflow, &id, &live, waking, releases))
                    .await;
            // Its timer is set while the driver still holds the instance
            // (and its state): a control call that waits for the driver to
            // stop finds the timer, to stop it too.
            let wake_now = match exit {
                Ok(Exit::Hibernated(wake)) => runner.hibernate(&id, wake),
                _ => false,
            };
            if let Err(panic) = &exit {
                let error = crate::Error::Store(format!(
                    "the engine's driver of this instance panicked ({panic}); it resumes when the store is opened again"
                ));
                tracing::error!(instance = %id, error = %error, "instance driver panicked");
                // Kept for `result()` as the driver lets go (`Release`).
                live.store_failed(&error);
            }
            drop(release);
            // Its slot may be free for another while it only waits.
            if releases && matches!(exit, Ok(Exit::Hibernated(_))) {
                runner.queues.poke();
            }
            match exit {
                Ok(Exit::Suspended) => runner.after_suspend(&id).await,
                Ok(Exit::Hibernated(_)) if wake_now => runner.start_driver(&id, true),
                // A child ended as the driver let go: its call looks again.
                Ok(Exit::Hibernated(_)) if live.was_told_of_child() => {
                    runner.start_driver(&id, true);
                }
                // An event sent while the driver still held the instance
                // told the driver, which no longer listened: look again,
                // now that a send finds no driver (and wakes it itself).
                Ok(Exit::Hibernated(_)) if live.was_told_of_events() => {
                    let came = runner.core.journal.read(&id, awaited_event_came).await;
                    if came.unwrap_or(true) {
                        runner.start_driver(&id, true);
                    }
                }
                Ok(Exit::Hibernated(_)) => {}
                Ok(Exit::Ended) => {
                    runner.queues.poke();
                    runner.tell_parent(&id).await;
                    runner.spawn_driver_if_runnable(&id).await;
                }
                Ok(Exit::Requeued) => runner.requeued(&id).await,
                Ok(Exit::Other) => {}
                // Its failure was noted as the driver let go (above).
                Err(_) => {}
            }
        });
        // Kept while the driver runs (`Release` drops it with the driver);
        // one that already let go has nothing to keep.
        self.residents.with(&key, |resident| {
            if resident
                .driver
                .as_ref()
                .is_some_and(|driver| Arc::ptr_eq(driver, &ours))
            {
                if self.core.is_closed() {
                    task.abort();
                }
                resident.task = Some(task);
            }
        });
    }

    /// Shutdown: stops every driver and hibernation timer here; answers
    /// their tasks to wait for.
    pub(crate) fn stop_residents(&self) -> Vec<tokio::task::JoinHandle<()>> {
        self.residents.stop_all()
    }

    /// Runs the instance if its status says it should run (queued, running,
    /// waiting or rolling back) and no driver does yet.
    pub(crate) async fn spawn_driver_if_runnable(self: &Arc<Self>, id: &str) {
        let status = self.core.journal.read(id, |s| s.status).await;
        if status.is_ok_and(Status::resumes_on_open) {
            self.spawn_driver(id);
        }
    }

    /// Like [`Runner::spawn_driver_if_runnable`], from code that must not
    /// wait (a send, a start): before it returns on a store that answers
    /// at once, in a task otherwise. An instance that waits with no driver
    /// here (it let go, or was never loaded) is woken only when an event
    /// it waits for came: its alarm wakes it otherwise, and an event it
    /// does not wait for (yet) costs no replay.
    pub(crate) fn spawn_driver_if_runnable_soon(self: &Arc<Self>, id: &str) {
        let (runner, id) = (self.clone(), id.to_owned());
        let spawn = async move {
            if runner.live(&id).is_none() {
                // The events before the newest were looked at when they
                // came, or by the driver as it let go (`hibernate`).
                let read = runner
                    .core
                    .journal
                    .read(&id, |s| (s.status, newest_event_awaited(s)))
                    .await;
                if let Ok((Status::Waiting, awaited)) = read {
                    if awaited {
                        runner.start_driver(&id, true);
                    }
                    return;
                }
            }
            runner.spawn_driver_if_runnable(&id).await
        };
        if let Some(task) = crate::store::now_or_spawn(&self.core.runtime, &self.core.quiet, spawn)
        {
            self.core.track(task);
        }
    }

    /// For a call dropped while the store may still be writing an instance
    /// it asked for (a start cut short): once the store has applied every
    /// write asked for so far, the instance gets a driver if it needs one,
    /// so it is never left without one.
    pub(crate) fn spawn_driver_once_written(self: &Arc<Self>, id: &str) {
        let (runner, id) = (self.clone(), id.to_owned());
        let task = self.core.spawn(async move {
            if let Err(e) = runner.core.journal.flush().await {
                tracing::warn!(instance = %id, error = %e, "a start cut short could not wait for its instance's creation");
            }
            // A queued one is let go of, as its start would have, for the
            // worker that takes it (on a store shared by workers).
            if let Err(e) = runner.core.journal.disown_if_queued(&id).await {
                tracing::warn!(instance = %id, error = %e, "could not let go of a queued instance; it is taken once this worker stops");
            }
            runner.spawn_driver_if_runnable(&id).await;
        });
        self.core.track(task);
    }

    /// An instance whose wait was over while it held no slot of its queue
    /// waits in the queue again: noted for the dispatcher here (a store of
    /// one process), or let go of for any worker to take (a store shared
    /// by workers).
    async fn requeued(self: &Arc<Self>, id: &str) {
        if self.core.journal.shared() {
            if let Err(e) = self.core.journal.disown_if_queued(id).await {
                tracing::warn!(instance = %id, error = %e, "could not let go of an instance that waits in its queue again; it is taken once this worker stops");
            }
            self.queues.poke();
        } else {
            // Not admitted: noted as waiting, and the dispatcher poked.
            self.spawn_driver(id);
        }
    }

    /// The driver let go of an instance that only waits: a timer wakes it
    /// at `wake_at`, an event or a control call sooner. An event that came
    /// while the driver let go finds no driver to tell, so it is looked for
    /// here.
    ///
    /// Called while the driver still holds the instance, whose state is in
    /// memory; answers whether to wake it at once instead (an awaited
    /// event came), once the driver let go.
    fn hibernate(self: &Arc<Self>, id: &str, wake: Wake) -> bool {
        let wake_at = wake.at;
        let awaited_event_came = self.core.journal.read_kept(id, awaited_event_came);
        if awaited_event_came.unwrap_or(true) {
            return true;
        }
        // What it wrote settles: its mark that its entry may lag goes once
        // durable (`Journal::note_waiting`).
        self.core.journal.note_waiting(id);
        // Only a child's end wakes it (`tell_child_ended`): no timer, but
        // on a store shared by workers a look at its children now and then.
        if wake_at == crate::workflow::child::NEVER {
            if self.core.journal.shared() {
                self.watch_children(id);
            }
            return false;
        }
        self.residents.with(id, |resident| resident.stop_timer());
        if !self.core.is_closed() {
            self.set_alarm(id, wake_at, wake.deadline);
        }
        // An end written meanwhile by a call that found no timer to stop
        // (it looked before this one was set): stopped here instead. Read
        // after the set, so one of the two sees the other.
        let ended = self.core.journal.read_kept(id, |s| s.status.is_terminal());
        if ended.unwrap_or(false) {
            self.forget_timer(id);
        }
        false
    }

    /// Sets the alarm of `id`, which only waits, at `at` (`deadline`: an
    /// event wait's deadline): kept in memory only if it is among the next
    /// due (`run::alarms`).
    pub(crate) fn set_alarm(self: &Arc<Self>, id: &str, at: u64, deadline: bool) {
        let ring = || {
            let runner = Arc::downgrade(self);
            move |id: InstanceId, at: u64| match runner.upgrade() {
                Some(runner) => {
                    runner.ring(id, at);
                    true
                }
                None => false,
            }
        };
        self.residents.alarms.set(
            &InstanceId::stored(id),
            at,
            deadline,
            &self.core.runtime,
            &self.core.quiet,
            ring,
        );
    }

    /// The alarm of `id` at `at` rang: wakes it if it is due by then (it
    /// may have woken, slept again or ended since, or the alarm came from
    /// a stale timer of the store's: then nothing happens).
    fn ring(self: &Arc<Self>, id: InstanceId, at: u64) {
        let runner = self.clone();
        let wake = async move {
            // Due at once, it may ring before the driver that set it let
            // go: wait for that, without holding up the other alarms.
            if let Some(live) = runner.live(&id) {
                live.wait_stopped().await;
            }
            let now = runner.core.journal.now_millis().max(at);
            let due = runner
                .core
                .journal
                .read(&id, |s| match s.status {
                    // A paused one wakes too: its sleep ends, and the pause
                    // holds it after.
                    Status::Waiting | Status::Paused => {
                        crate::journal::waits_until(s).is_some_and(|(wake, _)| wake <= now)
                    }
                    status => status.resumes_on_open(),
                })
                .await;
            if due.unwrap_or(false) {
                runner.start_driver(&id, true);
            }
        };
        if let Some(task) = crate::store::now_or_spawn(&self.core.runtime, &self.core.quiet, wake) {
            self.core.track(task);
        }
    }

    /// For a parent that hibernates waiting for its children on a store
    /// shared by workers: looks at them every
    /// [`RECHECK_SHARED`](crate::workflow::child::RECHECK_SHARED) and wakes
    /// the parent when one ended, in case the worker that ended it died
    /// before it told the parent.
    fn watch_children(self: &Arc<Self>, id: &str) {
        let children: Vec<String> = self
            .core
            .journal
            .read_kept(id, |s| {
                s.slots
                    .values()
                    .filter_map(|slot| match &slot.state {
                        SlotState::ChildRunning { child, .. } => Some(child.clone()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let runner = Arc::downgrade(self);
        let owned = id.to_owned();
        let task = self.core.spawn(async move {
            loop {
                tokio::time::sleep(crate::workflow::child::RECHECK_SHARED).await;
                let Some(runner) = runner.upgrade() else {
                    return;
                };
                for child in &children {
                    let ended = runner
                        .core
                        .journal
                        .read_durable(child, |s| s.status.is_terminal())
                        .await;
                    if ended.unwrap_or(false) {
                        if let Some(live) = runner.live(&owned) {
                            live.wait_stopped().await;
                        }
                        runner.start_driver(&owned, true);
                        return;
                    }
                }
            }
        });
        self.residents.with(id, |resident| {
            resident.stop_timer();
            if self.core.is_closed() {
                task.abort();
            }
            resident.timer = Some(Timer::Task(task));
        });
    }

    /// Waits for the control calls of instance `id` before this one to
    /// finish; holds off those after it until the guard drops.
    pub(crate) async fn control(self: &Arc<Self>, id: &str) -> ControlGuard {
        let lock = self.residents.with(id, |resident| {
            resident.control.get_or_insert_default().clone()
        });
        let held = lock.lock_owned().await;
        ControlGuard {
            runner: self.clone(),
            id: id.to_owned(),
            held: Some(held),
        }
    }

    /// Stops the timer of an instance that hibernates here (it was removed).
    pub(crate) fn forget_timer(&self, id: &str) {
        self.residents.with(id, |resident| resident.stop_timer());
        self.residents.alarms.forget(id);
    }

    /// Called after a driver let go of a paused instance: if a user resumed
    /// it in the meantime, run it again.
    async fn after_suspend(self: &Arc<Self>, id: &str) {
        let status = self.core.journal.read(id, |s| s.status).await;
        if matches!(status, Ok(Status::Running | Status::Queued)) {
            self.spawn_driver(id);
        }
    }
}

/// Held by a driver task: when it goes, the instance has no driver here.
struct Release {
    runner: Arc<Runner>,
    id: InstanceId,
    live: Arc<Live>,
}

impl Drop for Release {
    fn drop(&mut self) {
        // Let go of the state before the instance leaves `live`: a driver
        // started the moment it left keeps the state from then on.
        self.runner.core.journal.keep(&self.id, false);
        let store_failure = self.live.take_store_failure();
        let told = store_failure.is_some();
        self.runner.residents.with(&self.id, |resident| {
            if resident.driver.take().is_some() {
                crate::metrics::drivers(-1.0);
            }
            resident.task = None;
            resident.store_failure = store_failure;
        });
        self.live.mark_stopped();
        if told {
            // A `result()` waiting for it says why it stopped.
            self.runner.core.journal.notify_ended();
        }
    }
}

/// Held by a control call of one instance; see [`Runner::control`].
pub(crate) struct ControlGuard {
    runner: Arc<Runner>,
    id: String,
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for ControlGuard {
    fn drop(&mut self) {
        drop(self.held.take());
        // No lock is kept for an instance nobody controls.
        self.runner.residents.with(&self.id, |resident| {
            if resident
                .control
                .as_ref()
                .is_some_and(|l| Arc::strong_count(l) == 1)
            {
                resident.control = None;
            }
        });
    }
}

/// Whether an event that a wait of the instance waits for is pending.
fn awaited_event_came(state: &InstanceState) -> bool {
    state.pending.values().any(|e| awaits(state, &e.event_type))
}

/// Whether a wait of the instance waits for the event that came last,
/// without looking at every pending event (a send asks at each event).
fn newest_event_awaited(state: &InstanceState) -> bool {
    let newest = state.pending.values().next_back();
    newest.is_some_and(|e| awaits(state, &e.event_type))
}

/// Whether a wait of the instance waits for events of `event_type`.
fn awaits(state: &InstanceState, event_type: &str) -> bool {
    state.slots.values().any(|slot| {
        matches!(&slot.state, SlotState::Waiting { event_type: awaited, .. } if awaited == event_type)
    })
}
