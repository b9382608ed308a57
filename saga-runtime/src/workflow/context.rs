//! The handle workflow code gets: it hands out history slots in call order,
//! checks replay against what history recorded, and tracks the step tasks
//! and rollback handlers of one run of the workflow function.

use std::collections::HashMap;
use std::future::pending;
use std::sync::{Arc, Mutex};

use tokio::task::AbortHandle;
use tracing::Instrument;

use crate::error::Result;
use crate::error::failure::{Failure, FailureKind};
use crate::journal::{Change, InstanceState, SlotKind, SlotRecord, SlotState};
use crate::lock::lock;
use crate::names::id::InstanceId;
use crate::workflow::compensation::Registered;
use crate::workflow::engine_core::Core;
use crate::workflow::in_flight::InFlight;
use crate::workflow::live::{Interrupt, Live};

/// What workflow code uses to make durable calls: steps, sleeps, event
/// waits, and the recorded `now()`/`random()`.
///
/// Every durable call takes the next slot of the instance's history, in
/// call order. On replay (after a crash, or to rebuild rollback handlers)
/// the same calls get the same slots and return what history recorded, so
/// workflow code must be deterministic: the same calls, in the same order.
#[derive(Clone)]
pub struct WorkflowContext {
    pub(crate) run: Arc<Ctx>,
}

/// Whether this run of the workflow function goes forward, or only
/// rebuilds rollback handlers from history after a crash mid-rollback, or
/// only checks today's code against a recorded history (`run::replay`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Forward,
    Rebuild,
    /// Every call is answered from history and nothing is recorded; the
    /// first call history holds no answer for (never made, or not
    /// finished) ends the replay ([`RunScope::history_ended`]).
    Replay,
}

/// What step tasks and waits share with the driver. Holds no task handles,
/// so tasks may keep it without keeping themselves alive.
pub(crate) struct RunScope {
    pub(crate) core: Arc<Core>,
    pub(crate) id: InstanceId,
    pub(crate) workflow: Arc<str>,
    pub(crate) live: Arc<Live>,
    pub(crate) mode: Mode,
    /// The instance's generation (restarts so far) when this run began.
    pub(crate) generation: u32,
    /// The instance's run (continuations as new so far): its keys and
    /// its children's ids carry it.
    pub(crate) run: u32,
    /// The order its compensations run in, as its workflow says.
    pub(crate) rollback_order: crate::workflow::RollbackOrder,
    in_flight: Arc<InFlight>,
    /// The durable waits of this run that are asleep: slot → wake time.
    asleep: Asleep,
    /// In [`Mode::Replay`]: a call met a slot history holds no answer for.
    history_ended: std::sync::atomic::AtomicBool,
}

pub(crate) struct Ctx {
    pub(crate) scope: Arc<RunScope>,
    replay: Mutex<Replay>,
    /// The input `ctx.continue_as_new` asked the next run to begin with
    /// (see `continuation`), for the driver to hand over.
    continued: Mutex<Option<crate::codec::Payload>>,
    continue_asked: tokio::sync::Notify,
}

struct Replay {
    /// What history recorded, by slot index.
    recorded: HashMap<u32, SlotRecord>,
    next_slot: u32,
    occurrences: HashMap<(SlotKind, String), u32>,
    rollbacks: Vec<Registered>,
    tasks: Vec<AbortHandle>,
    /// Rebuilding the compensations of an instance whose code no longer
    /// replays by position (it was `Blocked`): each call finds its slot by
    /// kind, name and occurrence, wherever history has it.
    by_name: bool,
    /// The patches history says `ctx.patched` answered true for.
    patches: std::collections::BTreeSet<String>,
    /// How many times this run of the workflow function published each
    /// name (`ctx.publish`).
    published: HashMap<String, u32>,
}

/// A slot handed to a durable call.
pub(crate) struct Slot {
    pub(crate) index: u32,
    pub(crate) occurrence: u32,
    pub(crate) recorded: Option<SlotRecord>,
    /// The name history knows the call by: the one recorded (an old name
    /// declared with `renamed_from`), or the call's own.
    pub(crate) name: Arc<str>,
    /// The generation its keys carry.
    pub(crate) generation: u32,
}

/// A slot taken in call order and not yet checked against history; see
/// [`Ctx::reserve_slot`].
pub(crate) struct Reserved {
    kind: SlotKind,
    name: String,
    occurrence: u32,
    at: At,
    generation: u32,
}

