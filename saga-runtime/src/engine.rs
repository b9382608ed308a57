//! The engine: opens the store, holds the registered workflows, starts and
//! resumes instances.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use serde::Serialize;
use tokio::runtime::Handle;
use tokio::sync::{broadcast, watch};

use crate::clock::{Clock, SystemClock, from_millis, to_millis};
use crate::codec::encode_payload;
use crate::driver;
use crate::error::{Error, Result};
use crate::history::{Event, EventKind};
use crate::instance::{Instance, InstanceInfo, ListFilter, Run};
use crate::live::Live;
use crate::record::{InstanceRecord, PendingEvent};
use crate::status::Status;
use crate::store::{Batch, Flusher, Op, SledStore, Store};
use crate::subscription::Subscription;
use crate::workflow::{ErasedWorkflow, Workflow};

/// The default limit on an encoded workflow input, step output or event payload.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
/// How long finished instances are kept by default.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

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
/// engine.register(add_one);
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
    inner: Arc<EngineInner>,
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        self.inner.shut_down();
    }
}

/// Options of an engine before it opens.
pub struct EngineBuilder {
    clock: Arc<dyn Clock>,
    max_payload: usize,
    retention: Duration,
    workflows: Vec<Arc<dyn RegisteredWorkflow>>,
}

impl EngineBuilder {
    /// The clock the engine reads and sleeps on; [`crate::TestClock`] in tests.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The largest encoded workflow input, step output or event payload
    /// (default 1 MiB). Larger ones are refused before anything is stored.
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload = bytes.min(crate::codec::DECODE_LIMIT / 2);
        self
    }

    /// How long finished instances are kept (default 7 days).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Registers a workflow before the store opens, so its instances resume
    /// as soon as it does.
    pub fn register<W: Workflow>(mut self, workflow: W) -> Self {
        self.workflows.push(Arc::new(workflow));
        self
    }

    /// Opens (or creates, with mode 0700) the store in `path`.
    pub fn open(self, path: impl AsRef<Path>) -> Result<Engine> {
        let runtime = Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let store = SledStore::open(path.as_ref())?;
        self.build(Arc::new(store), runtime, Some(path.as_ref().to_owned()))
    }

    /// An engine on a temporary store, removed when the engine is dropped.
    pub fn temporary(self) -> Result<Engine> {
        let runtime = Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let store = SledStore::temporary()?;
        self.build(Arc::new(store), runtime, None)
    }

    fn build(
        self,
        store: Arc<dyn Store>,
        runtime: Handle,
        path: Option<PathBuf>,
    ) -> Result<Engine> {
        let (events, _) = broadcast::channel(4096);
        let flusher = Flusher::start(store.clone(), events.clone())?;
        let inner = Arc::new(EngineInner {
            store,
            flusher,
            clock: self.clock,
            runtime,
            max_payload: self.max_payload,
            retention: self.retention,
            registry: RwLock::new(HashMap::new()),
            live: Mutex::new(HashMap::new()),
            cursors: Mutex::new(HashMap::new()),
            events,
            ended: watch::Sender::new(0),
            terminal_written: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            tasks: Mutex::new(Vec::new()),
            store_failures: Mutex::new(HashMap::new()),
            path,
        });
        let engine = Engine {
            handle: Arc::new(EngineHandle {
                inner: inner.clone(),
            }),
        };
        for workflow in self.workflows {
            inner.register(workflow);
        }
        crate::retention::spawn_sweeper(&inner);
        Ok(engine)
    }
}

impl Engine {
    /// Opens (or creates) the store in `path` with the default options.
    /// Instances that were running when the last process died resume as
    /// soon as their workflow is registered.
    pub fn open(path: impl AsRef<Path>) -> Result<Engine> {
        Engine::builder().open(path)
    }

    /// An engine on a temporary store, for tests and examples.
    pub fn temporary() -> Result<Engine> {
        Engine::builder().temporary()
    }

    /// Options: clock, payload limit, retention.
    pub fn builder() -> EngineBuilder {
        EngineBuilder {
            clock: Arc::new(SystemClock),
            max_payload: DEFAULT_MAX_PAYLOAD_BYTES,
            retention: DEFAULT_RETENTION,
            workflows: Vec::new(),
        }
    }

