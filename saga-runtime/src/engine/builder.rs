//! The options of an engine before it opens ([`EngineBuilder`]), and the
//! opening itself: a sled directory, a PostgreSQL database, or any store.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;

use super::{Engine, EngineHandle, answered_now};
use crate::error::{Error, Result};
use crate::journal::{InstanceCaps, Journal};
use crate::run::runner::Runner;
use crate::seal::{Codec, Sealer};
use crate::store::{SledStore, Store};
use crate::time::clock::{Clock, SystemClock};
use crate::workflow::engine_core::Core;
use crate::workflow::service::Services;
use crate::workflow::{ErasedWorkflow, Workflow};

/// How often an engine on a store shared by workers looks at what other
/// processes did, besides being told (see `EngineBuilder::poll_interval`).
const DEFAULT_POLL: Duration = Duration::from_millis(200);

/// Options of an engine before it opens.
pub struct EngineBuilder {
    clock: Arc<dyn Clock>,
    /// The clock, when it is a [`crate::time::clock::TestClock`]: the shared timer of
    /// hibernating instances counts each with it (`run::alarms`).
    test_clock: Option<crate::time::clock::TestClock>,
    max_payload: usize,
    caps: InstanceCaps,
    retention: Duration,
    event_dedup_window: Duration,
    store_timeout: Duration,
    workflows: Vec<Arc<dyn ErasedWorkflow>>,
    services: Services,
    #[cfg(feature = "postgres")]
    postgres_schema: String,
    #[cfg(feature = "postgres")]
    lease: Duration,
    poll: Duration,
    sealer: Sealer,
    queues: Vec<crate::queue::Queue>,
    /// The queue of `start` and `start_with`, one of `queues`.
    default_queue: Option<String>,
    schedules: Vec<crate::schedule::Schedule>,
    random: crate::random::Random,
    /// The failures `testing::explore` injects.
    faults: Option<Arc<crate::workflow::fault::FaultPlan>>,
}

impl EngineBuilder {
    /// The builder with every default (`Engine::builder`).
    pub(super) fn new() -> EngineBuilder {
        EngineBuilder {
            clock: Arc::new(SystemClock),
            test_clock: None,
            max_payload: EngineBuilder::DEFAULT_MAX_PAYLOAD_BYTES,
            caps: InstanceCaps {
                pending_events: EngineBuilder::DEFAULT_MAX_PENDING_EVENTS,
                journal_records: EngineBuilder::DEFAULT_MAX_JOURNAL_RECORDS,
            },
            retention: EngineBuilder::DEFAULT_RETENTION,
            event_dedup_window: EngineBuilder::DEFAULT_EVENT_DEDUP_WINDOW,
            store_timeout: EngineBuilder::DEFAULT_STORE_TIMEOUT,
            workflows: Vec::new(),
            services: Services::default(),
            #[cfg(feature = "postgres")]
            postgres_schema: crate::store::DEFAULT_SCHEMA.to_owned(),
            #[cfg(feature = "postgres")]
            lease: crate::store::DEFAULT_LEASE,
            poll: DEFAULT_POLL,
            sealer: Sealer::default(),
            queues: Vec::new(),
            default_queue: None,
            schedules: Vec::new(),
            random: crate::random::Random::default(),
            faults: None,
        }
    }

    /// Declares a queue that [`Engine::start_on`] starts instances on,
    /// with its limits (see [`Queue`](crate::queue::Queue)). Declare the same
    /// queues on every worker of a shared store. A bad declaration (a
    /// name off the step-name grammar, a limit of 0, a queue declared
    /// twice) is [`Error::InvalidQueue`] when the engine opens, before
    /// anything is stored.
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// # use saga_runtime::queue::Queue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), saga_runtime::Error> {
    /// let engine = Engine::builder()
    ///     .queue(Queue::new("bank-api").concurrency(10).per_key(1))
    ///     .temporary()?;
    /// # Ok(()) }
    /// ```
    pub fn queue(mut self, queue: crate::queue::Queue) -> Self {
        self.queues.push(queue);
        self
    }

