//! The engine: opens the store, holds the registered workflows, starts and
//! resumes instances.
//!
//! Also here: the lifecycle event stream (`subscription`) and retention
//! (`retention`).

mod builder;
pub(crate) mod counts;
mod idle;
mod list_rebuild;
pub(crate) mod listing;
pub(crate) mod queue_limits;
pub(crate) mod retention;
pub(crate) mod start;
pub(crate) mod subscription;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::engine::subscription::Subscription;
use crate::error::{Error, Result};
use crate::instance::send::EventSender;
use crate::instance::{Instance, Run};
use crate::run::runner::Runner;
use crate::workflow::Workflow;

pub use builder::EngineBuilder;

/// The durable workflow engine.
///
/// Cheap to clone; every clone is the same engine. Dropping the last clone
/// stops its instances (they resume when the store is opened again); call
/// [`Engine::close`] to wait for that.
///
/// # Examples
///
/// ```
/// use saga_runtime::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), saga_runtime::Error> {
/// let add_one = workflow_fn("add-one", |ctx: WorkflowContext, n: u64| async move {
///     let n = ctx
///         .step("add", StepConfig::default(), move |_key| async move { Ok(n + 1) })
///         .await?;
///     Ok::<_, WorkflowError>(n)
/// });
/// let engine = Engine::temporary()?;
/// engine.register(add_one)?;
/// let run = engine.start(add_one, "order-1", 41).await?;
/// assert_eq!(run.result().await?, 42);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Engine {
    handle: Arc<EngineHandle>,
}

/// Shuts the engine down when the last user-facing clone goes away.
struct EngineHandle {
    runner: Arc<Runner>,
    /// The schedules this engine declares (`engine.schedules()`).
    schedules: Arc<crate::schedule::Declared>,
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        shut_down(&self.runner);
    }
}

/// Stops every driver and the flusher; returns the tasks to wait on.
fn shut_down(runner: &Runner) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = runner.core.close();
    tasks.extend(runner.stop_residents());
    runner.core.journal.stop();
    // Pending result() and control calls see the engine closed.
    runner.core.journal.notify_ended();
    tasks
}

impl Engine {
    /// Opens (or creates) the store in `path` with the default options.
    /// Instances that were running when the last process died resume as
    /// soon as their workflow is registered.
    pub fn open(path: impl AsRef<Path>) -> Result<Engine> {
        Engine::builder().open(path)
    }

    /// Connects to the PostgreSQL database at `url` with the default
    /// options; see [`EngineBuilder::connect`].
    #[cfg(feature = "postgres")]
    pub async fn connect(url: &str) -> Result<Engine> {
        Engine::builder().connect(url).await
    }

    /// An engine on a temporary store, for tests and examples.
    pub fn temporary() -> Result<Engine> {
        Engine::builder().temporary()
    }