    /// Makes `workflow` runnable here, and resumes its unfinished instances.
    pub fn register<W: Workflow>(&self, workflow: W) {
        self.inner().register(Arc::new(workflow));
    }

    /// Starts an instance of `workflow` with a caller-chosen `id` (1–100
    /// characters of `[A-Za-z0-9_-]`, not starting with `-`).
    ///
    /// Starting an id that exists returns the existing instance and runs
    /// nothing twice. Registers the workflow if it is not yet.
    pub async fn start<W: Workflow>(
        &self,
        workflow: W,
        id: &str,
        input: W::Input,
    ) -> Result<Run<W::Output>> {
        validate_id(id)?;
        let inner = self.inner();
        let name = workflow.name();
        if !inner.is_registered(name) {
            inner.register(Arc::new(workflow));
        }
        let input = inner.encode_limited(&input, || format!("input of instance {id:?}"))?;
        let now = inner.now_millis();
        let record = InstanceRecord {
            workflow: name.to_owned(),
            input,
            status: Status::Queued,
            created_at: now,
            updated_at: now,
            finished_at: None,
            output: None,
            failure: None,
            rollback: None,
        };
        let created = inner.create(id, record)?;
        if created {
            inner.flush().await?;
            inner.spawn_driver(id);
        } else {
            let existing = inner.record(id)?;
            if existing.workflow != name {
                return Err(Error::InstanceIdInUse {
                    id: id.to_owned(),
                    existing: existing.workflow,
                    requested: name.to_owned(),
                });
            }
        }
        Ok(Run::new(Instance::new(inner.clone(), id.to_owned())))
    }

    /// A handle on an existing instance.
    pub fn instance(&self, id: &str) -> Result<Instance> {
        validate_id(id)?;
        self.inner().record(id)?;
        Ok(Instance::new(self.inner().clone(), id.to_owned()))
    }

    /// The instances that match `filter`, in id order. An instance whose
    /// record is corrupt is left out (with a warning in the log) rather
    /// than hiding the others; `engine.instance(id)` answers
    /// [`Error::Corrupt`] for it.
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<InstanceInfo>> {
        let inner = self.inner();
        let mut out = Vec::new();
        for id in inner.store.instance_ids()? {
            let info = match inner.store.instance(&id) {
                Ok(Some(record)) => InstanceInfo::from_record(inner, &id, &record),
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(instance = %id, error = %e, "skipping a corrupt instance record");
                    continue;
                }
            };
            if filter.matches(&info) {
                out.push(info);
            }
        }
        Ok(out)
    }

    /// A stream of lifecycle events of every instance. An event is sent
    /// only after it is durable.
    pub fn subscribe(&self) -> Subscription {
        Subscription::new(self.inner().events.subscribe())
    }

    /// Sends an event to an instance. It is stored durably before this
    /// returns and delivered to the instance's `wait_for_event` for
    /// `event_type`, now or when the workflow gets there.
    pub async fn send_event<P: Serialize + ?Sized>(
        &self,
        id: &str,
        event_type: &str,
        payload: &P,
    ) -> Result<()> {
        validate_id(id)?;
        let inner = self.inner();
        let payload = inner.encode_limited(payload, || {
            format!("payload of event {event_type:?} for instance {id:?}")
        })?;
        let seq = inner.store.unique_id()?;
        let now = inner.now_millis();
        inner.write(id, |txn| {
            let status = txn.record()?.status;
            if status.is_terminal() {
                return Err(Error::InvalidState {
                    id: id.to_owned(),
                    status,
                    operation: "send an event to it",
                });
            }
            txn.put(Op::PutPendingEvent(
                id.to_owned(),
                seq,
                PendingEvent {
                    event_type: event_type.to_owned(),
                    payload,
                    sent_at: now,
                },
            ));
            txn.event(EventKind::EventReceived {
                event_type: event_type.to_owned(),
            });
            Ok(())
        })?;
        inner.flush().await?;
        if let Some(live) = inner.live(id) {
            live.event_sent.notify_waiters();
        }
        Ok(())
    }

    /// Removes finished instances older than the retention period now
    /// (the engine also does this on its own, hourly on its clock); returns
    /// how many it removed.
    pub async fn sweep_expired(&self) -> Result<usize> {
        crate::retention::sweep(self.inner()).await
    }

    /// Stops every running instance (they resume when the store is opened
    /// again), flushes, and releases the store: once this returns, the
    /// directory can be opened again (unless other clones of the engine or
    /// instance handles still hold it open).
    pub async fn close(self) {
        let inner = self.inner().clone();
        for task in inner.shut_down() {
            // Aborted tasks end with a cancellation error; that is the point.
            let _ = task.await;
        }
        drop(self);
        let path = inner.path.clone();
        let last = Arc::strong_count(&inner) == 1;
        drop(inner);
        if let (true, Some(path)) = (last, path) {
            crate::store::wait_until_released(&path, Duration::from_secs(5)).await;
        }
    }

    fn inner(&self) -> &Arc<EngineInner> {
        &self.handle.inner
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

/// Checks an instance id: 1–100 characters of `[A-Za-z0-9_-]`, first not `-`.
pub(crate) fn validate_id(id: &str) -> Result<()> {
    let reason = if id.is_empty() {
        Some("it is empty")
    } else if id.len() > 100 {
        Some("it is longer than 100 characters")
    } else if id.starts_with('-') {
        Some("it starts with '-'")
    } else if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Some("it contains a character outside [A-Za-z0-9_-]")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidInstanceId {
            id: id.chars().take(120).collect(),
            reason,
        }),
        None => Ok(()),
    }
}