    /// Declares `queue` as [`queue`](EngineBuilder::queue) does, and makes
    /// it the queue of every [`Engine::start`] and
    /// [`Engine::start_with`]: their instances wait `Queued` in it and
    /// run once they take a slot, as with [`Engine::start_on`]. On a store
    /// shared by workers any worker with room takes them, so a service
    /// whose replicas all take work declares this one line on each. Child
    /// workflows and schedule ticks are not queued by it: a child runs
    /// outside its parent's queue, a tick where its schedule fires.
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// # use saga_runtime::queue::Queue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), saga_runtime::Error> {
    /// let double = workflow_fn("double", |_ctx: WorkflowContext, n: u64| async move {
    ///     Ok::<_, WorkflowError>(2 * n)
    /// });
    /// // At most 16 instances at once on each worker.
    /// let engine = Engine::builder()
    ///     .default_queue(Queue::new("work").per_worker(16))
    ///     .temporary()?;
    /// let run = engine.start(double, "d-1", 21).await?;
    /// assert_eq!(engine.instance("d-1").await?.info().await?.queue.as_deref(), Some("work"));
    /// assert_eq!(run.result().await?, 42);
    /// # Ok(()) }
    /// ```
    pub fn default_queue(mut self, queue: crate::queue::Queue) -> Self {
        self.default_queue = Some(queue.name().to_owned());
        self.queues.push(queue);
        self
    }

    /// The declared queues, checked.
    fn checked_queues(&self) -> Result<crate::queue::Queues> {
        crate::queue::Queues::new(self.queues.clone(), self.default_queue.clone())
    }

