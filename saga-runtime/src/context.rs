//! The handle workflow code gets: it hands out history slots in call order,
//! checks replay against what history recorded, and tracks the step tasks
//! and rollback handlers of one run of the workflow function.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::engine::{EngineInner, Txn, lock};
use crate::error::Result;
use crate::failure::{Failure, FailureKind};
use crate::live::{Interrupt, Live};
use crate::record::{SlotKind, SlotRecord};
use crate::saga::Registered;

/// What workflow code uses to make durable calls: steps, sleeps, event
/// waits, and the recorded `now()`/`random()`.
///
/// Every durable call takes the next slot of the instance's history, in
/// call order. On replay (after a crash, or to rebuild rollback handlers)
/// the same calls get the same slots and return what history recorded, so
/// workflow code must be deterministic: the same calls, in the same order.
#[derive(Clone)]
pub struct WorkflowContext {
    pub(crate) ctx: Arc<Ctx>,
}

/// Whether this run of the workflow function goes forward, or only
/// rebuilds rollback handlers from history after a crash mid-rollback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Forward,
    Rebuild,
}

/// What step tasks and waits share with the driver. Holds no task handles,
/// so tasks may keep it without keeping themselves alive.
pub(crate) struct Shared {
    pub(crate) engine: Arc<EngineInner>,
    pub(crate) id: Arc<str>,
    pub(crate) workflow: Arc<str>,
    pub(crate) live: Arc<Live>,
    pub(crate) mode: Mode,
    in_flight: Arc<InFlight>,
}

pub(crate) struct Ctx {
    pub(crate) shared: Arc<Shared>,
    replay: Mutex<Replay>,
}

struct Replay {
    /// What history recorded, by slot index.
    recorded: HashMap<u32, SlotRecord>,
    next_slot: u32,
    occurrences: HashMap<(SlotKind, String), u32>,
    rollbacks: Vec<Registered>,
    tasks: Vec<AbortHandle>,
}

/// A slot handed to a durable call.
pub(crate) struct Slot {
    pub(crate) index: u32,
    pub(crate) occurrence: u32,
    pub(crate) recorded: Option<SlotRecord>,
}

impl Ctx {
    pub(crate) fn new(
        engine: Arc<EngineInner>,
        id: Arc<str>,
        workflow: Arc<str>,
        live: Arc<Live>,
        mode: Mode,
        recorded: Vec<(u32, SlotRecord)>,
    ) -> Arc<Ctx> {
        Arc::new(Ctx {
            shared: Arc::new(Shared {
                engine,
                id,
                workflow,
                live,
                mode,
                in_flight: Arc::default(),
            }),
            replay: Mutex::new(Replay {
                recorded: recorded.into_iter().collect(),
                next_slot: 0,
                occurrences: HashMap::new(),
                rollbacks: Vec::new(),
                tasks: Vec::new(),
            }),
        })
    }

    /// Takes the next slot for a call of `kind` named `name`. `None` when
    /// history recorded something else here (the instance is then failed
    /// with a non-determinism error and the call never completes).
    pub(crate) fn take_slot(&self, kind: SlotKind, name: &str) -> Option<Slot> {
        let mut replay = lock(&self.replay);
        let counter = replay
            .occurrences
            .entry((kind, name.to_owned()))
            .or_default();
        let occurrence = *counter;
        *counter += 1;
        let index = replay.next_slot;
        replay.next_slot += 1;
        let recorded = replay.recorded.remove(&index);
        drop(replay);
        if let Some(r) = &recorded
            && (r.kind != kind || r.name != name || r.occurrence != occurrence)
        {
            let expected = describe(r.kind, &r.name, r.occurrence);
            let found = describe(kind, name, occurrence);
            self.shared.fail(Failure::new(
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
        Some(Slot {
            index,
            occurrence,
            recorded,
        })
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
        let guard = self.shared.in_flight.enter();
        let handle = self.shared.engine.runtime.spawn(async move {
            let _guard = guard;
            task.await;
        });
        let mut replay = lock(&self.replay);
        replay.tasks.retain(|t| !t.is_finished());
        replay.tasks.push(handle.abort_handle());
        drop(replay);
        self.shared.engine.track(handle);
    }

    /// Stops every step task of this run and waits until they are gone, so
    /// nothing writes behind the driver's back.
    pub(crate) async fn stop_tasks(&self) {
        let tasks = std::mem::take(&mut lock(&self.replay).tasks);
        for task in &tasks {
            task.abort();
        }
        self.shared.in_flight.wait_idle().await;
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        for task in &lock(&self.replay).tasks {
            task.abort();
        }
    }
}

impl Shared {
    /// Fails the instance from inside (non-determinism, decode or store
    /// failure): the driver stops the workflow and records `failure`.
    pub(crate) fn fail(&self, failure: Failure) {
        tracing::error!(instance = %self.id, error = %failure, "instance cannot go on");
        self.live.interrupt(Interrupt::Fail(failure));
    }

    /// Reports a store failure of a durable call to the driver. The
    /// instance stops where it is without recording an end (the store is
    /// what failed, and an `Errored` written now would skip the
    /// compensations); it resumes by replay when the store opens again.
    pub(crate) fn store_failed(&self, error: crate::Error) {
        tracing::error!(instance = %self.id, error = %error, "store failure: the instance stops and resumes when the store is opened again");
        self.engine.stopped_by_store(&self.id, &error);
        self.live.interrupt(Interrupt::Stop);
    }

    pub(crate) fn write<R>(&self, f: impl FnOnce(&mut Txn<'_>) -> Result<R>) -> Result<R> {
        self.engine.write(&self.id, f)
    }

    /// At a step boundary: if a pause was asked for, stop here.
    pub(crate) fn pause_here(&self) -> bool {
        if self.live.pause_requested() {
            self.live.interrupt(Interrupt::Suspend);
            true
        } else {
            false
        }
    }
}

fn describe(kind: SlotKind, name: &str, occurrence: u32) -> String {
    let base = kind.describe(name);
    if occurrence == 0 {
        base
    } else {
        format!("{base} (occurrence {occurrence})")
    }
}

/// Counts running step tasks so the driver can wait for them to stop.
#[derive(Default)]
struct InFlight {
    count: Mutex<usize>,
    idle: Notify,
}

/// Held by a step task while it exists; dropped when it ends or is aborted.
struct TaskGuard {
    in_flight: Arc<InFlight>,
}

impl InFlight {
    fn enter(self: &Arc<Self>) -> TaskGuard {
        *lock(&self.count) += 1;
        TaskGuard {
            in_flight: self.clone(),
        }
    }

    async fn wait_idle(&self) {
        loop {
            let idle = self.idle.notified();
            if *lock(&self.count) == 0 {
                return;
            }
            idle.await;
        }
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        let mut count = lock(&self.in_flight.count);
        *count -= 1;
        if *count == 0 {
            self.in_flight.idle.notify_waiters();
        }
    }
}