/// A workflow as the registry holds it.
pub(crate) trait RegisteredWorkflow: ErasedWorkflow {
    fn workflow_name(&self) -> &'static str;
}

impl<W: Workflow> RegisteredWorkflow for W {
    fn workflow_name(&self) -> &'static str {
        self.name()
    }
}

pub(crate) struct EngineInner {
    pub(crate) store: Arc<dyn Store>,
    flusher: Flusher,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) runtime: Handle,
    pub(crate) max_payload: usize,
    pub(crate) retention: Duration,
    registry: RwLock<HashMap<&'static str, Arc<dyn RegisteredWorkflow>>>,
    live: Mutex<HashMap<String, Arc<Live>>>,
    /// Per instance: the lock that orders its writes, holding its next
    /// history sequence number once known.
    cursors: Mutex<HashMap<String, Arc<Mutex<Option<u64>>>>>,
    events: broadcast::Sender<Event>,
    /// Bumped after an instance's end is durable; `result()` waits on it.
    pub(crate) ended: watch::Sender<u64>,
    terminal_written: AtomicBool,
    closed: AtomicBool,
    /// Instances stopped by a store failure in this process, with the
    /// error: `result()` reports it instead of waiting for a reopen.
    store_failures: Mutex<HashMap<String, String>>,
    /// The store's directory (`None` for a temporary store).
    path: Option<PathBuf>,
    /// Drivers, step tasks and the retention sweeper.
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// One atomic write to an instance's records, with the history events it
/// appends.
pub(crate) struct Txn<'a> {
    engine: &'a EngineInner,
    id: &'a str,
    now: u64,
    next_seq: u64,
    batch: Batch,
    events: Vec<Event>,
    record: Option<InstanceRecord>,
    record_dirty: bool,
}

impl Txn<'_> {
    /// The instance's record, to read or change.
    pub(crate) fn record(&mut self) -> Result<&mut InstanceRecord> {
        if self.record.is_none() {
            self.record = Some(self.engine.record(self.id)?);
        }
        self.record_dirty = true;
        // Just filled above.
        self.record.as_mut().ok_or(Error::Closed)
    }

    /// Appends a history event; returns its sequence number.
    pub(crate) fn event(&mut self, kind: EventKind) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.batch.push(Op::PutHistory(
            self.id.to_owned(),
            seq,
            crate::record::HistoryRecord {
                at: self.now,
                kind: kind.clone(),
            },
        ));
        self.events.push(Event {
            instance: self.id.to_owned(),
            seq,
            at: from_millis(self.now),
            kind,
        });
        seq
    }

    /// The sequence number the next event will get.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Deletes history from `seq` on; the next event gets `seq`.
    pub(crate) fn truncate_history(&mut self, seq: u64) -> Result<()> {
        for (i, _) in self.engine.store.history(self.id)? {
            if i >= seq {
                self.batch.push(Op::DeleteHistory(self.id.to_owned(), i));
            }
        }
        self.next_seq = self.next_seq.min(seq);
        Ok(())
    }

    pub(crate) fn put(&mut self, op: Op) {
        self.batch.push(op);
    }

    pub(crate) fn now(&self) -> u64 {
        self.now
    }
}