enum At {
    /// The slot's index, and what history recorded there.
    Position(u32, Option<SlotRecord>),
    /// Rebuilding by name: the recorded slot of this call, found by name.
    ByName(Option<(u32, SlotRecord)>),
}

impl Reserved {
    /// The slot, checked against history: `None` when history recorded
    /// another call there (the instance is then failed with a
    /// non-determinism error and the call never completes).
    pub(crate) fn matching(self, scope: &RunScope, renamed_from: Option<&str>) -> Option<Slot> {
        let Reserved {
            kind,
            name,
            occurrence,
            at,
            generation,
        } = self;
        let same_name = |r: &SlotRecord| r.name == name || Some(r.name.as_str()) == renamed_from;
        let (index, recorded) = match at {
            At::ByName(found) => {
                // A call history never saw is one the instance never made: it
                // never completes, and the rebuild stops there.
                let (index, recorded) = found?;
                return Some(Slot {
                    index,
                    occurrence,
                    name: Arc::from(recorded.name.as_str()),
                    generation: recorded.generation,
                    recorded: Some(recorded),
                });
            }
            At::Position(index, recorded) => (index, recorded),
        };
        if let Some(r) = &recorded
            && (r.kind != kind || !same_name(r) || r.occurrence != occurrence)
        {
            let expected = describe(r.kind, &r.name, r.occurrence);
            let found = describe(kind, &name, occurrence);
            scope.fail(Failure::new(
                    FailureKind::NonDeterminism {
                        expected: expected.clone(),
                        found: found.clone(),
                    },
                    format!(
                        "non-determinism at history slot {index}: history recorded {expected}, the workflow code now calls {found}; \
                         the code changed under a running instance (keep old step names and order, or restart the instance)"
                    ),
                ));
            return None;
        }
        if scope.mode == Mode::Replay && !recorded.as_ref().is_some_and(|r| answers(&r.state)) {
            scope
                .history_ended
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        Some(Slot {
            index,
            occurrence,
            name: Arc::from(recorded.as_ref().map_or(name.as_str(), |r| r.name.as_str())),
            generation: recorded.as_ref().map_or(generation, |r| r.generation),
            recorded,
        })
    }
}

impl Ctx {
    /// A context for a run of the workflow function over `state`.
    pub(crate) fn new(
        core: Arc<Core>,
        id: InstanceId,
        live: Arc<Live>,
        mode: Mode,
        state: &InstanceState,
        rollback_order: crate::workflow::RollbackOrder,
    ) -> Arc<Ctx> {
        let recorded = state
            .slots
            .iter()
            .map(|(index, slot)| (*index, SlotRecord::clone(slot)));
        Arc::new(Ctx {
            scope: Arc::new(RunScope {
                core,
                id,
                workflow: Arc::from(state.workflow.as_str()),
                live,
                mode,
                generation: state.generation,
                run: state.run,
                rollback_order,
                in_flight: Arc::default(),
                asleep: Asleep::default(),
                history_ended: std::sync::atomic::AtomicBool::new(false),
            }),
            replay: Mutex::new(Replay {
                recorded: recorded.collect(),
                next_slot: 0,
                occurrences: HashMap::new(),
                rollbacks: Vec::new(),
                tasks: Vec::new(),
                by_name: mode == Mode::Rebuild
                    && state.rollback.as_ref().is_some_and(|plan| plan.by_name),
                patches: state.patches.clone(),
                published: HashMap::new(),
            }),
            continued: Mutex::new(None),
            continue_asked: tokio::sync::Notify::new(),
        })
    }

    /// `ctx.continue_as_new`: the driver stops this run and hands it over
    /// to the next, with `input` (the first call wins).
    pub(crate) fn ask_to_continue(&self, input: crate::codec::Payload) {
        lock(&self.continued).get_or_insert(input);
        self.continue_asked.notify_one();
    }

    /// Completes once the workflow code asked to continue as new; the
    /// input it asked for.
    pub(crate) async fn continue_asked(&self) -> crate::codec::Payload {
        loop {
            let asked = self.continue_asked.notified();
            if let Some(input) = lock(&self.continued).take() {
                return input;
            }
            asked.await;
        }
    }

    /// Takes the next slot for a call of `kind` named `name`. `None` when
    /// history recorded something else here (the instance is then failed
    /// with a non-determinism error and the call never completes).
    pub(crate) fn take_slot(&self, kind: SlotKind, name: &str) -> Option<Slot> {
        self.take_slot_renamed(kind, name, None)
    }

