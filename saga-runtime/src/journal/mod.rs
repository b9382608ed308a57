//! The journal: the only code that changes an instance's durable state.
//!
//! Every change is one record (a named intent, [`Change`]) appended to the
//! instance's journal with one store write. An instance's state (status,
//! slots, compensations, pending events) is folded from its journal and
//! cached in memory while the instance is live; the index that `list()`
//! reads is derived from it, written without waiting for a flush, and
//! repaired from the journals on open wherever it lags.
//!
//! A record is durable once a flush that began after its write returns
//! ([`Journal::flush`], group-committed by the flusher); lifecycle events
//! reach subscribers only then.

mod backfill;
mod change;
pub(crate) mod command;
mod facts;
mod fold;
pub(crate) mod handover;
mod history;
mod index;
mod machine;
mod metered;
mod page;
pub(crate) mod queued;
pub(crate) mod runs;
mod schedules;
mod state;
mod summaries;
pub(crate) mod tags;
mod tail;
pub(crate) mod upgrade;
mod workers;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, watch};

pub(crate) use change::{Change, End, Entry};
pub(crate) use facts::Facts;
pub(crate) use index::{Indexed, Summary, waits_until};
pub(crate) use state::{CompensationState, InstanceState, SlotKind, SlotRecord, SlotState};
pub(crate) use tail::Tail;

use crate::codec::Payload;
use crate::error::{Error, Result};
use crate::lock::lock;
use crate::model::history::Event;
use crate::model::status::Status;
use crate::names::id::InstanceId;
use crate::seal::Sealer;
use crate::store::{Flusher, Store};
use crate::time::clock::{Clock, from_millis, to_millis};

pub(crate) struct Journal {
    store: Arc<dyn Store>,
    flusher: Flusher,
    clock: Arc<dyn Clock>,
    /// Per instance: the lock that orders its writes, holding its folded
    /// state once loaded.
    cache: Mutex<HashMap<InstanceId, Arc<Mutex<Cached>>>>,
    /// The instances whose state stays cached though nobody holds it, the
    /// least recently let go first (on a store of one process: see
    /// [`Journal::evict_if_idle`]).
    idle: Mutex<VecDeque<InstanceId>>,
    /// What an instance may hold before events sent to it are refused.
    caps: InstanceCaps,
    events: broadcast::Sender<Event>,
    /// Bumped after an instance's end (or its block) is durable; `result()`
    /// waits on it.
    ended: watch::Sender<u64>,
    outcome_written: AtomicBool,
    /// How long a call waits for the store (or for another worker's
    /// answer to a post) before it gives up.
    patience: std::time::Duration,
    /// Seals the user values of every record written, opens them on read.
    sealer: Sealer,
    /// The places of instances started on a queue.
    places: queued::Places,
    /// Instances whose end was written, with the sequence number of its
    /// record (`None`: removed whole): once a flush after it returns, their
    /// index entry agrees with their journal for good (unless a record
    /// came after), and the store's mark that it may lag goes
    /// ([`Journal::clear_settled_marks`]).
    ended_marks: Mutex<Vec<(InstanceId, Option<u64>)>>,
    /// How long an event id is remembered across runs (`runs`).
    event_dedup_window: std::time::Duration,
}

#[derive(Default)]
struct Cached {
    /// `None` until loaded (or after a failed write, to load again).
    loaded: Option<Loaded>,
    /// Kept in memory while a driver runs the instance.
    keep: bool,
    /// Moves whenever `loaded` is let go: a load that began before is
    /// stale, and is not installed.
    epoch: u64,
    /// In [`Journal::idle`].
    idle: bool,
}

/// How many idle instances keep their state in memory: an instance that
/// hibernates and is sent events (or read) often is not folded from its
/// whole journal again at each, so an event costs the same whether it is
/// the first or the ten-thousandth. Each costs about a kilobyte and a half
/// for a state of one slot (more with more slots): 256 is many more
/// instances than are sent events at once, and a miss costs one read of
/// the journal.
const IDLE_CACHED: usize = 256;