impl EngineInner {
    pub(crate) fn now_millis(&self) -> u64 {
        to_millis(self.clock.now())
    }

    pub(crate) fn record(&self, id: &str) -> Result<InstanceRecord> {
        self.store
            .instance(id)?
            .ok_or_else(|| Error::UnknownInstance { id: id.to_owned() })
    }

    pub(crate) fn encode_limited<T: Serialize + ?Sized>(
        &self,
        value: &T,
        what: impl Fn() -> String,
    ) -> Result<Vec<u8>> {
        let bytes = encode_payload(value).map_err(|detail| Error::Encode {
            what: what(),
            detail,
        })?;
        if bytes.len() > self.max_payload {
            return Err(Error::PayloadTooLarge {
                what: what(),
                size: bytes.len(),
                limit: self.max_payload,
            });
        }
        Ok(bytes)
    }

    fn cursor(&self, id: &str) -> Arc<Mutex<Option<u64>>> {
        lock(&self.cursors)
            .entry(id.to_owned())
            .or_default()
            .clone()
    }

    /// Notes that a store failure stopped instance `id`, and wakes
    /// `result()` callers so they can say so.
    pub(crate) fn stopped_by_store(&self, id: &str, error: &Error) {
        lock(&self.store_failures).insert(id.to_owned(), error.to_string());
        self.ended.send_modify(|n| *n += 1);
    }

    /// The store failure that stopped instance `id` in this process, if any.
    pub(crate) fn store_failure(&self, id: &str) -> Option<String> {
        lock(&self.store_failures).get(id).cloned()
    }

    pub(crate) fn forget_cursor(&self, id: &str) {
        lock(&self.cursors).remove(id);
    }

    /// Forgets the cursor of instance `id` unless a writer holds it (clones
    /// are only made under the map's lock, so the count read there is
    /// exact). The next write reads the sequence number from the store
    /// again, so finished instances and unknown ids leave no entry behind.
    pub(crate) fn release_cursor(&self, id: &str) {
        let mut cursors = lock(&self.cursors);
        if cursors.get(id).is_some_and(|c| Arc::strong_count(c) == 1) {
            cursors.remove(id);
        }
    }