    /// Like [`Ctx::take_slot`], where history may know the call by its old
    /// name `renamed_from`.
    pub(crate) fn take_slot_renamed(
        &self,
        kind: SlotKind,
        name: &str,
        renamed_from: Option<&str>,
    ) -> Option<Slot> {
        self.reserve_slot(kind, name, renamed_from)?
            .matching(&self.scope, renamed_from)
    }

    /// Takes the next slot for a call of `kind` named `name` in call
    /// order, leaving the check against history to
    /// [`Reserved::matching`]: a call that learns its old name after it is
    /// made (`ctx.child(..).renamed_from(..)`) takes its slot when it is
    /// called and is checked when it first runs. `None` when the name is
    /// invalid (the instance is then failed). A rebuild by name (of a
    /// `Blocked` instance) finds the slot now, by `name` or `renamed_from`.
    pub(crate) fn reserve_slot(
        &self,
        kind: SlotKind,
        name: &str,
        renamed_from: Option<&str>,
    ) -> Option<Reserved> {
        if matches!(
            kind,
            SlotKind::Step | SlotKind::Sleep | SlotKind::Event | SlotKind::Child
        ) && let Err(problem) = crate::names::check_name(kind.value_name(), name)
        {
            self.scope
                .fail(Failure::new(FailureKind::Workflow, problem));
            return None;
        }
        let mut replay = lock(&self.replay);
        let counter = replay
            .occurrences
            .entry((kind, name.to_owned()))
            .or_default();
        let occurrence = *counter;
        *counter += 1;
        if replay.by_name {
            let same_name =
                |r: &SlotRecord| r.name == name || Some(r.name.as_str()) == renamed_from;
            let found = replay
                .recorded
                .iter()
                .find(|(_, r)| r.kind == kind && same_name(r) && r.occurrence == occurrence)
                .map(|(index, _)| *index);
            let found = found.and_then(|index| replay.recorded.remove(&index).map(|r| (index, r)));
            return Some(Reserved {
                kind,
                name: name.to_owned(),
                occurrence,
                at: At::ByName(found),
                generation: self.scope.generation,
            });
        }
        let index = replay.next_slot;
        replay.next_slot += 1;
        let recorded = replay.recorded.remove(&index);
        Some(Reserved {
            kind,
            name: name.to_owned(),
            occurrence,
            at: At::Position(index, recorded),
            generation: self.scope.generation,
        })
    }

    /// `ctx.patched(name)`: true when history recorded the patch, or when
    /// this run reaches the call with nothing recorded past it (the run
    /// then records it); false when history went past the call without
    /// it. Rebuilding from history (a rollback's replay) answers from the
    /// record alone. Takes no slot.
    pub(crate) fn patched(&self, name: &str) -> bool {
        if let Err(problem) = crate::names::check_name("patch", name) {
            self.scope
                .fail(Failure::new(FailureKind::Workflow, problem));
            return false;
        }
        let mut replay = lock(&self.replay);
        if replay.patches.contains(name) {
            return true;
        }
        if self.scope.mode == Mode::Rebuild || replay.by_name || !replay.recorded.is_empty() {
            return false;
        }
        replay.patches.insert(name.to_owned());
        drop(replay);
        // A replay answers as the live run would, and records nothing.
        if self.scope.mode == Mode::Replay {
            return true;
        }
        if let Err(e) = self.scope.append(Change::Patched {
            name: name.to_owned(),
        }) {
            self.scope.store_failed(e);
        }
        true
    }

    /// Counts a `ctx.publish` of `name`: how many this run of the
    /// workflow function made before it (its occurrence, from 0).
    pub(crate) fn count_publish(&self, name: &str) -> u32 {
        let mut replay = lock(&self.replay);
        let count = replay.published.entry(name.to_owned()).or_insert(0);
        *count += 1;
        *count - 1
    }

    pub(crate) fn register_rollback(&self, registered: Registered) {
        lock(&self.replay).rollbacks.push(registered);
    }

    pub(crate) fn take_rollbacks(&self) -> Vec<Registered> {
        std::mem::take(&mut lock(&self.replay).rollbacks)
    }

    pub(crate) fn registered_rollback_slots(&self) -> Vec<u32> {
        lock(&self.replay)
            .rollbacks
            .iter()
            .map(|r| r.index)
            .collect()
    }

