//! What every part of a running engine shares: the journal, the clock,
//! the Tokio runtime, the payload limit and the tasks to stop at shutdown.
//! Below the drivers and the workflow context, so they depend on it and
//! never on the engine.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::runtime::Handle;

use crate::codec::Payload;
use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::lock::lock;
use crate::quiet::Quiet;
use crate::time::clock::Clock;
use crate::workflow::fault::FaultPlan;
use crate::workflow::in_flight::InFlight;
use crate::workflow::kin::{Kin, KinCell};
use crate::workflow::service::Services;

pub(crate) struct Core {
    pub(crate) journal: Journal,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) runtime: Handle,
    pub(crate) max_payload: usize,
    /// What `EngineBuilder::provide` gave, handed to steps by type.
    pub(crate) services: Arc<Services>,
    /// On a store shared by workers: how often this engine looks at what
    /// other processes did (claims, posts, their instances' ends), besides
    /// when the store tells of it.
    pub(crate) poll: Duration,
    closed: AtomicBool,
    /// Set by `Engine::close_within`: no step starts any more.
    draining: AtomicBool,
    /// Every step task of every instance, for a drain to wait on.
    pub(crate) steps_in_flight: Arc<InFlight>,
    /// Drivers, step tasks and the retention sweeper.
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// What the engine does for child workflows (the runner, above).
    pub(crate) kin: KinCell,
    /// Where `ctx.random()` draws from.
    pub(crate) random: crate::random::Random,
    /// Counts the engine's tasks that can run, for `Engine::idle`.
    pub(crate) quiet: Arc<Quiet>,
    /// The failures `testing::explore` injects into attempts; `None`
    /// outside it.
    pub(crate) faults: Option<Arc<FaultPlan>>,
}

/// A value that encodes, but whose JSON does not decode back.
fn unreadable(what: String, as_what: &str) -> Error {
    Error::Encode {
        what,
        detail: format!(
            "its JSON does not decode back as {as_what}; JSON nests at most 127 levels deep \
             (serde_json's recursion limit) and holds no NaN or infinity: flatten the value or store it as a string"
        ),
    }
}

impl Core {
    pub(crate) fn new(
        journal: Journal,
        clock: Arc<dyn Clock>,
        runtime: Handle,
        max_payload: usize,
        services: Services,
        poll: Duration,
    ) -> Core {
        Core {
            journal,
            clock,
            runtime,
            max_payload,
            services: Arc::new(services),
            poll,
            closed: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            steps_in_flight: Arc::default(),
            tasks: Mutex::new(Vec::new()),
            kin: KinCell::default(),
            random: crate::random::Random::default(),
            quiet: Arc::default(),
            faults: None,
        }
    }

    /// The engine's side of child workflows; `None` once it is gone.
    pub(crate) fn kin(&self) -> Option<Arc<dyn Kin>> {
        self.kin.get()
    }

    pub(crate) fn now_millis(&self) -> u64 {
        self.journal.now_millis()
    }

    /// Encodes a user value, refusing one over the payload limit.
    pub(crate) fn encode_limited<T: Serialize + ?Sized>(
        &self,
        value: &T,
        what: impl Fn() -> String,
    ) -> Result<Payload> {
        let payload = Payload::encode(value).map_err(|detail| Error::Encode {
            what: what(),
            detail,
        })?;
        if payload.len() > self.max_payload {
            return Err(Error::PayloadTooLarge {
                what: what(),
                size: payload.len(),
                limit: self.max_payload,
            });
        }
        Ok(payload)
    }

    /// Encodes a workflow input as [`Core::encode_limited`] does, and
    /// refuses one that does not decode back as its type (a NaN written as
    /// `null`, nesting past the decoder's depth limit): the instance could
    /// never read it, and would fail at once.
    pub(crate) fn encode_readable<T: Serialize + DeserializeOwned>(
        &self,
        value: &T,
        what: impl Fn() -> String,
    ) -> Result<Payload> {
        let payload = self.encode_finite(value, &what)?;
        let type_name = std::any::type_name::<T>();
        match crate::panic::catch(|| payload.decode::<T>()) {
            Ok(Ok(_)) => Ok(payload),
            Ok(Err(detail)) => Err(unreadable(what(), &format!("`{type_name}` ({detail})"))),
            Err(panic) => Err(unreadable(
                what(),
                &format!("`{type_name}` (its Deserialize panicked: {panic})"),
            )),
        }
    }

    /// Encodes a value whose type the engine does not know (an event
    /// payload) as [`Core::encode_limited`] does, and refuses one whose
    /// JSON does not read back as the same value: a non-finite float, or
    /// nesting past the decoder's depth limit.
    pub(crate) fn encode_untyped<T: Serialize + ?Sized>(
        &self,
        value: &T,
        what: impl Fn() -> String,
    ) -> Result<Payload> {
        let payload = self.encode_finite(value, &what)?;
        match payload.decode::<serde_json::Value>() {
            Ok(_) => Ok(payload),
            Err(detail) => Err(unreadable(what(), &format!("JSON ({detail})"))),
        }
    }

    fn encode_finite<T: Serialize + ?Sized>(
        &self,
        value: &T,
        what: &impl Fn() -> String,
    ) -> Result<Payload> {
        crate::finite::check_finite(value).map_err(|detail| Error::Encode {
            what: what(),
            detail: format!(
                "{detail}; replace it (by a string, or leave the field out) before sending"
            ),
        })?;
        self.encode_limited(value, what)
    }

    /// Spawns an engine task, counted for `Engine::idle` while it can run.
    pub(crate) fn spawn<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.quiet.spawn(&self.runtime, work)
    }

    /// Keeps a task's handle so shutdown can stop it and `close` wait for it.
    pub(crate) fn track(&self, task: tokio::task::JoinHandle<()>) {
        let mut tasks = lock(&self.tasks);
        if tasks.len() >= 64 && tasks.len().is_power_of_two() {
            tasks.retain(|t| !t.is_finished());
        }
        tasks.push(task);
        if self.is_closed() {
            for task in tasks.iter() {
                task.abort();
            }
        }
    }

    /// Marks the engine closed and stops every task; returns them to wait
    /// on (empty when it was closed already).
    pub(crate) fn close(&self) -> Vec<tokio::task::JoinHandle<()>> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Vec::new();
        }
        let tasks: Vec<_> = lock(&self.tasks).drain(..).collect();
        for task in &tasks {
            task.abort();
        }
        tasks
    }

    /// Stops starting steps (and drivers) ahead of a close: each driver
    /// parks at its next step boundary, as a pause does.
    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}