    /// Applies `f`'s writes to instance `id` atomically. Writes of one
    /// instance are serialized, so history has no gaps; its events reach
    /// subscribers once a flush makes them durable.
    pub(crate) fn write<R>(
        &self,
        id: &str,
        f: impl FnOnce(&mut Txn<'_>) -> Result<R>,
    ) -> Result<R> {
        let cursor = self.cursor(id);
        let mut next = lock(&cursor);
        let first = match *next {
            Some(seq) => seq,
            None => self.store.next_history_seq(id)?,
        };
        let mut txn = Txn {
            engine: self,
            id,
            now: self.now_millis(),
            next_seq: first,
            batch: Batch::new(),
            events: Vec::new(),
            record: None,
            record_dirty: false,
        };
        let result = match f(&mut txn) {
            Ok(result) => result,
            Err(error) => {
                if matches!(error, Error::UnknownInstance { .. }) {
                    drop(next);
                    drop(cursor);
                    self.release_cursor(id);
                }
                return Err(error);
            }
        };
        let mut ended = false;
        if let (true, Some(mut record)) = (txn.record_dirty, txn.record.take()) {
            record.updated_at = txn.now;
            ended = record.status.is_terminal();
            txn.batch
                .push(Op::PutInstance(id.to_owned(), Box::new(record)));
        }
        self.store.apply(std::mem::take(&mut txn.batch))?;
        *next = Some(txn.next_seq);
        if ended {
            self.terminal_written.store(true, Ordering::SeqCst);
        }
        for event in txn.events {
            self.flusher.publish_when_durable(event);
        }
        Ok(result)
    }

    /// Stores a new instance unless the id exists; `true` if it was new.
    fn create(&self, id: &str, record: InstanceRecord) -> Result<bool> {
        let cursor = self.cursor(id);
        let mut next = lock(&cursor);
        let first = match *next {
            Some(seq) => seq,
            None => self.store.next_history_seq(id)?,
        };
        let kind = EventKind::InstanceCreated {
            workflow: record.workflow.clone(),
        };
        let mut batch = Batch::new();
        batch.push(Op::PutHistory(
            id.to_owned(),
            first,
            crate::record::HistoryRecord {
                at: record.created_at,
                kind: kind.clone(),
            },
        ));
        let created = self.store.create_instance(id, &record, batch)?;
        if created {
            *next = Some(first + 1);
            self.flusher.publish_when_durable(Event {
                instance: id.to_owned(),
                seq: first,
                at: from_millis(record.created_at),
                kind,
            });
        }
        Ok(created)
    }

    /// Waits until everything written so far is on disk.
    pub(crate) async fn flush(&self) -> Result<()> {
        self.flusher.flush().await?;
        if self.terminal_written.swap(false, Ordering::SeqCst) {
            self.ended.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    pub(crate) fn workflow(&self, name: &str) -> Option<Arc<dyn RegisteredWorkflow>> {
        self.registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    pub(crate) fn is_registered(&self, name: &str) -> bool {
        self.workflow(name).is_some()
    }

    fn register(self: &Arc<Self>, workflow: Arc<dyn RegisteredWorkflow>) {
        let name = workflow.workflow_name();
        self.registry
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name, workflow);
        self.resume_instances_of(name);
    }

    /// Recovery: every unfinished instance of `workflow` gets a driver.
    fn resume_instances_of(self: &Arc<Self>, workflow: &str) {
        let ids = match self.store.instance_ids() {
            Ok(ids) => ids,
            Err(e) => {
                tracing::error!(error = %e, "could not list instances to resume");
                return;
            }
        };
        for id in ids {
            match self.store.instance(&id) {
                Ok(Some(record))
                    if record.workflow == workflow && record.status.resumes_on_open() =>
                {
                    self.spawn_driver(&id);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(instance = %id, error = %e, "not resuming an instance whose record is corrupt");
                }
            }
        }
    }

    pub(crate) fn live(&self, id: &str) -> Option<Arc<Live>> {
        lock(&self.live).get(id).cloned()
    }

    /// Runs the instance unless a driver already does.
    pub(crate) fn spawn_driver(self: &Arc<Self>, id: &str) {
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        let live = {
            let mut running = lock(&self.live);
            if running.contains_key(id) {
                return;
            }
            let live = Arc::new(Live::new());
            running.insert(id.to_owned(), live.clone());
            lock(&self.store_failures).remove(id);
            live
        };
        let engine = self.clone();
        let id: Arc<str> = Arc::from(id);
        let task = self.runtime.spawn(async move {
            let suspended = driver::drive(&engine, &id, &live).await;
            lock(&engine.live).remove(&*id);
            live.mark_stopped();
            if suspended {
                driver::after_suspend(&engine, &id);
            }
        });
        self.track(task);
    }

    /// Keeps a task's handle so shutdown can stop it and `close` wait for it.
    pub(crate) fn track(&self, task: tokio::task::JoinHandle<()>) {
        let mut tasks = lock(&self.tasks);
        if tasks.len() >= 64 && tasks.len().is_power_of_two() {
            tasks.retain(|t| !t.is_finished());
        }
        tasks.push(task);
        if self.closed.load(Ordering::SeqCst) {
            for task in tasks.iter() {
                task.abort();
            }
        }
    }

    /// Stops every driver; returns their tasks to wait on.
    fn shut_down(&self) -> Vec<tokio::task::JoinHandle<()>> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Vec::new();
        }
        let tasks: Vec<_> = lock(&self.tasks).drain(..).collect();
        for task in &tasks {
            task.abort();
        }
        self.flusher.stop();
        tasks
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// Locks a mutex, going on after a panic elsewhere: the guarded maps stay
/// consistent at every point a panic could occur.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