    /// Spawns a step task that the context can stop.
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let guard = self.scope.in_flight.enter();
        // Counted engine-wide too, for a drain to wait on.
        let engine_guard = self.scope.core.steps_in_flight.enter();
        // The task's spans (`saga.step`) nest under the caller's
        // (`saga.workflow`), as the call does.
        let span = tracing::Span::current();
        let handle = self.scope.core.spawn(
            async move {
                let _guards = (guard, engine_guard);
                task.await;
            }
            .instrument(span),
        );
        let mut replay = lock(&self.replay);
        replay.tasks.retain(|t| !t.is_finished());
        replay.tasks.push(handle.abort_handle());
        drop(replay);
        self.scope.core.track(handle);
    }

    /// Completes when the run may have become idle: a wait went to sleep,
    /// or the last step task ended. Made before the run is polled, so
    /// nothing that happens during the poll is missed.
    pub(crate) fn parked(&self) -> impl std::future::Future<Output = ()> + '_ {
        let slept = self.scope.asleep.changed.notified();
        let idle = self.scope.in_flight.idle_notified();
        async move {
            tokio::select! {
                // Both mean the run may have parked.
                // Biased: a simulated run picks the same on every replay of its seed.
                biased;
                () = slept => {}
                () = idle => {}
            }
        }
    }

    /// When the run only waits (no step task in flight, every wait asleep
    /// on the clock or for an event) until at least `after` from now: the
    /// earliest wake time, for the driver to let go of the instance until
    /// then. It is rebuilt from its journal when it wakes, so a sleeping
    /// instance costs no driver, no future and no cached state.
    pub(crate) fn hibernation(&self, after: std::time::Duration) -> Option<Wake> {
        if !self.scope.in_flight.is_idle() {
            return None;
        }
        let wake = lock(&self.scope.asleep.waits).values().min().copied()?;
        let soon = crate::time::clock::add_millis(self.scope.core.now_millis(), after);
        (wake.at >= soon).then_some(wake)
    }

    /// Waits until every step task of this run finished on its own.
    pub(crate) async fn finish_tasks(&self) {
        lock(&self.replay).tasks.clear();
        self.scope.in_flight.wait_idle().await;
    }

    /// Stops every step task of this run and waits until they are gone, so
    /// nothing writes behind the driver's back.
    pub(crate) async fn stop_tasks(&self) {
        let tasks = std::mem::take(&mut lock(&self.replay).tasks);
        for task in &tasks {
            task.abort();
        }
        self.scope.in_flight.wait_idle().await;
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        for task in &lock(&self.replay).tasks {
            task.abort();
        }
    }
}

