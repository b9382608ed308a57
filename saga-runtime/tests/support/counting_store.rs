//! A store (sled, or PostgreSQL) that notes every instance whose journal
//! or index entry the engine reads through it, and every walk of the whole
//! index: tests of what start-up reads (`tests/startup.rs`,
//! `tests/postgres_startup.rs`). Every other call is passed on as it is.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use saga_runtime::Error;
use saga_runtime::store::{
    Accept, ActiveSet, IndexEntry, IndexPage, IndexQuery, IndexRow, QueueTake, QueueTaken, RowOf,
    Store, StoreFuture, TailPosition, TailRecords, Told,
};

/// What the engine read through a [`CountingStore`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Reads {
    /// Per instance: how many reads of its journal or index entry
    /// (an entry given by a walk counts too).
    pub(crate) of: BTreeMap<String, usize>,
    /// Walks of every index entry.
    pub(crate) whole_index: usize,
    /// Reads of the active instances' entries.
    pub(crate) active_set: usize,
    /// Per instance: how many reads of its journal alone (its state was
    /// loaded).
    pub(crate) journals: BTreeMap<String, usize>,
    /// Keys read from the index of ended instances (retention).
    pub(crate) ended_keys: usize,
    /// Entries read by the walks of `list()`'s pages.
    pub(crate) page_entries: usize,
}

impl Reads {
    /// The instances whose journal was read, whose id starts with `prefix`.
    pub(crate) fn journals_of(&self, prefix: &str) -> Vec<&str> {
        self.journals
            .keys()
            .filter(|id| id.starts_with(prefix))
            .map(String::as_str)
            .collect()
    }

    /// The instances read whose id starts with `prefix`.
    pub(crate) fn of_prefix(&self, prefix: &str) -> Vec<&str> {
        self.of
            .keys()
            .filter(|id| id.starts_with(prefix))
            .map(String::as_str)
            .collect()
    }
}

pub(crate) struct CountingStore {
    inner: Box<dyn Store>,
    reads: Mutex<Reads>,
    /// `close` is not passed on: the store is left as by a process that
    /// died (its marks of what it wrote stay).
    dies: AtomicBool,
}

impl CountingStore {
    pub(crate) fn new(inner: impl Store) -> CountingStore {
        CountingStore {
            inner: Box::new(inner),
            reads: Mutex::default(),
            dies: AtomicBool::new(false),
        }
    }

    /// A store whose engine does not close it cleanly.
    pub(crate) fn dying(inner: impl Store) -> CountingStore {
        let store = CountingStore::new(inner);
        store.dies.store(true, Ordering::SeqCst);
        store
    }

    /// What was read so far, and forgets it.
    pub(crate) fn take_reads(&self) -> Reads {
        std::mem::take(&mut *self.reads.lock().unwrap())
    }

    fn read(&self, id: &str) {
        *self
            .reads
            .lock()
            .unwrap()
            .of
            .entry(id.to_owned())
            .or_default() += 1;
    }

    fn read_journal(&self, id: &str) {
        self.read(id);
        *self
            .reads
            .lock()
            .unwrap()
            .journals
            .entry(id.to_owned())
            .or_default() += 1;
    }

    fn read_all(&self, entries: &[(String, Vec<u8>)]) {
        for (id, _) in entries {
            self.read(id);
        }
    }
}

