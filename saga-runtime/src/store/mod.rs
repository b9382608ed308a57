//! Where journals live. The engine talks to a [`Store`]; sled is the
//! embedded one, and a server-backed store (PostgreSQL, for many workers)
//! implements the same trait.
//!
//! A store holds bytes, not records: encoding is the journal's business
//! (`codec` pins it), so every store keeps the same bytes.
//!
//! Two kinds of data:
//!
//! - **Journals**: per instance, records keyed by a sequence number that
//!   grows from 0 without gaps within a run. An instance that continued
//!   as new starts each run at `run << 32` (`journal::runs`): run 0 is the
//!   layout of every release before, so no store is rewritten. A record
//!   is never changed once appended; an instance's journal is removed
//!   whole by retention, or the runs before its current one
//!   ([`Store::remove_before`]).
//! - **The index**: per instance, a summary (status, workflow, times)
//!   derived from its journal. It may lag the journal; the journal module
//!   rebuilds it on open wherever it does.
//!
//! A write is durable once [`Store::flush`] returns after it. A store
//! recovers after a crash with a prefix of its writes: a write is never
//! kept while one made before it is lost.

mod conformance;
pub(crate) mod failpoint;
mod flusher;
#[cfg(feature = "postgres")]
mod postgres;
mod query;
mod sled_store;

#[doc(hidden)]
pub use conformance::run_conformance_suite;
pub(crate) use flusher::Flusher;
#[cfg(feature = "postgres")]
pub(crate) use postgres::{DEFAULT_LEASE, DEFAULT_SCHEMA};
#[cfg(feature = "postgres")]
pub use postgres::{PgOptions, PgStore};
pub use query::{
    Accept, IndexEntry, IndexFacts, IndexPage, IndexQuery, PageOrder, PagePosition, QueueFacts,
    RowOf,
};
pub use sled_store::SledStore;
pub(crate) use sled_store::{LegacyInstance, wait_until_released};

use std::future::Future;
use std::pin::Pin;

use crate::error::Result;

/// The active instances, as start-up reads them
/// ([`Store::active_entries_by`]).
#[derive(Debug, Default)]
pub struct ActiveSet {
    /// The index entries of the instances that may run now, in id order.
    pub may_run: Vec<(String, Vec<u8>)>,
    /// The instances that only wait for a later time, their entries
    /// unread: `(id, wake, deadline)`, as [`Store::timer_of`] answers.
    pub asleep: Vec<(String, u64, bool)>,
}

/// What a store call that may wait for a server answers: a future that
/// async code awaits, so a slow database parks no thread of the
/// application's runtime. A store of one process answers at once
/// ([`answered`]).
#[doc(hidden)]
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// A [`StoreFuture`] that is ready: a store that answers without waiting.
#[doc(hidden)]
pub fn answered<'a, T: Send + 'a>(answer: Result<T>) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(answer))
}

/// The answer of a future that is ready at its first poll, for callers
/// that cannot wait (opening a sled store): `None` when it would wait.
pub(crate) fn now_or_never<F: Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(answer) => Some(answer),
        std::task::Poll::Pending => None,
    }
}

/// Runs `work` to its end now when it needs no wait (a store of one
/// process answers at once: the caller sees its effect on return), or
/// else in a task on `runtime`, from where it stopped: a sync caller never
/// waits for a server.
pub(crate) fn now_or_spawn(
    runtime: &tokio::runtime::Handle,
    quiet: &std::sync::Arc<crate::quiet::Quiet>,
    work: impl Future<Output = ()> + Send + 'static,
) -> Option<tokio::task::JoinHandle<()>> {
    let _entered = runtime.enter();
    let mut work = Box::pin(work);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match work.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(()) => None,
        std::task::Poll::Pending => Some(quiet.spawn(runtime, work)),
    }
}