    /// The clock the engine reads and sleeps on; [`crate::time::clock::TestClock`] in tests.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.test_clock = (&clock as &dyn std::any::Any)
            .downcast_ref::<crate::time::clock::TestClock>()
            .cloned();
        self.clock = Arc::new(clock);
        self
    }

    /// Draws `ctx.random()` from a generator seeded with `seed` instead of
    /// the operating system's randomness: a test or a simulated run draws
    /// the same numbers on every run of the seed. Leave it unset in
    /// production.
    pub fn random_seed(mut self, seed: u64) -> Self {
        self.random = crate::random::Random::seeded(seed);
        self
    }

    /// The largest encoded workflow input, step output or event payload
    /// (default 1 MiB), measured as JSON, before the engine's codec (if
    /// any) encodes it. Larger ones are refused before anything is stored.
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload = bytes.min(crate::codec::DECODE_LIMIT / 2);
        self
    }

    /// The codec that encodes every user value the engine stores (workflow
    /// inputs and outputs, step inputs and outputs, event payloads, typed
    /// failures, events posted to another worker), e.g. a `Keyring` that
    /// encrypts them (feature `encryption`). The engine's own records are
    /// not encoded. Values stored before still read; a value sealed with a
    /// key the codec does not hold is an [`Error::MissingKey`] at its first
    /// use, and parks an instance that replays it `Blocked` until an engine
    /// with the key opens the store. The payload limit applies to values
    /// before they are encoded.
    pub fn codec(mut self, codec: impl Codec) -> Self {
        self.sealer = Sealer::new(Arc::new(codec));
        self
    }

    /// [`EngineBuilder::codec`] with a codec shared with other engines.
    pub fn codec_arc(mut self, codec: Arc<dyn Codec>) -> Self {
        self.sealer = Sealer::new(codec);
        self
    }

    /// How many events sent to one instance may wait, not yet taken by a
    /// `wait_for_event` (default [`EngineBuilder::DEFAULT_MAX_PENDING_EVENTS`]). One more
    /// is refused with [`Error::InstanceFull`] at the sender, before
    /// anything is stored: they are held in memory while the instance
    /// runs.
    pub fn max_pending_events(mut self, events: usize) -> Self {
        self.caps.pending_events = events;
        self
    }

    /// How many records one instance's journal may hold before events sent
    /// to it are refused with [`Error::InstanceFull`] (default
    /// [`EngineBuilder::DEFAULT_MAX_JOURNAL_RECORDS`]). The instance's own steps are
    /// still recorded, so it can finish; a loop that runs for ever should
    /// continue as a new instance.
    pub fn max_journal_records(mut self, records: u64) -> Self {
        self.caps.journal_records = records;
        self
    }

    /// How long finished instances are kept (default 7 days).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// How long an event id ([`EventSender::id`](crate::EventSender::id))
    /// is remembered across runs of an instance that continues as new
    /// (default [`EngineBuilder::DEFAULT_EVENT_DEDUP_WINDOW`], 7 days, as long as ended
    /// instances are kept).
    ///
    /// Within one run every id is remembered: a second send with it is
    /// [`Sent::Duplicate`](crate::Sent::Duplicate) (or
    /// [`Error::EventIdConflict`] with another payload). When the run
    /// continues as new, it hands over only the ids sent less than
    /// `window` before, with their send times on the engine's clock, so
    /// a loop that runs for years carries one window of ids, not every
    /// id it was ever sent. A send of an id that was dropped is a new
    /// event. Make it longer than the longest a sender of yours may retry
    /// a send; shorter when an instance is sent so many events that one
    /// window of ids (each with its payload) weighs on every hand-over.
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), saga_runtime::Error> {
    /// // The webhooks this service takes are retried for at most 3 days.
    /// let engine = Engine::builder()
    ///     .event_dedup_window(Duration::from_secs(4 * 24 * 60 * 60))
    ///     .temporary()?;
    /// # drop(engine);
    /// # Ok(()) }
    /// ```
    pub fn event_dedup_window(mut self, window: Duration) -> Self {
        self.event_dedup_window = window;
        self
    }

    /// The default limit on an encoded workflow input, step output or
    /// event payload; see [`EngineBuilder::max_payload_bytes`].
    pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
    /// The default cap on an instance's pending events (sent, not yet taken
    /// by a wait); see [`EngineBuilder::max_pending_events`].
    pub const DEFAULT_MAX_PENDING_EVENTS: usize = 10_000;
    /// The default cap on the records of an instance's journal before events
    /// sent to it are refused; see [`EngineBuilder::max_journal_records`].
    /// Temporal caps a history at 50 Ki events.
    pub const DEFAULT_MAX_JOURNAL_RECORDS: u64 = 50_000;
    /// How long a durable write may wait for the store by default before it
    /// fails with [`Error::Store`]; see [`EngineBuilder::store_timeout`].
    pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(30);
    /// How long finished instances are kept by default; see
    /// [`EngineBuilder::retention`].
    pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);
    /// How long an event id is remembered across runs of an instance that
    /// continues as new, by default (7 days); see
    /// [`EngineBuilder::event_dedup_window`].
    pub const DEFAULT_EVENT_DEDUP_WINDOW: Duration =
        crate::journal::runs::DEFAULT_EVENT_DEDUP_WINDOW;
    /// How long a durable write may wait for the store (default 30 s, real
    /// time). A full or unresponsive disk then gives [`Error::Store`] naming
    /// the cause instead of a hang; nothing stored is lost.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = timeout;
        self
    }

    /// Provides a shared service (a database pool, an HTTP client, a
    /// payments SDK) to every step and rollback handler that takes a
    /// [`Service<T>`](crate::Service) parameter, one per type (a second of
    /// the same type replaces the first). Services are never stored.
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// struct Mailer;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), saga_runtime::Error> {
    /// let engine = Engine::builder().provide(Mailer).temporary()?;
    /// # Ok(()) }
    /// ```
    pub fn provide<T: Send + Sync + 'static>(self, service: T) -> Self {
        self.provide_arc(Arc::new(service))
    }

    /// Like [`provide`](EngineBuilder::provide), for a service already
    /// shared elsewhere.
    pub fn provide_arc<T: Send + Sync + 'static>(mut self, service: Arc<T>) -> Self {
        self.services.insert(service);
        self
    }

    /// Every service of `services`, shared (`testing::explore` gives each
    /// engine of a scenario the same test doubles).
    pub(crate) fn provide_all(mut self, services: &Services) -> Self {
        self.services.extend(services);
        self
    }

    /// Injects `plan`'s failures into the attempts of this engine.
    pub(crate) fn inject(mut self, plan: Arc<crate::workflow::fault::FaultPlan>) -> Self {
        self.faults = Some(plan);
        self
    }

    /// Registers a workflow before the store opens, so its instances resume
    /// as soon as it does.
    pub fn register<W: Workflow>(mut self, workflow: W) -> Self {
        self.workflows.push(Arc::new(workflow));
        self
    }

    /// Declares a schedule: its workflow (registered here too) starts at
    /// every tick, once per tick across workers and restarts. A mistake
    /// in it (an invalid cron expression, an unknown time zone, a zero
    /// interval) is the typed error of `open`, `temporary` or `connect`,
    /// before anything is stored. A schedule declared differently by
    /// another release takes the definition of whichever registered it
    /// last. See [`Schedule`](crate::schedule::Schedule).
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// # use saga_runtime::schedule::{Schedule, Tick};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), saga_runtime::Error> {
    /// let settle = workflow_fn("settle", |_ctx: WorkflowContext, at: i64| async move {
    ///     Ok::<_, WorkflowError>(at)
    /// });
    /// let engine = Engine::builder()
    ///     .schedule(
    ///         Schedule::cron("nightly-settlement", "0 2 * * *")
    ///             .time_zone("Europe/Paris")
    ///             .start(settle, |tick: Tick| tick.unix_seconds()),
    ///     )
    ///     .temporary()?;
    /// # Ok(()) }
    /// ```
    pub fn schedule(mut self, schedule: crate::schedule::Schedule) -> Self {
        if let Some(workflow) = schedule.workflow() {
            self.workflows.push(workflow);
        }
        self.schedules.push(schedule);
        self
    }

    /// What every way of opening asks first: the declared queues and
    /// schedules checked, and the Tokio runtime the engine runs on.
    fn checked(&mut self) -> Result<(Arc<crate::schedule::Declared>, Handle)> {
        self.checked_queues()?;
        let schedules = self.checked_schedules()?;
        let runtime = Handle::try_current().map_err(|_| Error::NoRuntime)?;
        Ok((schedules, runtime))
    }

    /// The declared schedules, checked before a store opens.
    fn checked_schedules(&mut self) -> Result<Arc<crate::schedule::Declared>> {
        let schedules = std::mem::take(&mut self.schedules);
        crate::schedule::Declared::check(schedules, self.clock.now()).map(Arc::new)
    }

    /// Opens (or creates, with mode 0700) the store in `path`. A store
    /// written by the first release (format version 1) is upgraded in
    /// place: each instance's records become one journal record.
    pub fn open(mut self, path: impl AsRef<Path>) -> Result<Engine> {
        let (schedules, runtime) = self.checked()?;
        let store = Arc::new(SledStore::open(path.as_ref())?);
        let journal = Journal::new(store.clone(), self.clock.clone(), self.store_timeout)?;
        let imported = answered_now(journal.import_legacy(&store))?;
        if imported > 0 {
            tracing::info!(
                instances = imported,
                "upgraded a format-version-1 store to journals"
            );
        }
        let path = store.path().map(Path::to_owned);
        self.build(journal, runtime, path, schedules)
    }

    /// Opens the store in `path` to read and check, driving nothing: the
    /// replay check of a release on sled, before its deploy. Registering
    /// workflows resumes no instance (on [`open`](EngineBuilder::open) the
    /// new code would drive the instances in flight, and one that no
    /// longer replays would park itself `Blocked`), no schedule fires,
    /// nothing is repaired or swept. Reads answer as on an engine that
    /// writes; `start`, events and control calls answer
    /// [`Error::ReadOnly`]. The store must exist, and no other process may
    /// hold it open (sled takes it whole): check a copy beside a running
    /// service.
    ///
    /// ```no_run
    /// # use saga_runtime::prelude::*;
    /// # #[workflow(name = "order")]
    /// # async fn order(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> { Ok(()) }
    /// # async fn check() -> Result<(), Error> {
    /// use saga_runtime::testing::{History, Replayer};
    ///
    /// let engine = Engine::builder().register(order).open_read_only("./saga-data")?;
    /// let history = History::export(&engine, "order-7").await?;
    /// if let Err(e) = Replayer::of(&engine).replay_registered(&history).await {
    ///     eprintln!("order-7 would block after the deploy: {e}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn open_read_only(mut self, path: impl AsRef<Path>) -> Result<Engine> {
        let (schedules, runtime) = self.checked()?;
        let path = path.as_ref();
        if !path.join("db").exists() && !path.join("conf").exists() {
            return Err(Error::InvalidArgument(format!(
                "there is no store in {} to read: open_read_only reads an existing store (Engine::open creates one)",
                path.display()
            )));
        }
        let store = SledStore::open(path)?;
        if !store.legacy_instances()?.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "the store in {} is of the first release's format: open it once with Engine::open, which upgrades it, before reading it",
                path.display()
            )));
        }
        let store: Arc<dyn Store> = Arc::new(store.reading());
        let journal = Journal::new(store, self.clock.clone(), self.store_timeout)?;
        self.build(journal, runtime, Some(path.to_owned()), schedules)
    }

    /// Connects to the PostgreSQL database at `url`
    /// (`postgres://user:password@host:port/db`), creating or migrating its
    /// schema: this engine is then one of the schema's workers.
    ///
    /// Every worker drives the instances it starts. It holds a lease that
    /// it renews; when a worker closes, or stops renewing for the lease
    /// time (it died), the other workers claim its unfinished instances,
    /// a batch at a time, and resume them by replay. Calls on an instance
    /// another worker drives (events, pause, terminate, ...) are posted to
    /// that worker, which acts on them within moments; `result()` and
    /// `list()` work from any worker. A worker that was stopped past its
    /// lease is fenced: it writes nothing more ([`Error::Fenced`]). An
    /// unreachable database is [`Error::DatabaseUnreachable`].
    ///
    /// TLS follows the URL's `sslmode` with libpq's meaning (`disable`,
    /// `prefer`, the default, `require`, `verify-ca`, `verify-full`), with
    /// `sslrootcert` (else the system's roots) and optional
    /// `sslcert`/`sslkey`: `postgres://app@db.example.com/prod?sslmode=verify-full&sslrootcert=/etc/ssl/ca.pem`.
    /// A certificate that does not verify is [`Error::TlsCertificate`]
    /// naming the host; `sslmode=disable` against a server that takes only
    /// TLS is [`Error::TlsRequired`]. Neither is retried.
    #[cfg(feature = "postgres")]
    pub async fn connect(self, url: &str) -> Result<Engine> {
        self.connect_postgres(url, false).await
    }

    /// Connects to the PostgreSQL database at `url` to read only: it takes
    /// no lease and drives nothing, so it works beside running workers (the
    /// `saga` command, a dashboard). `list`, `instance`, `status`, `info`,
    /// `history` and `result` read. Events and control calls are posted to
    /// the worker that drives the instance, which acts on them within
    /// moments: they return once posted, durably, and an event answers
    /// [`Sent::Posted`](crate::Sent::Posted). `start` answers
    /// [`Error::ReadOnly`]: start instances on a worker.
    #[cfg(feature = "postgres")]
    pub async fn connect_read_only(self, url: &str) -> Result<Engine> {
        self.connect_postgres(url, true).await
    }

    #[cfg(feature = "postgres")]
    async fn connect_postgres(mut self, url: &str, read_only: bool) -> Result<Engine> {
        let (schedules, runtime) = self.checked()?;
        let options = crate::store::PgOptions {
            url: url.to_owned(),
            schema: self.postgres_schema.clone(),
            lease: self.lease,
            timeout: self.store_timeout,
            read_only,
        };
        let store: Arc<dyn Store> = Arc::new(crate::store::PgStore::connect(options).await?);
        let journal = Journal::new(store, self.clock.clone(), self.store_timeout)?;
        if !read_only {
            crate::engine::queue_limits::reconcile(&journal, &self.queues).await?;
            // Rows of a release before migration 6 get their facts (and a
            // start time) from their journals, a batch at a time.
            let backfilled = journal.backfill_index().await?;
            if backfilled > 0 {
                tracing::info!(
                    instances = backfilled,
                    "backfilled the tags and facts of index entries"
                );
            }
        }
        self.build(journal, runtime, None, schedules)
    }

    /// The PostgreSQL schema that holds the engine's tables (default
    /// `saga`): several applications, or tests, share a database in
    /// schemas of their own. 1-63 characters of `[a-z0-9_]`.
    #[cfg(feature = "postgres")]
    pub fn postgres_schema(mut self, schema: &str) -> Self {
        schema.clone_into(&mut self.postgres_schema);
        self
    }

    /// How long a PostgreSQL worker's lease lasts without renewal (default
    /// 10 s, on the database's clock): after a worker dies, its instances
    /// wait this long before other workers resume them. At least 300 ms.
    #[cfg(feature = "postgres")]
    pub fn lease_time(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often a PostgreSQL worker looks for the instances of workers
    /// that are gone, for events and control calls posted to it, and (for
    /// `result()` and subscribers) at other workers' instances: default
    /// 200 ms. It is also told of posts and of ends at once (LISTEN/NOTIFY),
    /// so this is the fallback for a lost notification, and how soon a
    /// dead worker's instances are claimed once its lease ran out.
    #[cfg(feature = "postgres")]
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    /// An engine on a temporary store, removed when the engine is dropped.
    pub fn temporary(mut self) -> Result<Engine> {
        let (schedules, runtime) = self.checked()?;
        let store: Arc<dyn Store> = Arc::new(SledStore::temporary()?);
        let journal = Journal::new(store, self.clock.clone(), self.store_timeout)?;
        self.build(journal, runtime, None, schedules)
    }

    /// An engine on `store` (a store of the test suites, or one this crate
    /// does not know). Not a stable API: the store trait will change.
    #[doc(hidden)]
    pub fn open_store(mut self, store: Arc<dyn Store>) -> Result<Engine> {
        let (schedules, runtime) = self.checked()?;
        let journal = Journal::new(store, self.clock.clone(), self.store_timeout)?;
        self.build(journal, runtime, None, schedules)
    }

    fn build(
        self,
        journal: Journal,
        runtime: Handle,
        path: Option<PathBuf>,
        schedules: Arc<crate::schedule::Declared>,
    ) -> Result<Engine> {
        let queues = self.checked_queues()?;
        let journal = journal
            .with_caps(self.caps)
            .with_sealer(self.sealer)
            .with_event_dedup_window(self.event_dedup_window);
        // On a store shared by workers, an index entry is repaired by the
        // worker that claims its instance, and its facts backfilled on
        // connect (and a reader repairs nothing). Likewise the queues'
        // stored limits (a PostgreSQL worker reconciles them on connect).
        if !journal.read_only() && !journal.shared() {
            answered_now(crate::engine::queue_limits::reconcile(
                &journal,
                &self.queues,
            ))?;
            let (repaired, backfilled) = answered_now(journal.repair_on_open())?;
            if repaired > 0 {
                tracing::info!(instances = repaired, "rebuilt index entries from journals");
            }
            if backfilled > 0 {
                tracing::info!(
                    instances = backfilled,
                    "backfilled the tags and facts of index entries"
                );
            }
        }
        let mut core = Core::new(
            journal,
            self.clock,
            runtime,
            self.max_payload,
            self.services,
            self.poll,
        );
        core.random = self.random;
        core.faults = self.faults;
        let core = Arc::new(core);
        let runner = Arc::new(Runner::new(
            core,
            self.retention,
            path,
            queues,
            self.test_clock,
        ));
        let engine = Engine {
            handle: Arc::new(EngineHandle {
                runner: runner.clone(),
                schedules: schedules.clone(),
            }),
        };
        runner
            .core
            .kin
            .set(Arc::new(crate::instance::kin::Family(Arc::downgrade(
                &runner,
            ))));
        runner.register_all(self.workflows)?;
        if !runner.core.journal.read_only() {
            crate::engine::retention::spawn_sweeper(&runner);
            super::list_rebuild::spawn(&runner);
            crate::schedule::firing::spawn(&runner, &schedules);
        }
        crate::instance::inbox::spawn_inbox_reader(&runner);
        crate::run::dequeue::spawn_dispatcher(&runner);
        Ok(engine)
    }
}