impl Store for CountingStore {
    fn create<'a>(
        &'a self,
        id: &'a str,
        index: &'a IndexRow<'_>,
        record: &'a [u8],
    ) -> StoreFuture<'a, bool> {
        self.inner.create(id, index, record)
    }
    fn append(&self, id: &str, seq: u64, record: &[u8]) -> Result<(), Error> {
        self.inner.append(id, seq, record)
    }
    fn append_indexed(
        &self,
        id: &str,
        seq: u64,
        record: &[u8],
        index: &IndexRow<'_>,
    ) -> Result<(), Error> {
        self.inner.append_indexed(id, seq, record, index)
    }
    fn journal<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Vec<(u64, Vec<u8>)>> {
        self.read_journal(id);
        self.inner.journal(id)
    }
    fn journal_range<'a>(
        &'a self,
        id: &'a str,
        seqs: Range<u64>,
    ) -> StoreFuture<'a, Vec<(u64, Vec<u8>)>> {
        self.read_journal(id);
        self.inner.journal_range(id, seqs)
    }
    fn last_seq<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<u64>> {
        self.read(id);
        self.inner.last_seq(id)
    }
    fn put_index(&self, id: &str, index: &IndexRow<'_>) -> Result<(), Error> {
        self.inner.put_index(id, index)
    }
    fn index<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        self.read(id);
        self.inner.index(id)
    }
    fn index_entries(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        Box::pin(async move {
            let entries = self.inner.index_entries().await?;
            self.reads.lock().unwrap().whole_index += 1;
            self.read_all(&entries);
            Ok(entries)
        })
    }
    fn active_entries(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        Box::pin(async move {
            let entries = self.inner.active_entries().await?;
            self.reads.lock().unwrap().active_set += 1;
            self.read_all(&entries);
            Ok(entries)
        })
    }
    fn active_entries_by(&self, now: u64) -> StoreFuture<'_, ActiveSet> {
        Box::pin(async move {
            let set = self.inner.active_entries_by(now).await?;
            self.reads.lock().unwrap().active_set += 1;
            self.read_all(&set.may_run);
            Ok(set)
        })
    }
    fn set_active(&self, id: &str, active: bool) -> Result<(), Error> {
        self.inner.set_active(id, active)
    }
    fn timers_kept(&self) -> bool {
        self.inner.timers_kept()
    }
    fn timer_of<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<(u64, bool)>> {
        self.inner.timer_of(id)
    }
    fn timers_after<'a>(
        &'a self,
        after: Option<(u64, &'a str)>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<(u64, String, bool)>> {
        self.inner.timers_after(after, limit)
    }
    fn timers_rebuilt(&self) -> Result<(), Error> {
        self.inner.timers_rebuilt()
    }
    fn ended_kept(&self) -> bool {
        self.inner.ended_kept()
    }
    fn ended_until<'a>(
        &'a self,
        until: u64,
        after: Option<(u64, &'a str)>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<(u64, String)>> {
        Box::pin(async move {
            let keys = self.inner.ended_until(until, after, limit).await?;
            self.reads.lock().unwrap().ended_keys += keys.len();
            Ok(keys)
        })
    }
    fn file_ended(&self, id: &str, ended: u64) -> Result<(), Error> {
        self.inner.file_ended(id, ended)
    }
    fn drop_ended(&self, id: &str, ended: u64) -> Result<(), Error> {
        self.inner.drop_ended(id, ended)
    }
    fn ended_rebuilt(&self) -> Result<(), Error> {
        self.inner.ended_rebuilt()
    }
    fn lagging(&self) -> StoreFuture<'_, Option<Vec<String>>> {
        self.inner.lagging()
    }
    fn clear_lagging(&self, id: &str) -> Result<(), Error> {
        self.inner.clear_lagging(id)
    }
    fn repaired(&self) -> Result<(), Error> {
        self.inner.repaired()
    }
    fn index_page<'a>(
        &'a self,
        query: &'a IndexQuery<'a>,
        accept: Accept<'a>,
    ) -> StoreFuture<'a, IndexPage> {
        Box::pin(async move {
            // Every entry the walk reads is put to the engine's test.
            let counted = |entry: &IndexEntry| {
                self.reads.lock().unwrap().page_entries += 1;
                accept(entry)
            };
            self.inner.index_page(query, &counted).await
        })
    }
    fn lists_to_rebuild(&self) -> bool {
        self.inner.lists_to_rebuild()
    }
    fn rebuild_lists<'a>(
        &'a self,
        after: Option<&'a str>,
        limit: usize,
        row_of: RowOf<'a>,
    ) -> StoreFuture<'a, Option<String>> {
        self.inner.rebuild_lists(after, limit, row_of)
    }
    fn unindexed(&self, limit: usize) -> StoreFuture<'_, Vec<String>> {
        self.reads.lock().unwrap().whole_index += 1;
        self.inner.unindexed(limit)
    }
    fn remove(&self, id: &str) -> Result<(), Error> {
        self.inner.remove(id)
    }
    fn remove_before(&self, id: &str, seq: u64) -> Result<(), Error> {
        self.inner.remove_before(id, seq)
    }
    fn flush(&self) -> Result<(), Error> {
        self.inner.flush()
    }
    fn close(&self) {
        if !self.dies.load(Ordering::SeqCst) {
            self.inner.close();
        }
    }
    fn schedules(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        self.inner.schedules()
    }
    fn schedule<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        self.inner.schedule(name)
    }
    fn swap_schedule<'a>(
        &'a self,
        name: &'a str,
        old: Option<&'a [u8]>,
        new: &'a [u8],
    ) -> StoreFuture<'a, bool> {
        self.inner.swap_schedule(name, old, new)
    }
    fn remove_schedule<'a>(&'a self, name: &'a str, old: &'a [u8]) -> StoreFuture<'a, bool> {
        self.inner.remove_schedule(name, old)
    }

    // The rest, passed on (a store shared by workers needs them all).

    fn index_entries_where<'a>(
        &'a self,
        status: Option<&'a str>,
        workflow: Option<&'a str>,
    ) -> StoreFuture<'a, Vec<(String, Vec<u8>)>> {
        Box::pin(async move {
            let entries = self.inner.index_entries_where(status, workflow).await?;
            self.read_all(&entries);
            Ok(entries)
        })
    }
    fn explain_page<'a>(&'a self, query: &'a IndexQuery<'a>) -> StoreFuture<'a, Option<String>> {
        self.inner.explain_page(query)
    }
    fn backfill_index<'a>(&'a self, id: &'a str, index: &'a IndexRow<'_>) -> StoreFuture<'a, ()> {
        self.inner.backfill_index(id, index)
    }
    fn server_clock(&self) -> bool {
        self.inner.server_clock()
    }
    fn owner_of<'a>(
        &'a self,
        id: &'a str,
    ) -> StoreFuture<'a, Option<(String, std::time::SystemTime)>> {
        self.inner.owner_of(id)
    }
    fn disown(&self, id: &str) -> Result<(), Error> {
        self.inner.disown(id)
    }
    fn flushes_inline(&self) -> bool {
        self.inner.flushes_inline()
    }
    fn settle(&self) -> StoreFuture<'_, ()> {
        self.inner.settle()
    }
    fn quiet(&self) -> bool {
        self.inner.quiet()
    }
    fn read_only(&self) -> bool {
        self.inner.read_only()
    }
    fn shared(&self) -> bool {
        self.inner.shared()
    }
    fn tail_start(&self) -> StoreFuture<'_, Option<TailPosition>> {
        self.inner.tail_start()
    }
    fn tail<'a>(
        &'a self,
        from: &'a TailPosition,
        limit: usize,
    ) -> StoreFuture<'a, (TailRecords, TailPosition)> {
        self.inner.tail(from, limit)
    }
    fn changes(&self, what: Told) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.inner.changes(what)
    }
    fn owns(&self, id: &str) -> bool {
        self.inner.owns(id)
    }
    fn claim<'a>(&'a self, workflows: &'a [&'a str], limit: usize) -> StoreFuture<'a, Vec<String>> {
        self.inner.claim(workflows, limit)
    }
    fn take_queued<'a>(&'a self, take: &'a QueueTake<'a>) -> StoreFuture<'a, QueueTaken> {
        self.inner.take_queued(take)
    }
    fn post<'a>(&'a self, id: &'a str, intent: &'a [u8]) -> StoreFuture<'a, String> {
        self.inner.post(id, intent)
    }
    fn posts(&self, limit: usize) -> StoreFuture<'_, Vec<(i64, String, Vec<u8>)>> {
        self.inner.posts(limit)
    }
    fn answer_post<'a>(&'a self, n: i64, answer: &'a [u8]) -> StoreFuture<'a, ()> {
        self.inner.answer_post(n, answer)
    }
    fn answer<'a>(&'a self, token: &'a str) -> StoreFuture<'a, Option<Option<Vec<u8>>>> {
        self.inner.answer(token)
    }
    fn forget_post<'a>(&'a self, token: &'a str) -> StoreFuture<'a, ()> {
        self.inner.forget_post(token)
    }
    fn owner_live<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<bool>> {
        self.inner.owner_live(id)
    }
    fn queue_limits<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        self.inner.queue_limits(name)
    }
    fn all_queue_limits(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        self.inner.all_queue_limits()
    }
    fn swap_queue_limits<'a>(
        &'a self,
        name: &'a str,
        old: Option<&'a [u8]>,
        new: &'a [u8],
    ) -> StoreFuture<'a, bool> {
        self.inner.swap_queue_limits(name, old, new)
    }
}