/// An instance's index entry: its encoded summary, and the facts a store
/// shared by workers keeps in columns of their own (to claim an unowned
/// instance that its workers can run, and to filter `list()`).
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct IndexRow<'a> {
    /// The encoded summary, opaque to the store.
    pub summary: &'a [u8],
    /// The workflow it runs.
    pub workflow: &'a str,
    /// Its status, as `Status` displays it.
    pub status: &'a str,
    /// Whether a worker must drive it (it is not finished, paused or parked
    /// for good).
    pub active: bool,
    /// When it is due if it only waits (milliseconds since the Unix epoch;
    /// 0: due now, an event it waits for came), and whether that is an
    /// event wait's deadline rather than a durable sleep: a store that
    /// keeps a timer index ([`Store::timers_after`]) files it there.
    /// `None`: no time wakes it (it runs, ended, or waits for a child).
    pub wake: Option<(u64, bool)>,
    /// What `list()` filters on beyond status and workflow (`None`: an
    /// entry of a store test, which has none).
    pub facts: Option<IndexFacts<'a>>,
}

impl<'a> IndexRow<'a> {
    /// An entry of `summary` alone (stores that keep no columns, tests).
    pub fn opaque(summary: &'a [u8]) -> IndexRow<'a> {
        IndexRow {
            summary,
            workflow: "",
            status: "",
            active: true,
            wake: None,
            facts: None,
        }
    }
}

/// Where a tail of every journal stands ([`Store::tail`]): after the
/// record `seq` of instance `id` written by transaction `tx`, in the
/// store's order.
#[doc(hidden)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TailPosition {
    pub tx: i64,
    pub id: String,
    pub seq: i64,
}

/// Records in a tail: instance, sequence number, record.
#[doc(hidden)]
pub type TailRecords = Vec<(String, u64, Vec<u8>)>;

/// What a store shared by workers tells its engines of ([`Store::changes`]).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Told {
    /// Something was posted for an instance this worker owns.
    Posts,
    /// An instance stopped needing a driver: it ended, or was paused.
    Stops,
}

/// What a worker asks of a store shared by workers when it takes queued
/// instances ([`Store::take_queued`]); a limit of `u32::MAX` is none.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct QueueTake<'a> {
    /// The queue.
    pub queue: &'a str,
    /// Instances of the queue holding a slot, across workers.
    pub concurrency: u32,
    /// Of them, with one key.
    pub per_key: u32,
    /// Of them, on this worker.
    pub per_worker: u32,
    /// At most `.0` instances of the queue start in any window of `.1`.
    pub rate: Option<(u32, std::time::Duration)>,
    /// The workflows this worker runs: it takes only their instances.
    pub workflows: &'a [&'a str],
    /// The `Dequeued` record to append to each instance taken.
    pub record: &'a [u8],
    /// The time of the take on the engine's clock (the record's), in
    /// milliseconds since the Unix epoch: the rate counts starts by it.
    pub at: u64,
}

/// What a take of queued instances did ([`Store::take_queued`]).
#[doc(hidden)]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueTaken {
    /// The instances taken: this worker's from then on.
    pub ids: Vec<String>,
    /// When the queue's rate lets one more start, if it lets none start
    /// now (milliseconds since the Unix epoch, the engine's clock).
    pub rate_opens_at: Option<u64>,
}