/// What one instance may hold before the journal refuses the events sent
/// to it ([`Error::InstanceFull`]): its state is in memory while it runs,
/// and its journal is folded whenever it is loaded.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InstanceCaps {
    /// Events sent and not yet taken by a wait.
    pub(crate) pending_events: usize,
    /// Records in its journal.
    pub(crate) journal_records: u64,
}

impl InstanceCaps {
    /// Whether `change` is an event that `loaded` has no room for. An
    /// event that a wait waits for now is taken at once, so pending events
    /// of other types do not keep it out.
    fn refuse(&self, id: &str, loaded: &Loaded, change: &Change) -> Result<()> {
        let (Change::EventReceived { event_type, .. }
        | Change::EventReceivedWithId { event_type, .. }) = change
        else {
            return Ok(());
        };
        let full = |limit: u64, of: &'static str| Error::InstanceFull {
            id: id.to_owned(),
            limit,
            of,
        };
        // The records of its current run: a long loop that continues as
        // new begins each run empty.
        let records = loaded.next_seq - handover::start(handover::run_of(loaded.next_seq));
        if records >= self.journal_records {
            return Err(full(self.journal_records, "journal records"));
        }
        let state = &loaded.state;
        let awaited = state.slots.values().any(|slot| {
            matches!(&slot.state, SlotState::Waiting { event_type: awaited, .. } if awaited == event_type)
        });
        if !awaited && state.pending.len() >= self.pending_events {
            return Err(full(self.pending_events as u64, "pending events"));
        }
        Ok(())
    }
}

impl Cached {
    /// Lets go of the state (a write failed, the instance was removed):
    /// the next call loads it again.
    fn invalidate(&mut self) {
        self.loaded = None;
        self.epoch += 1;
    }
}

/// A cache entry in use: while it is held the entry is not evicted, and
/// when it goes (however the call ends, a dropped future included) the
/// entry is evicted unless kept.
struct Held<'a> {
    journal: &'a Journal,
    id: &'a str,
    entry: Arc<Mutex<Cached>>,
}

impl Held<'_> {
    fn cached(&self) -> std::sync::MutexGuard<'_, Cached> {
        lock(&self.entry)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.journal.evict_if_idle(self.id, 1);
    }
}

struct Loaded {
    state: InstanceState,
    next_seq: u64,
}