impl RunScope {
    /// In [`Mode::Replay`]: whether a call reached the end of what history
    /// recorded (a live run would go on from there with calls of its own).
    pub(crate) fn history_ended(&self) -> bool {
        self.history_ended.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Fails the instance from inside (non-determinism, decode or store
    /// failure): the driver stops the workflow and records `failure`.
    pub(crate) fn fail(&self, failure: Failure) {
        // A replay's divergence is its answer, not an instance's trouble.
        if self.mode == Mode::Replay {
            tracing::debug!(instance = %self.id, error = %failure, "replay diverged");
        } else {
            tracing::error!(instance = %self.id, error = %failure, "instance cannot go on");
        }
        self.live.interrupt(Interrupt::Fail(failure));
    }

    /// Reports a store failure of a durable call to the driver. The
    /// instance stops where it is without recording an end (the store is
    /// what failed, and an `Errored` written now would skip the
    /// compensations); it resumes by replay when the store opens again.
    pub(crate) fn store_failed(&self, error: crate::Error) {
        // Not the store: a control call ended the instance under this
        // driver, which only has to stop.
        if let crate::Error::InvalidState { status, .. } = &error
            && status.is_terminal()
        {
            self.live.interrupt(Interrupt::Stop);
            return;
        }
        tracing::error!(instance = %self.id, error = %error, "store failure: the instance stops and resumes when the store is opened again");
        self.live.store_failed(&error);
    }

    /// Reports a store failure and never completes: the driver stops the
    /// workflow.
    pub(crate) async fn stall<T>(&self, error: crate::Error) -> T {
        self.store_failed(error);
        pending().await
    }

    /// A wait of slot `slot` goes to sleep until `wake_at` (its start is
    /// durable); it is awake again when the guard drops.
    pub(crate) fn asleep_until(self: &Arc<Self>, slot: u32, wake_at: u64) -> AsleepGuard {
        self.asleep(
            slot,
            Wake {
                at: wake_at,
                deadline: false,
            },
        )
    }

    /// An event wait of slot `slot` waits, at most until `deadline` (its
    /// start is durable); see [`RunScope::asleep_until`].
    pub(crate) fn waiting_until(self: &Arc<Self>, slot: u32, deadline: u64) -> AsleepGuard {
        self.asleep(
            slot,
            Wake {
                at: deadline,
                deadline: true,
            },
        )
    }

    fn asleep(self: &Arc<Self>, slot: u32, wake: Wake) -> AsleepGuard {
        lock(&self.asleep.waits).insert(slot, wake);
        self.asleep.changed.notify_waiters();
        AsleepGuard {
            scope: self.clone(),
            slot,
        }
    }

    /// Appends `change` to the instance's journal.
    pub(crate) fn append(&self, change: Change) -> Result<()> {
        self.core.journal.append_kept(&self.id, change)
    }

    /// Appends the change `f` decides on; see `Journal::write`.
    pub(crate) fn write<R>(
        &self,
        f: impl FnOnce(&InstanceState) -> Result<(Option<Change>, R)>,
    ) -> Result<R> {
        self.core.journal.write_kept(&self.id, f)
    }

    /// Appends `change` and waits until it is durable; a store failure
    /// stops the instance (and this never completes).
    pub(crate) async fn record(&self, change: Change) {
        let written = match self.append(change) {
            Ok(()) => self.core.journal.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            self.stall::<()>(e).await;
        }
    }

    /// Whether the instance gave its queue's slot back while it waits.
    pub(crate) fn gave_slot_back(&self) -> bool {
        self.core
            .journal
            .read_kept(&self.id, |s| s.slot_released)
            .unwrap_or(false)
    }

    /// Where a wait is over and the run would go on: an instance that gave
    /// its queue's slot back for the wait (`SlotReleased`) waits in its
    /// queue again first, and this driver stops. The driver that runs it
    /// once it takes a slot replays up to here and goes on: the wait's
    /// end (its time, its event, its child's end) is recorded only then.
    pub(crate) async fn hold_slot(&self) {
        // Only a live run asks for a slot; a rebuild or a replay records
        // nothing.
        if self.mode != Mode::Forward || !self.gave_slot_back() {
            return;
        }
        // Paused meanwhile: it stops here, and asks for a slot once resumed.
        if self.pause_here() {
            return pending().await;
        }
        self.record(Change::Requeued).await;
        tracing::debug!("the wait is over: waiting for a slot of its queue again");
        self.live.interrupt(Interrupt::Requeue);
        pending().await
    }

    /// At a step boundary: if a pause was asked for, or the engine drains
    /// before closing, stop here. (A drain records nothing: the instance
    /// goes on from here on the next open.)
    pub(crate) fn pause_here(&self) -> bool {
        if self.live.pause_requested() || self.core.is_draining() {
            self.live.interrupt(Interrupt::Suspend);
            true
        } else {
            false
        }
    }
}

/// Whether a slot in `state` answers its call from history alone: the
/// call ended (completed, failed, slept, received, timed out, recorded a
/// value, its child ended). One still in flight would run (or wait) again.
fn answers(state: &SlotState) -> bool {
    matches!(
        state,
        SlotState::Completed { .. }
            | SlotState::Failed { .. }
            | SlotState::Slept
            | SlotState::Received { .. }
            | SlotState::TimedOut { .. }
            | SlotState::Value { .. }
            | SlotState::ChildEnded { .. }
    )
}

fn describe(kind: SlotKind, name: &str, occurrence: u32) -> String {
    let base = kind.describe(name);
    if occurrence == 0 {
        base
    } else {
        format!("{base} (occurrence {occurrence})")
    }
}

/// The waits of a run that sleep, so the driver can tell when the run only
/// waits.
#[derive(Default)]
struct Asleep {
    waits: Mutex<std::collections::BTreeMap<u32, Wake>>,
    changed: tokio::sync::Notify,
}

/// When a run that only waits wakes: at `at`, the wake time of a sleep or
/// (`deadline`) the timeout of an event wait, which a test clock may treat
/// apart (`Clock::event_deadline`). Ordered by time first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Wake {
    pub(crate) at: u64,
    pub(crate) deadline: bool,
}

/// Held by a wait while it sleeps.
pub(crate) struct AsleepGuard {
    scope: Arc<RunScope>,
    slot: u32,
}

impl Drop for AsleepGuard {
    fn drop(&mut self) {
        lock(&self.scope.asleep.waits).remove(&self.slot);
    }
}