/// Durable storage of journals and the index. Not yet a stable API.
///
/// Reads, and the calls whose answer the engine needs before it goes on
/// (`create`, `claim`, posts), return a [`StoreFuture`]: a server-backed
/// store awaits its server there, and no thread waits. Writes are queued
/// by a synchronous call, in call order (a step's start is recorded when
/// the step is called, before any `.await`), and are durable once a flush
/// after them returns; [`Store::flush`] blocks, and the engine calls it on
/// a thread of its own.
///
/// A store shared by workers (PostgreSQL) gives each instance an owner:
/// the worker that created or claimed it, the only one that writes its
/// journal ([`Store::owns`], [`Store::claim`]).
#[doc(hidden)]
pub trait Store: Send + Sync + 'static {
    /// Stores record 0 of a new instance's journal unless the instance
    /// exists; `true` when it was created (and is then this worker's).
    /// Also stores its first index entry, before the record (or with it),
    /// so the index never misses an instance.
    fn create<'a>(
        &'a self,
        id: &'a str,
        index: &'a IndexRow<'_>,
        record: &'a [u8],
    ) -> StoreFuture<'a, bool>;
    /// Appends record `seq` to the journal of `id`: one write.
    fn append(&self, id: &str, seq: u64, record: &[u8]) -> Result<()>;
    /// Appends record `seq` and replaces the index entry it changed, in
    /// that order; a store shared by workers does both at once, so a
    /// worker that dies in between never leaves an instance that must run
    /// marked as one that need not.
    fn append_indexed(
        &self,
        id: &str,
        seq: u64,
        record: &[u8],
        index: &IndexRow<'_>,
    ) -> Result<()> {
        self.append(id, seq, record)?;
        // Derived data: a store of one process repairs it on the next open.
        if let Err(e) = self.put_index(id, index) {
            tracing::warn!(instance = %id, error = %e, "could not update the instance index");
        }
        Ok(())
    }
    /// The journal of `id`, in order; empty when there is none.
    fn journal<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Vec<(u64, Vec<u8>)>>;
    /// The records of `id`'s journal whose sequence numbers are in `seqs`,
    /// in order: one run of an instance that continued as new (the
    /// journal puts the run in the high bits of the sequence number, see
    /// `journal::runs`). The default reads the whole journal: for stores
    /// of the test suites.
    fn journal_range<'a>(
        &'a self,
        id: &'a str,
        seqs: std::ops::Range<u64>,
    ) -> StoreFuture<'a, Vec<(u64, Vec<u8>)>> {
        Box::pin(async move {
            let mut records = self.journal(id).await?;
            records.retain(|(seq, _)| seqs.contains(seq));
            Ok(records)
        })
    }
    /// The sequence number of the last record of `id`'s journal.
    fn last_seq<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<u64>>;
    /// Replaces the index entry of `id` (on a shared store, only while
    /// this worker owns it: derived data, so otherwise it does nothing).
    fn put_index(&self, id: &str, index: &IndexRow<'_>) -> Result<()>;
    /// The index summary of `id`.
    fn index<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<Vec<u8>>>;
    /// Every index entry, in id order.
    fn index_entries(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>>;
    /// The index entries that may have `status` and `workflow` (`None`:
    /// any), in id order: a store that keeps them in indexed columns
    /// leaves the others out; any store may answer more (the engine
    /// filters again).
    fn index_entries_where<'a>(
        &'a self,
        _status: Option<&'a str>,
        _workflow: Option<&'a str>,
    ) -> StoreFuture<'a, Vec<(String, Vec<u8>)>> {
        self.index_entries()
    }
    /// The index entries of the instances that may need a driver (their
    /// entry says so, `IndexRow::active`), in id order, for start-up: a
    /// store that keeps an index of them reads no ended instance. It may
    /// answer more (the engine looks at each entry's status); the default
    /// reads every entry, as a store without such an index must.
    fn active_entries(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        self.index_entries()
    }
    /// Like [`Store::active_entries`], on a store whose timer index is
    /// kept ([`Store::timers_kept`]): the entries of the active instances
    /// that may run by `now` (stored milliseconds), and apart, their
    /// entries unread, those whose filed timer ([`Store::timer_of`]) is
    /// later: they only wait, and are loaded when due, so start-up reads
    /// nothing of a sleeper but its timer. The default answers every
    /// active entry as one that may run.
    fn active_entries_by(&self, _now: u64) -> StoreFuture<'_, ActiveSet> {
        Box::pin(async move {
            Ok(ActiveSet {
                may_run: self.active_entries().await?,
                asleep: Vec::new(),
            })
        })
    }
    /// Notes whether `id` needs a driver, for [`Store::active_entries`]:
    /// the repair of a store scanned whole. Writes of the index keep it
    /// otherwise. The default keeps nothing.
    fn set_active(&self, _id: &str, _active: bool) -> Result<()> {
        Ok(())
    }
    /// Whether this store keeps a timer index that every writer since it
    /// was built kept ([`IndexRow::wake`] of each entry, filed by time):
    /// then an instance that only waits need not stay in memory, and
    /// start-up resumes only the sleepers that are due. The default keeps
    /// none.
    fn timers_kept(&self) -> bool {
        false
    }
    /// The timer of `id` as its entry filed it (`None`: none; also when
    /// the store keeps no timer index).
    fn timer_of<'a>(&'a self, _id: &'a str) -> StoreFuture<'a, Option<(u64, bool)>> {
        answered(Ok(None))
    }
    /// Up to `limit` timers after `after` (`(wake, id)`, exclusive; `None`:
    /// from the first), in wake then id order: `(wake, id, deadline)`. A
    /// store may skip and drop an entry it finds stale (the instance's
    /// entry no longer files it).
    fn timers_after<'a>(
        &'a self,
        _after: Option<(u64, &'a str)>,
        _limit: usize,
    ) -> StoreFuture<'a, Vec<(u64, String, bool)>> {
        answered(Ok(Vec::new()))
    }
    /// Every active instance's timer was filed again from its journal
    /// (the rebuild of a timer index that a release before did not keep):
    /// [`Store::timers_kept`] answers `true` from now on, until a release
    /// that does not keep it writes the store.
    fn timers_rebuilt(&self) -> Result<()> {
        Ok(())
    }
    /// Whether this store keeps an index of the ended instances by end
    /// time that every writer since it was built kept
    /// ([`Store::ended_until`]): then retention walks it a batch at a
    /// time and reads no other entry. The default keeps none, and
    /// retention reads every entry.
    fn ended_kept(&self) -> bool {
        false
    }
    /// Up to `limit` instances filed as ended at or before `until`
    /// (stored milliseconds), after `after` (`(ended, id)`, exclusive;
    /// `None`: from the first), in end then id order: `(ended, id)`. A
    /// key may be stale (the instance was removed, or restarted and ended
    /// again later): the caller checks each against its entry and drops
    /// the stale ones ([`Store::drop_ended`]).
    fn ended_until<'a>(
        &'a self,
        _until: u64,
        _after: Option<(u64, &'a str)>,
        _limit: usize,
    ) -> StoreFuture<'a, Vec<(u64, String)>> {
        answered(Ok(Vec::new()))
    }
    /// Files `id` as ended at `ended`, for the rebuild of an index of
    /// ended instances that a release before did not keep (writes of the
    /// index file the others). The default keeps nothing.
    fn file_ended(&self, _id: &str, _ended: u64) -> Result<()> {
        Ok(())
    }
    /// Drops the key of `id` ended at `ended` from the index of ended
    /// instances: it was removed, or the key is stale.
    fn drop_ended(&self, _id: &str, _ended: u64) -> Result<()> {
        Ok(())
    }
    /// Every ended instance was filed again (the rebuild of an index of
    /// ended instances that a release before did not keep):
    /// [`Store::ended_kept`] answers `true` from now on, until a release
    /// that does not keep it writes the store.
    fn ended_rebuilt(&self) -> Result<()> {
        Ok(())
    }
    /// The instances whose index entry may lag their journal (written by
    /// a process that did not close), for the repair on open: `None` when
    /// the store cannot tell (the default; or a release that keeps no
    /// marks wrote it), and then every entry is repaired.
    fn lagging(&self) -> StoreFuture<'_, Option<Vec<String>>> {
        answered(Ok(None))
    }
    /// The index entry of `id` agrees with its journal, durably, and no
    /// write of it is under way (the caller holds the instance's lock):
    /// a mark that it may lag goes. The default marks nothing.
    fn clear_lagging(&self, _id: &str) -> Result<()> {
        Ok(())
    }
    /// The repair on open is done and durable: every index entry agrees
    /// with its journal, and [`Store::active_entries`] with the entries.
    /// A store that marks lagging entries clears its marks.
    fn repaired(&self) -> Result<()> {
        Ok(())
    }
    /// One page of the entries that match `query`, each one `accept`ed,
    /// in its order after its position (see `query`). The default reads
    /// the whole index, in id order: for stores of the test suites.
    fn index_page<'a>(
        &'a self,
        query: &'a IndexQuery<'a>,
        accept: Accept<'a>,
    ) -> StoreFuture<'a, IndexPage> {
        Box::pin(async move {
            let entries = self.index_entries().await?;
            query::page_of_all(entries, query, accept).await
        })
    }
    /// Whether the store keeps indexes of its own for `list()`'s filters
    /// that a release before did not keep: then the engine refiles every
    /// entry, a batch at a time ([`Store::rebuild_lists`]), and pages walk
    /// as without them meanwhile. The default keeps none.
    fn lists_to_rebuild(&self) -> bool {
        false
    }
    /// Refiles up to `limit` entries after `after` (id order; `None`: from
    /// the first) in the store's indexes for `list()`'s filters, each row
    /// made by `row_of`; answers the last id refiled, or `None` when no
    /// entry is left, and then the indexes are trusted.
    fn rebuild_lists<'a>(
        &'a self,
        _after: Option<&'a str>,
        _limit: usize,
        _row_of: RowOf<'a>,
    ) -> StoreFuture<'a, Option<String>> {
        answered(Ok(None))
    }
    /// The plan the store's own query of `query`'s page runs with
    /// (PostgreSQL's `EXPLAIN`), for operators and tests; `None` for a
    /// store that plans nothing.
    fn explain_page<'a>(&'a self, _query: &'a IndexQuery<'a>) -> StoreFuture<'a, Option<String>> {
        answered(Ok(None))
    }
    /// Up to `limit` ids whose index entry has no facts yet (written by a
    /// release before them), to backfill with [`Store::backfill_index`].
    fn unindexed(&self, _limit: usize) -> StoreFuture<'_, Vec<String>> {
        answered(Ok(Vec::new()))
    }
    /// Writes the facts of an entry that has none, whoever owns it
    /// (derived data, and only missing data is written).
    fn backfill_index<'a>(&'a self, id: &'a str, index: &'a IndexRow<'_>) -> StoreFuture<'a, ()> {
        answered(self.put_index(id, index))
    }
    /// Whether start times in pages and their ranges are the store's own
    /// clock (PostgreSQL's), not the engine's: the store alone judges them.
    fn server_clock(&self) -> bool {
        false
    }
    /// The worker that owns `id`, and since when, on a store shared by
    /// workers.
    fn owner_of<'a>(
        &'a self,
        _id: &'a str,
    ) -> StoreFuture<'a, Option<(String, std::time::SystemTime)>> {
        answered(Ok(None))
    }
    /// Removes an instance: its journal first, then its index entry (so a
    /// crash in between leaves an index entry without a journal, which the
    /// journal module finishes removing on open).
    fn remove(&self, id: &str) -> Result<()>;
    /// Removes the records of `id`'s journal before `seq`, and nothing
    /// else: the runs of an instance that continued as new which retention
    /// let go of, while its current run (from `seq` on) and its index
    /// entry stay. On a store shared by workers, only while this worker
    /// owns the instance. Queued as the other writes, in call order.
    fn remove_before(&self, _id: &str, _seq: u64) -> Result<()> {
        Err(crate::error::Error::Store(
            "this store cannot remove the old runs of an instance".into(),
        ))
    }
    /// Lets go of instance `id`, which waits in its queue, on a store
    /// shared by workers: this worker owned it only to act on what was
    /// posted to it, and the worker that takes it from its queue owns it
    /// next. Writes queued before go first; this worker writes it no more.
    fn disown(&self, _id: &str) -> Result<()> {
        Ok(())
    }
    /// Blocks until every write made before the call is durable.
    fn flush(&self) -> Result<()>;
    /// Whether [`Store::flush`] is quick and must run on the caller's
    /// task, not on a thread of its own: a simulated store, whose runs
    /// replay only while no thread decides when a flush ends.
    fn flushes_inline(&self) -> bool {
        false
    }
    /// Blocks until every write this engine has read so far is durable,
    /// when other processes write the store too (their writes may be
    /// visible before they are durable); a no-op otherwise.
    fn settle(&self) -> StoreFuture<'_, ()> {
        answered(Ok(()))
    }
    /// Whether no call of this engine's waits for the store to answer and
    /// no write it handed over waits to be applied (a store that does both
    /// at once always is), for `Engine::idle`.
    fn quiet(&self) -> bool {
        true
    }
    /// The engine is done with the store (its last flush ran): a store
    /// shared by workers lets another take over now. Later calls fail.
    fn close(&self) {}
    /// A store that only reads (it refuses writes): the engine repairs
    /// nothing on open and drives nothing.
    fn read_only(&self) -> bool {
        false
    }
    /// Whether this is a store shared by workers that this engine writes:
    /// other processes post intents here for it to take ([`Store::posts`]),
    /// and it claims the instances of workers that are gone.
    fn shared(&self) -> bool {
        false
    }
    /// Where a tail of every journal begins now, on a store whose journals
    /// other processes write too (`None`: this engine writes every record
    /// it stores, and tells its subscribers itself).
    fn tail_start(&self) -> StoreFuture<'_, Option<TailPosition>> {
        answered(Ok(None))
    }
    /// Up to `limit` records of any instance after `from`, in an order
    /// that later records never come before (so a tail loses and repeats
    /// none), each durable; and the position after the last.
    fn tail<'a>(
        &'a self,
        from: &'a TailPosition,
        _limit: usize,
    ) -> StoreFuture<'a, (TailRecords, TailPosition)> {
        answered(Ok((Vec::new(), from.clone())))
    }
    /// A count that moves when another process may have changed `what`
    /// this engine waits for, on a store that can tell; waiters look again
    /// when it moves, and still poll.
    fn changes(&self, _what: Told) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
    /// Whether this engine may write the journal of `id`: always on a
    /// store of one process; on a shared store, while this worker owns the
    /// instance (others post to it instead).
    fn owns(&self, _id: &str) -> bool {
        !self.read_only()
    }
    /// Takes ownership of up to `limit` instances that need a driver and
    /// have none alive (their worker died or let go), of the `workflows`
    /// this engine runs, and returns their ids. Only a shared store has
    /// any.
    fn claim<'a>(
        &'a self,
        _workflows: &'a [&'a str],
        _limit: usize,
    ) -> StoreFuture<'a, Vec<String>> {
        answered(Ok(Vec::new()))
    }
    /// Takes queued instances of `take.queue` that may run now: the
    /// highest priority first, keys in turn, first come first served,
    /// without going past a limit (the rate's included, counted at
    /// `take.at`), which it checks in the transaction
    /// that takes them (so two workers never exceed one). Each taken
    /// instance is this worker's, with the `Dequeued` record appended.
    /// Only a shared store has any: a store of one process leaves the
    /// engine to hand out slots in memory.
    fn take_queued<'a>(&'a self, _take: &'a QueueTake<'a>) -> StoreFuture<'a, QueueTaken> {
        answered(Ok(QueueTaken::default()))
    }
    /// Posts an intent for instance `id` (an event, a control call) to the
    /// inbox of the worker that drives it, durably, and returns the post's
    /// token, to read its answer by. Readers may post.
    fn post<'a>(&'a self, _id: &'a str, _intent: &'a [u8]) -> StoreFuture<'a, String> {
        answered(Err(crate::error::Error::ReadOnly {
            what: "posting to another process (this store has no inbox)".into(),
        }))
    }
    /// Up to `limit` posted intents not answered yet, for the instances
    /// this worker owns, oldest first: number, instance, intent.
    fn posts(&self, _limit: usize) -> StoreFuture<'_, Vec<(i64, String, Vec<u8>)>> {
        answered(Ok(Vec::new()))
    }
    /// Stores the answer to post `n` once it was acted on (only while this
    /// worker owns its instance: a fenced worker's acts were refused); an
    /// answered post is taken no more.
    fn answer_post<'a>(&'a self, _n: i64, _answer: &'a [u8]) -> StoreFuture<'a, ()> {
        answered(Ok(()))
    }
    /// The answer to the post with `token`: `None` when there is no such
    /// post, `Some(None)` while it is not answered.
    fn answer<'a>(&'a self, _token: &'a str) -> StoreFuture<'a, Option<Option<Vec<u8>>>> {
        answered(Ok(None))
    }
    /// Removes the post with `token` (its poster read the answer, or gave
    /// up waiting on a post that was answered).
    fn forget_post<'a>(&'a self, _token: &'a str) -> StoreFuture<'a, ()> {
        answered(Ok(()))
    }
    /// Whether the worker that owns instance `id` holds a live lease
    /// (`None`: no such instance, or a store of one process).
    fn owner_live<'a>(&'a self, _id: &'a str) -> StoreFuture<'a, Option<bool>> {
        answered(Ok(None))
    }

    // Queue limits (`queue::stored`): one opaque value per queue name,
    // changed only by compare-and-swap, as a schedule's state. A store
    // that keeps none reads none and refuses a swap.

    /// The stored limits of queue `name`.
    fn queue_limits<'a>(&'a self, _name: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        answered(Ok(None))
    }
    /// Every queue's stored limits, by name.
    fn all_queue_limits(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        answered(Ok(Vec::new()))
    }
    /// Stores `new` as the limits of queue `name` if they are `old` now
    /// (`None`: none are stored); `true` when it did. Durable once a flush
    /// after it returns (a server-backed store: when it answers).
    fn swap_queue_limits<'a>(
        &'a self,
        _name: &'a str,
        _old: Option<&'a [u8]>,
        _new: &'a [u8],
    ) -> StoreFuture<'a, bool> {
        answered(Err(crate::error::Error::Store(
            "this store keeps no queue limits".into(),
        )))
    }

    // Schedules (`schedule::state`): one opaque value per schedule name,
    // changed only by compare-and-swap, so two workers never both advance
    // one. A store that keeps none reads none and refuses a swap.

    /// Every schedule's stored state, by name.
    fn schedules(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        answered(Ok(Vec::new()))
    }
    /// The stored state of schedule `name`.
    fn schedule<'a>(&'a self, _name: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        answered(Ok(None))
    }
    /// Stores `new` as the state of schedule `name` if its state is `old`
    /// now (`None`: it has none); `true` when it did. Durable once a flush
    /// after it returns (a server-backed store: when it answers).
    fn swap_schedule<'a>(
        &'a self,
        _name: &'a str,
        _old: Option<&'a [u8]>,
        _new: &'a [u8],
    ) -> StoreFuture<'a, bool> {
        answered(Err(crate::error::Error::Store(
            "this store keeps no schedules".into(),
        )))
    }
    /// Removes the state of schedule `name` if it is `old` now; `true`
    /// when it did. Durable as [`swap_schedule`](Store::swap_schedule).
    fn remove_schedule<'a>(&'a self, _name: &'a str, _old: &'a [u8]) -> StoreFuture<'a, bool> {
        answered(Err(crate::error::Error::Store(
            "this store keeps no schedules".into(),
        )))
    }
}