impl Journal {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        store_timeout: std::time::Duration,
    ) -> Result<Journal> {
        page::note_opened();
        let (events, _) = broadcast::channel(4096);
        let flusher = Flusher::start(store.clone(), events.clone(), store_timeout)?;
        Ok(Journal {
            store,
            flusher,
            clock,
            cache: Mutex::new(HashMap::new()),
            idle: Mutex::new(VecDeque::new()),
            caps: InstanceCaps {
                pending_events: usize::MAX,
                journal_records: u64::MAX,
            },
            events,
            ended: watch::Sender::new(0),
            outcome_written: AtomicBool::new(false),
            patience: store_timeout,
            sealer: Sealer::default(),
            places: queued::Places::default(),
            ended_marks: Mutex::default(),
            event_dedup_window: runs::DEFAULT_EVENT_DEDUP_WINDOW,
        })
    }

    /// Seals user values with the engine's codec (`crate::seal`).
    pub(crate) fn with_sealer(mut self, sealer: Sealer) -> Journal {
        self.sealer = sealer;
        self
    }

    /// The engine's codec, for the records that carry user values.
    pub(crate) fn sealer(&self) -> &Sealer {
        &self.sealer
    }

    /// Hands over to the next run only the event ids sent less than
    /// `window` before (`runs`).
    pub(crate) fn with_event_dedup_window(mut self, window: std::time::Duration) -> Journal {
        self.event_dedup_window = window;
        self
    }

    /// How long an event id is remembered across runs.
    pub(crate) fn event_dedup_window(&self) -> std::time::Duration {
        self.event_dedup_window
    }

    /// Refuses events to an instance that holds as much as `caps` allows.
    pub(crate) fn with_caps(mut self, caps: InstanceCaps) -> Journal {
        self.caps = caps;
        self
    }

    pub(crate) fn now_millis(&self) -> u64 {
        to_millis(self.clock.now())
    }

    /// How long a call waits for the store, or for another worker's
    /// answer to what it posted.
    pub(crate) fn patience(&self) -> std::time::Duration {
        self.patience
    }

    pub(crate) fn subscribe_events(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    pub(crate) fn subscribe_ends(&self) -> watch::Receiver<u64> {
        self.ended.subscribe()
    }

    /// Wakes `result()` callers (an instance stopped without ending).
    pub(crate) fn notify_ended(&self) {
        self.ended.send_modify(|n| *n += 1);
    }

    /// The cache entry of `id`, held (see [`Held`]).
    fn hold<'a>(&'a self, id: &'a str) -> Held<'a> {
        let entry = lock(&self.cache)
            .entry(InstanceId::stored(id))
            .or_default()
            .clone();
        Held {
            journal: self,
            id,
            entry,
        }
    }

    /// The cache entry of `id`, held, with the instance's state loaded
    /// when it exists (`loaded` stays `None` when it does not). No lock is
    /// held while the store answers: a load that a write or a removal
    /// overtook is dropped and made again.
    async fn hold_loaded<'a>(&'a self, id: &'a str) -> Result<Held<'a>> {
        let held = self.hold(id);
        loop {
            let (loaded, epoch) = {
                let cached = held.cached();
                (cached.loaded.is_some(), cached.epoch)
            };
            if loaded {
                return Ok(held);
            }
            let loaded = self.load(id).await?;
            let mut cached = held.cached();
            if cached.epoch == epoch {
                if cached.loaded.is_none() {
                    cached.loaded = loaded;
                    // A crash came between a hand-over and its next run.
                    self.begin_pending_run(id, &mut cached)?;
                }
                drop(cached);
                return Ok(held);
            }
        }
    }

    /// Like [`Journal::hold_loaded`], for a caller that cannot wait: the
    /// state of an instance a driver keeps is in memory; otherwise a
    /// store that answers at once (sled) loads it, and one that would wait
    /// (a server) is an error.
    fn hold_loaded_now<'a>(&'a self, id: &'a str) -> Result<Held<'a>> {
        crate::store::now_or_never(self.hold_loaded(id)).unwrap_or_else(|| {
            Err(Error::Store(format!(
                "the state of instance {id:?} is not in memory and the store cannot read it without waiting"
            )))
        })
    }

    /// Forgets the cached state of `id` unless it is kept or someone holds
    /// it besides the `held` clones of the caller (clones are made only
    /// under the map's lock, so the count is exact).
    ///
    /// While this engine is the only writer of an instance (on a store of
    /// one process; on a store shared by workers, while this worker owns
    /// it: fencing keeps every other worker from writing it, and a worker
    /// that lost it is fenced whole), an idle state stays true: the
    /// [`IDLE_CACHED`] let go most recently stay in memory. Another
    /// worker's instance (or any, on an engine that only reads) is read
    /// again.
    fn evict_if_idle(&self, id: &str, held: usize) {
        let mut cache = lock(&self.cache);
        let Some(entry) = cache.get(id) else { return };
        if Arc::strong_count(entry) != 1 + held {
            return;
        }
        let mut cached = lock(entry);
        if cached.keep {
            return;
        }
        let others_write = self.store.read_only() || (self.store.shared() && !self.store.owns(id));
        if others_write || cached.loaded.is_none() {
            drop(cached);
            cache.remove(id);
            return;
        }
        if cached.idle {
            return;
        }
        cached.idle = true;
        drop(cached);
        let mut idle = lock(&self.idle);
        idle.push_back(InstanceId::stored(id));
        while idle.len() > IDLE_CACHED {
            let Some(oldest) = idle.pop_front() else {
                break;
            };
            let Some(entry) = cache.get(&oldest) else {
                continue;
            };
            let in_use = Arc::strong_count(entry) > 1;
            let mut cached = lock(entry);
            cached.idle = false;
            // One in use is queued again when it is let go.
            if !in_use && !cached.keep {
                drop(cached);
                cache.remove(&oldest);
            }
        }
    }

    /// Keeps the state of `id` in memory (a driver runs it) or lets it go.
    pub(crate) fn keep(&self, id: &str, keep: bool) {
        self.hold(id).cached().keep = keep;
    }

    /// Stores a new instance unless the id exists (`true` if it was new),
    /// then appends the change `then` decides on (given the state, and
    /// whether it was just created) under the instance's lock, before any
    /// other write of the instance: start-with-event stores the instance
    /// and its event before a driver can run it. A new instance's state
    /// stays cached when `keep` (a driver is about to run it), so the
    /// driver does not fold its journal again.
    ///
    /// With `queue`, the instance is created waiting in that queue
    /// (`CreatedOnQueue`): no driver runs it before it takes a slot.
    pub(crate) async fn create_then<R>(
        &self,
        id: &str,
        workflow: &str,
        input: Payload,
        queue: Option<&queued::Enqueue>,
        keep: bool,
        then: impl FnOnce(&InstanceState, bool) -> Result<(Option<Change>, R)>,
    ) -> Result<(bool, R)> {
        let held = self.hold(id);
        let at = self.now_millis();
        let workflow = workflow.to_owned();
        let change = match queue {
            None => Change::Created { workflow, input },
            Some(queue) => Change::CreatedOnQueue {
                workflow,
                input,
                queue: queue.queue.clone(),
                key: queue.key.clone(),
                priority: queue.priority,
                order: self.places.next(at),
            },
        };
        let record = Entry { at, change };
        let mut state = None;
        let events = machine::apply(&mut state, 0, &record).map_err(|e| corrupt(id, 0, e))?;
        let Some(state) = state else {
            return Err(corrupt(id, 0, "the first record made no instance".into()));
        };
        let indexed = Indexed::of(&state, 0);
        let created = self
            .store
            .create(id, &indexed.row(), &self.sealer.encode_record(&record)?)
            .await?;
        let held = if created {
            let mut cached = held.cached();
            self.publish(id, &state, record.at, events);
            // A call that raced the create may have loaded it (and written
            // to it) already: its state is the newer one.
            if cached.loaded.is_none() {
                cached.loaded = Some(Loaded { state, next_seq: 1 });
            }
            cached.keep = keep;
            drop(cached);
            held
        } else {
            drop(held);
            self.hold_loaded(id).await?
        };
        let mut cached = held.cached();
        let answer = self.write_cached(id, &mut cached, |state| then(state, created))?;
        Ok((created, answer))
    }

    /// Appends the change `f` decides on, given the instance's state, and
    /// returns `f`'s answer. Writes of one instance are serialized. Loads
    /// the state first when it is not in memory, without holding a lock
    /// (or a thread) while the store answers.
    pub(crate) async fn write<R>(
        &self,
        id: &str,
        f: impl FnOnce(&InstanceState) -> Result<(Option<Change>, R)>,
    ) -> Result<R> {
        let held = self.hold_loaded(id).await?;
        let mut cached = held.cached();
        self.write_cached(id, &mut cached, f)
    }

    /// Like [`Journal::write`], from code that cannot wait: a driver
    /// writing the instance it runs (and keeps in memory), a step's start
    /// recorded when the step is called.
    pub(crate) fn write_kept<R>(
        &self,
        id: &str,
        f: impl FnOnce(&InstanceState) -> Result<(Option<Change>, R)>,
    ) -> Result<R> {
        let held = self.hold_loaded_now(id)?;
        let mut cached = held.cached();
        self.write_cached(id, &mut cached, f)
    }

    /// The body of a write, under the instance's lock, its state loaded.
    fn write_cached<R>(
        &self,
        id: &str,
        cached: &mut Cached,
        f: impl FnOnce(&InstanceState) -> Result<(Option<Change>, R)>,
    ) -> Result<R> {
        self.begin_pending_run(id, cached)?;
        let Some(loaded) = cached.loaded.as_mut() else {
            return Err(Error::UnknownInstance { id: id.to_owned() });
        };
        let (change, answer) = f(&loaded.state)?;
        let Some(change) = change else {
            return Ok(answer);
        };
        self.caps.refuse(id, loaded, &change)?;
        // On a store shared by workers only the instance's owner writes;
        // the engine posts to it instead, so this is a guard: a write to
        // another's instance would fence this whole worker.
        if !self.store.owns(id) {
            cached.invalidate();
            return Err(Error::ReadOnly {
                what: format!(
                    "a write to instance {id:?}, which another worker drives (post to it instead)"
                ),
            });
        }
        // An instance that ended takes only what runs it again (or, for a
        // completed child, undoes it). A driver
        // that raced a control call (an event woke it as a terminate was
        // written) finds out here, before it records anything more.
        if loaded.state.status.is_terminal()
            && !matches!(
                change,
                Change::Restarted { .. } | Change::RollbackRetried | Change::Recalled { .. }
            )
            && !is_parent_link(&change)
        {
            return Err(Error::InvalidState {
                id: id.to_owned(),
                status: loaded.state.status,
                operation: command::RECORD_MORE,
            });
        }
        let seq = loaded.next_seq;
        let record = Entry {
            at: self.now_millis(),
            change,
        };
        let status_before = loaded.state.status;
        let wake_before = index::next_wake(&loaded.state);
        // Applied first, so a change that does not fit the state is never
        // stored; a failed store write loads the state again.
        let applied = machine::apply_to_state(&mut loaded.state, seq, &record);
        let events = match applied {
            Ok(events) => events,
            Err(e) => {
                cached.invalidate();
                return Err(corrupt(id, seq, e));
            }
        };
        let bytes = match self.sealer.encode_record(&record) {
            Ok(bytes) => bytes,
            Err(e) => {
                cached.invalidate();
                return Err(e);
            }
        };
        let state = &loaded.state;
        let written = if state.status == status_before
            && !record.change.reindexes()
            && index::next_wake(state) == wake_before
        {
            self.store.append(id, seq, &bytes)
        } else {
            // The index says which instances must run: it changes with the
            // record (on a shared store, in the same statement).
            let indexed = Indexed::of(state, seq);
            self.store.append_indexed(id, seq, &bytes, &indexed.row())
        };
        if let Err(e) = written {
            cached.invalidate();
            return Err(e);
        }
        loaded.next_seq = seq + 1;
        let state = &loaded.state;
        metered::written(state, status_before, &record.change, record.at);
        if state.status != status_before
            && (state.status.is_terminal() || state.status == Status::Blocked)
        {
            self.outcome_written.store(true, Ordering::SeqCst);
        }
        if state.status != status_before && state.status.is_terminal() {
            self.note_settling(id, Some(seq));
        }
        self.publish(id, state, record.at, events);
        // A hand-over: the next run begins at once, under the same lock.
        self.begin_pending_run(id, cached)?;
        Ok(answer)
    }

    /// Appends `change` unconditionally, to an instance a driver keeps
    /// (see [`Journal::write_kept`]).
    pub(crate) fn append_kept(&self, id: &str, change: Change) -> Result<()> {
        self.write_kept(id, |_| Ok((Some(change), ())))
    }

    /// Hands a write to the flusher: its events reach subscribers once it
    /// is durable.
    fn publish(
        &self,
        id: &str,
        state: &InstanceState,
        at: u64,
        events: Vec<crate::model::history::EventKind>,
    ) {
        let first = state.events - events.len() as u64;
        let events = events
            .into_iter()
            .enumerate()
            .map(|(i, kind)| Event {
                instance: id.to_owned(),
                seq: first + i as u64,
                at: from_millis(at),
                kind,
            })
            .collect();
        // None once the engine closed: the write is in the store, and the
        // flush on close (or sled's own) makes it durable.
        let _ = self.flusher.written(events);
    }

    /// Waits until every write whose ticket was taken so far is durable,
    /// without asking for a flush when none is needed.
    pub(crate) async fn durable_so_far(&self) -> Result<()> {
        self.flusher.durable(self.flusher.latest_ticket()).await
    }

    /// Waits until everything written so far is durable.
    pub(crate) async fn flush(&self) -> Result<()> {
        let ended = std::mem::take(&mut *lock(&self.ended_marks));
        self.flusher.flush().await?;
        self.clear_settled_marks(ended);
        if self.outcome_written.swap(false, Ordering::SeqCst) {
            self.notify_ended();
        }
        Ok(())
    }

    /// Notes an instance that ended (record `seq`) or was removed (`None`),
    /// for [`Journal::clear_settled_marks`]: on a store of one process (a
    /// shared store marks nothing, and its reads wait for a server).
    fn note_settling(&self, id: &str, seq: Option<u64>) {
        if !self.store.shared() {
            lock(&self.ended_marks).push((InstanceId::stored(id), seq));
        }
    }

    /// The driver let go of `id`, which only waits: like an instance that
    /// ended, its mark in the store (its entry may lag its journal) goes
    /// once what it wrote is durable, unless it writes again before. So a
    /// process holds no mark of each sleeper for as long as it sleeps, and
    /// a crash repairs only what ran since.
    pub(crate) fn note_waiting(&self, id: &str) {
        if self.store.shared() {
            return;
        }
        let Ok(held) = self.hold_loaded_now(id) else {
            return;
        };
        let last = held
            .cached()
            .loaded
            .as_ref()
            .map(|l| l.next_seq.saturating_sub(1));
        drop(held);
        if let Some(seq) = last {
            self.note_settling(id, Some(seq));
        }
    }

    /// Clears the store's marks of the instances whose end (record `seq`)
    /// or removal (`None`) is durable now, with its index entry (written
    /// before the flush), unless a record came after it: a crash from here
    /// on leaves their entries as they are, and open repairs none of them.
    /// Decided under each instance's lock, so no write of it is under way;
    /// a store that would wait to say its last record keeps its marks.
    fn clear_settled_marks(&self, ended: Vec<(InstanceId, Option<u64>)>) {
        for (id, seq) in ended {
            let held = self.hold(&id);
            let _writes = held.cached();
            let last = crate::store::now_or_never(self.store.last_seq(&id));
            if let Some(Ok(last)) = last
                && last == seq
                && let Err(e) = self.store.clear_lagging(&id)
            {
                tracing::warn!(instance = %id, error = %e, "could not clear the mark of an ended instance; the next open after a crash repairs its index entry");
            }
        }
    }

    /// Whether no write waits for a flush and no call for the store.
    pub(crate) fn is_quiet(&self) -> bool {
        self.flusher.is_quiet() && self.store.quiet()
    }

    /// How many flushes the store did so far.
    pub(crate) fn flushes(&self) -> u64 {
        self.flusher.flushes()
    }

    /// Whether the store keeps a timer index every writer kept
    /// ([`Store::timers_kept`]).
    pub(crate) fn timers_kept(&self) -> bool {
        !self.store.read_only() && self.store.timers_kept()
    }

    /// Every active instance's timer was filed again ([`Store::timers_rebuilt`]).
    pub(crate) fn timers_rebuilt(&self) -> Result<()> {
        self.store.timers_rebuilt()
    }

    /// The store, for the alarms that refill from its timer index.
    pub(crate) fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// Whether the store refuses writes (a reader's).
    pub(crate) fn read_only(&self) -> bool {
        self.store.read_only()
    }

    /// Stops the flusher (after a last flush).
    pub(crate) fn stop(&self) {
        self.flusher.stop();
        self.store.close();
    }

    /// A copy of the state of `id`, or `None` when there is no such instance.
    pub(crate) async fn state(&self, id: &str) -> Result<Option<InstanceState>> {
        match self.read(id, InstanceState::clone).await {
            Ok(state) => Ok(Some(state)),
            Err(Error::UnknownInstance { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads `f` of the state without copying it all. The state loaded for
    /// it stays cached when the instance is kept (a driver runs it).
    pub(crate) async fn read<R>(&self, id: &str, f: impl FnOnce(&InstanceState) -> R) -> Result<R> {
        let held = self.hold_loaded(id).await?;
        let cached = held.cached();
        match &cached.loaded {
            Some(loaded) => Ok(f(&loaded.state)),
            None => Err(Error::UnknownInstance { id: id.to_owned() }),
        }
    }

    /// Like [`Journal::read`], from code that cannot wait (see
    /// [`Journal::write_kept`]).
    pub(crate) fn read_kept<R>(&self, id: &str, f: impl FnOnce(&InstanceState) -> R) -> Result<R> {
        let held = self.hold_loaded_now(id)?;
        let cached = held.cached();
        match &cached.loaded {
            Some(loaded) => Ok(f(&loaded.state)),
            None => Err(Error::UnknownInstance { id: id.to_owned() }),
        }
    }

    /// Like [`Journal::read`], for callers outside the engine: answers only
    /// once everything it read is durable, so a user never sees a change a
    /// crash could still take back. Every write of an instance happens under
    /// its lock and takes its ticket there, so the latest ticket when the
    /// lock is let go covers all it read.
    pub(crate) async fn read_durable<R>(
        &self,
        id: &str,
        f: impl FnOnce(&InstanceState) -> R,
    ) -> Result<R> {
        let (read, ticket) = {
            let held = self.hold_loaded(id).await?;
            let cached = held.cached();
            let read = match &cached.loaded {
                Some(loaded) => Ok(f(&loaded.state)),
                None => Err(Error::UnknownInstance { id: id.to_owned() }),
            };
            (read, self.flusher.latest_ticket())
        };
        let read = read?;
        self.flusher.durable(ticket).await?;
        self.settle_unless_owned(id).await?;
        Ok(read)
    }

    /// An instance another process writes may show a commit that is not
    /// yet durable: the store makes it so before a user sees it.
    async fn settle_unless_owned(&self, id: &str) -> Result<()> {
        if self.store.owns(id) {
            return Ok(());
        }
        self.store.settle().await
    }

    /// Folds the journal of `id` from the store. A journal without its
    /// first record is no instance: a removal (which deletes from record 0
    /// on) cut short.
    async fn load(&self, id: &str) -> Result<Option<Loaded>> {
        let mut fold = fold::Fold::new(&self.sealer);
        let journal = self.current_run(id).await?;
        let Some(&(first, _)) = journal.first() else {
            return Ok(None);
        };
        let mut next_seq = handover::start(handover::run_of(first));
        if first != next_seq {
            return Ok(None);
        }
        for (seq, bytes) in journal {
            if seq != next_seq {
                return Err(corrupt(id, seq, format!("record {next_seq} is missing")));
            }
            fold.record(id, seq, &bytes)?;
            next_seq = seq + 1;
        }
        // Its index entry says what the records before the damage said:
        // from the first read on, `list()` shows it parked, as every other
        // read does.
        if fold.damaged()
            && self.store.owns(id)
            && let Some(state) = &fold.state
            && let Err(e) = self.put_summary(id, state, next_seq)
        {
            tracing::warn!(instance = %id, error = %e, "could not refresh the index entry of a damaged journal");
        }
        Ok(fold.state.map(|state| Loaded { state, next_seq }))
    }

    /// The records of the current run of `id` (that of its last record):
    /// an instance that continued as new is read from its run's start on.
    async fn current_run(&self, id: &str) -> Result<Vec<(u64, Vec<u8>)>> {
        match self.store.last_seq(id).await? {
            None => Ok(Vec::new()),
            Some(last) => {
                let start = handover::start(handover::run_of(last));
                self.store.journal_range(id, start..last + 1).await
            }
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.flusher.stop();
    }
}

/// Waits until the store tells of a change; `None` (never) when it does
/// not tell.
pub(crate) async fn told_of_change(told: &mut Option<watch::Receiver<u64>>) -> Option<()> {
    match told {
        Some(receiver) => match receiver.changed().await {
            Ok(()) => Some(()),
            Err(_) => {
                *told = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
    }
}

fn corrupt(id: &str, seq: u64, detail: String) -> Error {
    Error::Corrupt {
        what: format!("journal record {seq} of instance {id:?}"),
        detail,
    }
}

/// A record that only names an instance's parent (`tags::parent_link`):
/// the repair of a child whose creation a crash cut short, taken even
/// after the child ended.
fn is_parent_link(change: &Change) -> bool {
    matches!(change, Change::Described { parent: Some(_), tags } if tags.is_empty())
}