    /// Options: clock, payload limit, retention.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::new()
    }

    /// Makes `workflow` runnable here, and resumes its unfinished instances.
    /// Registering the same workflow again is a no-op; another workflow
    /// under a name already registered is [`Error::WorkflowNameTaken`]; a
    /// workflow whose steps take a service the engine was not given is
    /// [`Error::MissingService`].
    ///
    /// A stored run-time schedule
    /// ([`Schedules::create`](crate::schedule::Schedules::create)) of the workflow
    /// fires here from then on.
    pub fn register<W: Workflow>(&self, workflow: W) -> Result<()> {
        self.runner().register(Arc::new(workflow))?;
        self.handle.schedules.changed.notify_waiters();
        Ok(())
    }

    /// Starts an instance of `workflow` with a caller-chosen `id` (1–100
    /// characters of `[A-Za-z0-9_-]`, not starting with `-`).
    ///
    /// Starting an id that exists returns the existing instance and runs
    /// nothing twice, when it runs the same workflow with an equal input
    /// (compared as JSON values, so map key order does not matter); another
    /// input is [`Error::InputMismatch`], another workflow
    /// [`Error::InstanceIdInUse`]. Registers the workflow if it is not yet.
    ///
    /// # Cancel safety
    ///
    /// the instance is stored and its driver started at the first poll; dropping the future
    /// after that leaves the instance running, and `start` again with the same id and input
    /// returns it.
    pub async fn start<W: Workflow>(
        &self,
        workflow: W,
        id: &str,
        input: W::Input,
    ) -> Result<Run<W::Output>> {
        let runner = self.runner();
        if let Some(queue) = runner.queues.default_queue() {
            return self.start_on(queue, workflow, id, input).await;
        }
        crate::instance::send::start(runner, workflow, id, input, None, |_| Ok((None, ()))).await?;
        runner.core.journal.flush().await?;
        Ok(Run::new(Instance::new(runner.clone(), id)))
    }

    /// The schedules of the store: pause, resume, list and trigger them
    /// (see [`Schedules`](crate::schedule::Schedules)).
    pub fn schedules(&self) -> crate::schedule::control::Schedules<'_> {
        crate::schedule::control::Schedules::new(self.runner(), &self.handle.schedules)
    }

    /// Whether this engine only reads: connected with `connect_read_only`
    /// (its events and control calls are posted to the worker that drives
    /// the instance, [`Sent::Posted`](crate::Sent::Posted)), or opened with
    /// [`EngineBuilder::open_read_only`] (they answer [`Error::ReadOnly`]).
    pub fn reads_only(&self) -> bool {
        self.runner().core.journal.read_only()
    }

    /// Whether the engine was given a payload codec
    /// ([`EngineBuilder::codec`]): then the values it stores are sealed,
    /// and a tool that shows them (an admin endpoint) must not show them to
    /// anyone who asks.
    pub fn has_codec(&self) -> bool {
        self.runner().core.journal.sealer().seals()
    }

    /// A handle on an existing instance.
    ///
    /// # Cancel safety
    ///
    /// a read; dropping the future changes nothing.
    pub async fn instance(&self, id: &str) -> Result<Instance> {
        crate::names::validate_any_id(id)?;
        self.runner().core.journal.read(id, |_| ()).await?;
        Ok(Instance::new(self.runner().clone(), id))
    }

    /// A stream of lifecycle events of every instance. An event is sent
    /// only after it is durable. On PostgreSQL it sees every worker's
    /// instances (see [`Subscription`]).
    pub fn subscribe(&self) -> Subscription {
        Subscription::new(&self.runner().core)
    }

    /// Sends an event to an instance. It is stored durably before this
    /// returns and delivered to the instance's `wait_for_event` for
    /// `event_type`, now or when the workflow gets there.
    ///
    /// Shorthand for `engine.event(id, event_type).send(payload)`; see
    /// [`Engine::event`] for an event id (deduplication) and for
    /// start-with-event. An instance that does not exist yet is
    /// [`Error::UnknownInstance`]: when the event may come first, use
    /// [`EventSender::send_with_start`].
    ///
    /// # Cancel safety
    ///
    /// the event is stored and its waiter woken at the first poll; dropping the future after
    /// that only gives up waiting for durability: the event is delivered, once.
    pub async fn send_event<P: Serialize + ?Sized>(
        &self,
        id: &str,
        event_type: &str,
        payload: &P,
    ) -> Result<()> {
        self.event(id, event_type).send(payload).await.map(drop)
    }

    /// An event of `event_type` for instance `id`, to send with an optional
    /// event id (`.id("evt_123")`, deduplicated) by
    /// [`send`](EventSender::send), or with
    /// [`send_with_start`](EventSender::send_with_start), which creates the
    /// instance if needed and delivers the event atomically.
    pub fn event(&self, id: &str, event_type: &str) -> EventSender<'_> {
        EventSender::new(self.runner(), id, event_type)
    }

    /// Removes finished instances older than the retention period now
    /// (the engine also does this on its own, hourly on its clock); returns
    /// how many it removed.
    ///
    /// # Cancel safety
    ///
    /// each instance is removed in one step under its write lock; dropping the future stops
    /// the sweep between two instances.
    pub async fn sweep_expired(&self) -> Result<usize> {
        crate::engine::retention::sweep(self.runner()).await
    }

    /// Stops every running instance (they resume when the store is opened
    /// again), flushes, and releases the store: once this returns, the
    /// directory can be opened again (unless other clones of the engine or
    /// instance handles still hold it open).
    pub async fn close(self) {
        self.stop_and_release().await;
    }

    /// Drains, then closes: for a service stopping on SIGTERM.
    ///
    /// From the call on no step starts: an instance that reaches its next
    /// step (or sleep, or event wait) parks there, as a pause would, but
    /// nothing is recorded and its status does not change; no new driver
    /// starts (a `start()` or `resume()` now stores its change and runs on
    /// the next open). Step attempts already in flight go on until they
    /// record their outcome, for at most `deadline` (real time). Then the
    /// engine closes as [`Engine::close`] does: what is still running (a
    /// step past the deadline, a compensation, a sleep) is stopped, and
    /// every unfinished instance resumes on the next open, where a stopped
    /// step runs again with the same idempotency key.
    ///
    /// Returns whether every step in flight recorded its outcome before
    /// the deadline.
    ///
    /// # Cancel safety
    ///
    /// the drain begins at the first poll; dropping the future after that
    /// leaves the engine draining (it starts no step) until it is closed or
    /// dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), saga_runtime::Error> {
    /// let engine = saga_runtime::Engine::temporary()?;
    /// // On SIGTERM:
    /// let drained = engine.close_within(Duration::from_secs(10)).await;
    /// assert!(drained);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn close_within(self, deadline: Duration) -> bool {
        let core = &self.runner().core;
        core.start_draining();
        let drained = core.steps_in_flight.wait_idle_within(deadline).await;
        if !drained {
            tracing::warn!(
                ?deadline,
                "steps still in flight at the drain deadline are stopped; they run again on the next open"
            );
        }
        self.stop_and_release().await;
        drained
    }

    /// Stops every driver, waits for them, and, when this was the last
    /// user of the store, waits for it to be released.
    async fn stop_and_release(self) {
        let runner = self.runner().clone();
        for task in shut_down(&runner) {
            // Aborted tasks end with a cancellation error; that is the point.
            let _ = task.await;
        }
        drop(self);
        let path = runner.path.clone();
        let last = Arc::strong_count(&runner) == 1;
        drop(runner);
        if let (true, Some(path)) = (last, path) {
            crate::store::wait_until_released(&path, Duration::from_secs(5)).await;
        }
    }

    /// How many times the store was flushed so far (for benchmarks: group
    /// commit shows as fewer flushes than durable writes). Not a stable API.
    #[doc(hidden)]
    pub fn flush_count(&self) -> u64 {
        self.runner().core.journal.flushes()
    }

    pub(crate) fn runner(&self) -> &Arc<Runner> {
        &self.handle.runner
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

/// What opening a store of one process asks of it, answered at once (a
/// sync `open` cannot wait; a store that would is opened with `connect`).
fn answered_now<T>(work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    crate::store::now_or_never(work).unwrap_or_else(|| {
        Err(Error::Store(
            "this store cannot be opened without waiting for it: open it with an async constructor"
                .into(),
        ))
    })
}
