//! The embedded store: one sled directory, its trees:
//!
//! - `journal`: key `<id>/<big-endian u64 seq>`, one insert per record.
//!   The run of an instance that continued as new is the high 32 bits of
//!   `seq` (`journal::runs`), so one run is one range of keys, and run 0
//!   keys are those of every release before.
//!   Ids never contain `/`, and `/` sorts before every id character, so a
//!   prefix scan of `<id>/` sees exactly one instance's records, in order.
//! - `index`: key `<id>`, the instance's summary.
//! - `facts`: key `<id>`, its start time (big-endian u64 ms) and the
//!   facts `list()` filters on (tags, parent, ...), encoded by the journal.
//! - `by_start`: key `<big-endian u64 ms start time><id>`, empty: the
//!   index in start order, which a page walks from its cursor on.
//! - `schedules`: key `<schedule name>`, its state (`schedule::state`),
//!   changed by compare-and-swap.
//! - `queues`: key `<queue name>`, its limits (`queue::stored`), changed
//!   by compare-and-swap.
//! - `active`: key `<id>`, value its timer (see `timers`; empty when it
//!   has none, and as a release before writes it): the instances whose index entry says a
//!   driver must run them (`IndexRow::active`), so start-up finds them
//!   without reading the ended ones. Written before an entry becomes
//!   active and removed after it stops being so: a crash leaves at most an
//!   extra key, whose entry the engine reads and skips, never a missing one.
//! - `dirty`: key `<id>`, empty: the instances this process wrote (marked
//!   before its first write), whose index entry may lag their journal
//!   after a crash; open repairs those alone, then clears the tree, and a
//!   clean close clears it. An instance's mark goes once its end is
//!   durable (`Store::clear_lagging`), so a crash repairs the instances
//!   that were running and those that ended just before.
//!
//! - `timers`: key `<big-endian u64 ms wake><id>`, value one byte (1: an
//!   event wait's deadline, 0: a durable sleep): the active instances
//!   that only wait for time (`IndexRow::wake`), in the order they are
//!   due, so the engine keeps only the next ones in memory and start-up
//!   resumes only those due. The value of an instance's key in `active`
//!   is its timer (the same 9 bytes, or empty), so a new timer replaces
//!   the old: the new key is written before the entry, the old one
//!   removed after. A crash leaves at most a stale key, which
//!   [`Store::timers_after`] drops when it finds the instance files
//!   another (or none).
//!
//! - `ended`: key `<big-endian u64 ms ended><id>`, empty: the ended
//!   instances by end time, which retention walks (`ended`).
//! - `lists` and `lists_of`: the instances by the facts `list()` filters
//!   on (workflow, queue, parent, tag, ended or not), which a filtered
//!   page walks (`lists`).
//!
//! The marker's value says which of the later trees are kept: its words,
//! joined by `+` (`timers+ended+lists`). The timers are trusted only
//! when it says `timers`: a release before writes the marker empty or
//! `timers` alone (or removes it), and the engine then files every active
//! instance's timer again before it trusts them
//! ([`Store::timers_rebuilt`]); likewise `ended` ([`Store::ended_rebuilt`]).
//! A release before rewrites the marker on open, before it writes
//! anything else, so a word is never kept past a writer that did not
//! keep its tree.
//!
//! The two new trees are kept only by releases that know them: a release
//! before writes without them. So a marker that they are kept sits in
//! `index` under a key no instance has ([`KEPT_MARKER`]), which the repair
//! on open of every release before removes (an entry without a journal);
//! a store without it is scanned whole once, as before, and marked again.
//!
//! Nothing here uses a sled `Batch` or a multi-tree transaction: measured
//! on sled 0.34.7, those cap near 10k durable writes/s at any concurrency,
//! while plain inserts that share a flush scale to ~33k/s.
//!
//! sled recovers a prefix of its log after a crash, so a record is never
//! kept while one written before it is lost.

use std::path::{Path, PathBuf};

use super::{
    Accept, ActiveSet, IndexEntry, IndexPage, IndexQuery, IndexRow, PagePosition, RowOf, Store,
    StoreFuture, answered,
};
use crate::error::{Error, Result};
use crate::store::failpoint::{self, Call};

mod active;
mod dir;
mod ended;
mod lists;
mod page;

use active::timer_of_bytes;
pub(crate) use dir::wait_until_released;
use dir::{OpenHere, create_private_dir, open_error};
use page::{split_start_key, start_key};

/// The sled store. Not yet a stable API (see [`Store`]).
#[doc(hidden)]
pub struct SledStore {
    db: sled::Db,
    journal: sled::Tree,
    index: sled::Tree,
    facts: sled::Tree,
    by_start: sled::Tree,
    schedules: sled::Tree,
    queues: sled::Tree,
    active: sled::Tree,
    dirty: sled::Tree,
    timers: sled::Tree,
    ended: sled::Tree,
    lists: sled::Tree,
    lists_of: sled::Tree,
    /// Held while the list indexes of an entry and the entry are written.
    lists_lock: std::sync::Mutex<()>,
    /// Whether `lists` is kept by every writer since it was built.
    lists_trusted: std::sync::atomic::AtomicBool,
    /// Whether `timers` is kept by every writer since it was built (the
    /// marker said so at open, or the engine rebuilt it since).
    timers_trusted: std::sync::atomic::AtomicBool,
    /// Whether `ended` is kept by every writer since it was built.
    ended_trusted: std::sync::atomic::AtomicBool,
    /// The instances marked in `dirty` by this process.
    marked: std::sync::Mutex<std::collections::HashSet<String>>,
    path: Option<PathBuf>,
    /// Opened to read (`EngineBuilder::open_read_only`): the journal
    /// writes nothing and no instance is driven.
    read_only: bool,
    /// Its place among the stores this process holds open.
    _open_here: Option<OpenHere>,
}

/// The key in `index` that says the `active` and `dirty` trees were kept
/// by every writer since it was set. No instance id has a NUL byte (and
/// none sorts before it); the index walks of this release skip it.
const KEPT_MARKER: &[u8] = b"\0saga:active-and-dirty-kept";

/// The word of [`KEPT_MARKER`]'s value that says the `timers` tree was
/// kept too (a release before writes it empty, or this word alone).
const TIMERS_KEPT: &str = "timers";

/// Whether the marker's value `value` has the word `word`.
fn marker_says(value: &[u8], word: &str) -> bool {
    value.split(|b| *b == b'+').any(|w| w == word.as_bytes())
}

/// Whether `key` of the `index` tree is an instance's (not the marker).
fn is_instance_key(key: &[u8]) -> bool {
    key != KEPT_MARKER
}

/// The trees of the first release's layout, read once to upgrade a store.
pub(crate) const LEGACY_TREES: [&str; 5] = ["instances", "slots", "history", "rollbacks", "events"];

/// The records of one instance in the first release's layout, as bytes:
/// the instance record, then per tree the key suffixes (big-endian index)
/// and values.
pub(crate) struct LegacyInstance {
    pub(crate) id: String,
    pub(crate) record: Vec<u8>,
    pub(crate) slots: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) history: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) rollbacks: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) events: Vec<(Vec<u8>, Vec<u8>)>,
}

impl SledStore {
    /// Opens (creating with mode 0700) the store in `path`.
    pub fn open(path: &Path) -> Result<Self> {
        create_private_dir(path)
            .map_err(|e| Error::Store(format!("could not create {}: {e}", path.display())))?;
        let dir = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        let db = sled::Config::new()
            .path(path)
            .open()
            .map_err(|e| match open_error(path, e) {
                Error::StoreLocked { path } if OpenHere::holds(&dir) => {
                    Error::StoreOpenInThisProcess { path }
                }
                other => other,
            })?;
        let mut store = Self::with_db(db, Some(path.to_owned()))?;
        store._open_here = Some(OpenHere::note(dir));
        Ok(store)
    }

    /// A store in a temporary directory, removed when dropped.
    pub fn temporary() -> Result<Self> {
        let db = sled::Config::new()
            .temporary(true)
            .open()
            .map_err(sled_error)?;
        Self::with_db(db, None)
    }

    fn with_db(db: sled::Db, path: Option<PathBuf>) -> Result<Self> {
        let store = SledStore {
            journal: db.open_tree("journal").map_err(sled_error)?,
            index: db.open_tree("index").map_err(sled_error)?,
            facts: db.open_tree("facts").map_err(sled_error)?,
            by_start: db.open_tree("by_start").map_err(sled_error)?,
            schedules: db.open_tree("schedules").map_err(sled_error)?,
            queues: db.open_tree("queues").map_err(sled_error)?,
            active: db.open_tree("active").map_err(sled_error)?,
            dirty: db.open_tree("dirty").map_err(sled_error)?,
            timers: db.open_tree("timers").map_err(sled_error)?,
            ended: db.open_tree("ended").map_err(sled_error)?,
            lists: db.open_tree("lists").map_err(sled_error)?,
            lists_of: db.open_tree("lists_of").map_err(sled_error)?,
            lists_lock: std::sync::Mutex::new(()),
            lists_trusted: std::sync::atomic::AtomicBool::new(false),
            timers_trusted: std::sync::atomic::AtomicBool::new(false),
            ended_trusted: std::sync::atomic::AtomicBool::new(false),
            marked: std::sync::Mutex::default(),
            db,
            path,
            read_only: false,
            _open_here: None,
        };
        let marker = store.index.get(KEPT_MARKER).map_err(sled_error)?;
        let says = |word| marker.as_ref().is_some_and(|v| marker_says(v, word));
        // A store without instances has nothing to file.
        let empty = store
            .index
            .iter()
            .keys()
            .all(|k| k.is_ok_and(|k| !is_instance_key(&k)));
        let ordering = std::sync::atomic::Ordering::SeqCst;
        store.timers_trusted.store(says(TIMERS_KEPT), ordering);
        store
            .ended_trusted
            .store(empty || says(ended::ENDED), ordering);
        store
            .lists_trusted
            .store(empty || says(lists::LISTS), ordering);
        Ok(store)
    }

    /// The store, to read only: the journal writes nothing through it.
    pub(crate) fn reading(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// [`Error::ReadOnly`] when opened to read: every write an engine
    /// makes (a journal's first record, the index, schedules, queue
    /// limits, a removal) asks this first.
    fn refuse_if_read_only(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly {
                what: "a write to a store opened to read (EngineBuilder::open_read_only): open it with Engine::open to write".into(),
            });
        }
        Ok(())
    }

    /// The directory of the store (`None` when temporary).
    pub(crate) fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The instances of the first release's layout, if the store has any.
    pub(crate) fn legacy_instances(&self) -> Result<Vec<LegacyInstance>> {
        let names = self.db.tree_names();
        if !names
            .iter()
            .any(|n| n.as_ref() == LEGACY_TREES[0].as_bytes())
        {
            return Ok(Vec::new());
        }
        let tree = |name: &str| self.db.open_tree(name).map_err(sled_error);
        let [instances, slots, history, rollbacks, events] = [
            tree(LEGACY_TREES[0])?,
            tree(LEGACY_TREES[1])?,
            tree(LEGACY_TREES[2])?,
            tree(LEGACY_TREES[3])?,
            tree(LEGACY_TREES[4])?,
        ];
        let scan = |tree: &sled::Tree, id: &str| -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
            let prefix = instance_prefix(id);
            tree.scan_prefix(&prefix)
                .map(|entry| {
                    let (key, value) = entry.map_err(sled_error)?;
                    Ok((key[prefix.len()..].to_vec(), value.to_vec()))
                })
                .collect()
        };
        let mut out = Vec::new();
        for entry in instances.iter() {
            let (key, record) = entry.map_err(sled_error)?;
            let id = String::from_utf8_lossy(&key).into_owned();
            out.push(LegacyInstance {
                slots: scan(&slots, &id)?,
                history: scan(&history, &id)?,
                rollbacks: scan(&rollbacks, &id)?,
                events: scan(&events, &id)?,
                record: record.to_vec(),
                id,
            });
        }
        Ok(out)
    }

    /// Drops the first release's trees once their instances are in journals.
    pub(crate) fn drop_legacy_trees(&self) -> Result<()> {
        for name in LEGACY_TREES {
            self.db.drop_tree(name).map_err(sled_error)?;
        }
        Ok(())
    }

    fn insert(tree: &sled::Tree, key: &[u8], value: &[u8]) -> Result<()> {
        let n = failpoint::before(Call::Write)?;
        tree.insert(key, value).map_err(sled_error)?;
        failpoint::after(Call::Write, n)
    }

    /// Marks `id` in `dirty` before this process first writes its journal
    /// (so a record that survives a crash finds its mark there too).
    fn mark_dirty(&self, id: &str) -> Result<()> {
        self.refuse_if_read_only()?;
        let mut marked = crate::lock::lock(&self.marked);
        if marked.contains(id) {
            return Ok(());
        }
        Self::insert(&self.dirty, id.as_bytes(), &[])?;
        marked.insert(id.to_owned());
        Ok(())
    }

    /// The ids marked in `dirty`, if the marks were kept since the marker
    /// was set (`None`: a release before wrote the store since, or none
    /// set it yet).
    fn lagging_now(&self) -> Result<Option<Vec<String>>> {
        if !self.index.contains_key(KEPT_MARKER).map_err(sled_error)? {
            return Ok(None);
        }
        self.dirty
            .iter()
            .keys()
            .map(|key| Ok(String::from_utf8_lossy(&key.map_err(sled_error)?).into_owned()))
            .collect::<Result<_>>()
            .map(Some)
    }

    /// Clears the marks (every entry agrees with its journal, durably) and
    /// sets the marker.
    fn clear_marks(&self) -> Result<()> {
        let mut marked = crate::lock::lock(&self.marked);
        self.dirty.clear().map_err(sled_error)?;
        marked.clear();
        Self::insert(&self.index, KEPT_MARKER, &self.marker_value())
    }

    /// What [`KEPT_MARKER`] says: the later trees that are trusted.
    fn marker_value(&self) -> Vec<u8> {
        let ordering = std::sync::atomic::Ordering::SeqCst;
        let words = [
            (self.timers_trusted.load(ordering), TIMERS_KEPT),
            (self.ended_trusted.load(ordering), ended::ENDED),
            (self.lists_trusted.load(ordering), lists::LISTS),
        ];
        let kept: Vec<&str> = words.iter().filter(|w| w.0).map(|w| w.1).collect();
        kept.join("+").into_bytes()
    }

    /// Writes what the marker says now, where the marker says the other
    /// trees are kept too (else the repair on the next open sets it).
    fn note_marker(&self) -> Result<()> {
        if self.index.contains_key(KEPT_MARKER).map_err(sled_error)? {
            Self::insert(&self.index, KEPT_MARKER, &self.marker_value())?;
        }
        Ok(())
    }

    fn create_now(&self, id: &str, row: &IndexRow<'_>, record: &[u8]) -> Result<bool> {
        let index = row.summary;
        self.mark_dirty(id)?;
        let n = failpoint::before(Call::Write)?;
        let claimed = self
            .index
            .compare_and_swap(id.as_bytes(), None as Option<&[u8]>, Some(index))
            .map_err(sled_error)?
            .is_ok();
        failpoint::after(Call::Write, n)?;
        if !claimed && self.last_seq_now(id)?.is_some() {
            return Ok(false);
        }
        if !claimed {
            // An index entry without a journal: a create that failed half
            // way. This one takes its place.
            Self::insert(&self.index, id.as_bytes(), index)?;
        }
        let old = if row.active {
            self.add_active_with(id, row.wake)?
        } else {
            None
        };
        self.drop_old_timer(id, old)?;
        if let Some(at) = ended::ended_at(row) {
            self.file_ended_now(id, at)?;
        }
        {
            let _lock = crate::lock::lock(&self.lists_lock);
            self.file_lists(id, row)?;
        }
        self.put_facts(id, row)?;
        Self::insert(&self.journal, &key(id, 0), record)?;
        Ok(true)
    }

    /// Writes the facts of `id` and its place in start order (moved if
    /// its start time changed).
    fn put_facts(&self, id: &str, row: &IndexRow<'_>) -> Result<()> {
        let Some(facts) = &row.facts else {
            return Ok(());
        };
        let started = facts.created_at.to_be_bytes();
        let mut value = started.to_vec();
        value.extend_from_slice(facts.encoded);
        let before = self.facts.get(id.as_bytes()).map_err(sled_error)?;
        // Most status changes change no fact: nothing more to write.
        if before.as_deref() == Some(&value[..]) {
            return Ok(());
        }
        match before.as_ref().filter(|b| b.len() >= 8) {
            // Its place in start order stands.
            Some(before) if before[..8] == started => {}
            Some(before) => {
                self.by_start
                    .remove(start_key(&before[..8], id))
                    .map_err(sled_error)?;
                Self::insert(&self.by_start, &start_key(&started, id), &[])?;
            }
            None => Self::insert(&self.by_start, &start_key(&started, id), &[])?,
        }
        Self::insert(&self.facts, id.as_bytes(), &value)
    }

    /// The entry of `id`, if its summary is there.
    fn entry(&self, id: &str, started_ms: u64) -> Result<Option<IndexEntry>> {
        let Some(summary) = self.index.get(id.as_bytes()).map_err(sled_error)? else {
            return Ok(None);
        };
        let facts = self.facts.get(id.as_bytes()).map_err(sled_error)?;
        Ok(Some(IndexEntry {
            id: id.to_owned(),
            summary: summary.to_vec(),
            facts: facts.filter(|f| f.len() >= 8).map(|f| f[8..].to_vec()),
            position: PagePosition {
                started_micros: i64::try_from(started_ms.saturating_mul(1000)).unwrap_or(i64::MAX),
                id: id.to_owned(),
            },
            owner: None,
        }))
    }

    fn unindexed_now(&self, limit: usize) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for key in self.index.iter().keys() {
            let key = key.map_err(sled_error)?;
            if is_instance_key(&key) && !self.facts.contains_key(&key).map_err(sled_error)? {
                out.push(String::from_utf8_lossy(&key).into_owned());
                if out.len() == limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    fn journal_now(&self, id: &str) -> Result<Vec<(u64, Vec<u8>)>> {
        let prefix = instance_prefix(id);
        self.journal
            .scan_prefix(&prefix)
            .map(|entry| {
                let (key, value) = entry.map_err(sled_error)?;
                Ok((seq_of(id, &key[prefix.len()..])?, value.to_vec()))
            })
            .collect()
    }

    fn journal_range_now(
        &self,
        id: &str,
        seqs: std::ops::Range<u64>,
    ) -> Result<Vec<(u64, Vec<u8>)>> {
        let prefix = instance_prefix(id);
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        self.journal
            .range(key(id, seqs.start)..key(id, seqs.end))
            .map(|entry| {
                let (key, value) = entry.map_err(sled_error)?;
                Ok((seq_of(id, &key[prefix.len()..])?, value.to_vec()))
            })
            .collect()
    }

    fn last_seq_now(&self, id: &str) -> Result<Option<u64>> {
        let prefix = instance_prefix(id);
        match self.journal.scan_prefix(&prefix).keys().next_back() {
            None => Ok(None),
            Some(key) => {
                let key = key.map_err(sled_error)?;
                seq_of(id, &key[prefix.len()..]).map(Some)
            }
        }
    }

    fn index_now(&self, id: &str) -> Result<Option<Vec<u8>>> {
        Ok(self
            .index
            .get(id.as_bytes())
            .map_err(sled_error)?
            .map(|v| v.to_vec()))
    }

    fn index_entries_now(&self) -> Result<Vec<(String, Vec<u8>)>> {
        self.index
            .iter()
            .filter(|entry| entry.as_ref().map_or(true, |(key, _)| is_instance_key(key)))
            .map(|entry| {
                let (key, value) = entry.map_err(sled_error)?;
                Ok((String::from_utf8_lossy(&key).into_owned(), value.to_vec()))
            })
            .collect()
    }
}

/// Schedules and queue limits: one value per name, swapped whole.
impl SledStore {
    fn named_values(tree: &sled::Tree) -> Result<Vec<(String, Vec<u8>)>> {
        tree.iter()
            .map(|entry| {
                let (key, value) = entry.map_err(sled_error)?;
                Ok((String::from_utf8_lossy(&key).into_owned(), value.to_vec()))
            })
            .collect()
    }

    /// `new` (`None`: no value) in place of `old` under `name`; whether
    /// it was `old`.
    fn swap_named(
        tree: &sled::Tree,
        name: &str,
        old: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool> {
        let n = failpoint::before(Call::Write)?;
        let swapped = tree
            .compare_and_swap(name.as_bytes(), old, new)
            .map_err(sled_error)?
            .is_ok();
        failpoint::after(Call::Write, n)?;
        Ok(swapped)
    }
}

impl Store for SledStore {
    fn read_only(&self) -> bool {
        self.read_only
    }

    fn create<'a>(
        &'a self,
        id: &'a str,
        index: &'a IndexRow<'_>,
        record: &'a [u8],
    ) -> StoreFuture<'a, bool> {
        answered(self.create_now(id, index, record))
    }

    fn append(&self, id: &str, seq: u64, record: &[u8]) -> Result<()> {
        self.mark_dirty(id)?;
        Self::insert(&self.journal, &key(id, seq), record)
    }

    fn journal<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Vec<(u64, Vec<u8>)>> {
        answered(self.journal_now(id))
    }

    fn journal_range<'a>(
        &'a self,
        id: &'a str,
        seqs: std::ops::Range<u64>,
    ) -> StoreFuture<'a, Vec<(u64, Vec<u8>)>> {
        answered(self.journal_range_now(id, seqs))
    }

    fn last_seq<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<u64>> {
        answered(self.last_seq_now(id))
    }

    fn put_index(&self, id: &str, index: &IndexRow<'_>) -> Result<()> {
        self.refuse_if_read_only()?;
        // Filed before the entry says it ended.
        if let Some(at) = ended::ended_at(index) {
            self.file_ended_now(id, at)?;
        }
        let old = if index.active {
            self.add_active_with(id, index.wake)?
        } else {
            None
        };
        {
            let _lock = crate::lock::lock(&self.lists_lock);
            self.file_lists(id, index)?;
            Self::insert(&self.index, id.as_bytes(), index.summary)?;
        }
        if index.active {
            self.drop_old_timer(id, old)?;
        } else {
            self.drop_active(id)?;
        }
        self.put_facts(id, index)
    }

    fn timers_kept(&self) -> bool {
        self.timers_trusted
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    fn active_entries_by(&self, now: u64) -> StoreFuture<'_, ActiveSet> {
        if !self.timers_kept() {
            return answered(self.active_entries_now().map(|may_run| ActiveSet {
                may_run,
                asleep: Vec::new(),
            }));
        }
        answered(self.active_entries_by_now(now))
    }

    fn timer_of<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<(u64, bool)>> {
        let filed = self.active.get(id.as_bytes()).map_err(sled_error);
        answered(filed.map(|filed| filed.and_then(|f| timer_of_bytes(&f))))
    }

    fn timers_after<'a>(
        &'a self,
        after: Option<(u64, &'a str)>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<(u64, String, bool)>> {
        answered(self.timers_after_now(after, limit))
    }

    fn timers_rebuilt(&self) -> Result<()> {
        self.timers_trusted
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.note_marker()
    }

    fn ended_kept(&self) -> bool {
        self.ended_trusted.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn ended_until<'a>(
        &'a self,
        until: u64,
        after: Option<(u64, &'a str)>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<(u64, String)>> {
        answered(self.ended_until_now(until, after, limit))
    }

    fn file_ended(&self, id: &str, ended: u64) -> Result<()> {
        self.file_ended_now(id, ended)
    }

    fn drop_ended(&self, id: &str, ended: u64) -> Result<()> {
        self.drop_ended_now(id, ended)
    }

    fn lists_to_rebuild(&self) -> bool {
        !self.read_only && !self.lists_trusted.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn rebuild_lists<'a>(
        &'a self,
        after: Option<&'a str>,
        limit: usize,
        row_of: RowOf<'a>,
    ) -> StoreFuture<'a, Option<String>> {
        answered(self.rebuild_lists_now(after, limit, row_of))
    }

    fn ended_rebuilt(&self) -> Result<()> {
        self.ended_trusted
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.note_marker()
    }

    fn active_entries(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        answered(self.active_entries_now())
    }

    fn set_active(&self, id: &str, active: bool) -> Result<()> {
        self.refuse_if_read_only()?;
        if active {
            self.add_active(id)
        } else {
            self.drop_active(id)
        }
    }

    fn lagging(&self) -> StoreFuture<'_, Option<Vec<String>>> {
        answered(self.lagging_now())
    }

    fn clear_lagging(&self, id: &str) -> Result<()> {
        let mut marked = crate::lock::lock(&self.marked);
        if marked.remove(id) {
            self.dirty.remove(id.as_bytes()).map_err(sled_error)?;
        }
        Ok(())
    }

    fn repaired(&self) -> Result<()> {
        self.clear_marks()
    }

    fn close(&self) {
        // Every write is durable after the engine's last flush: no entry
        // lags its journal, so the next open repairs none.
        // A store whose marker is not set yet (the repair on open did not
        // finish) keeps its marks.
        let cleared = self.flush().and_then(|()| match self.lagging_now()? {
            Some(_) => self.clear_marks().and_then(|()| self.flush()),
            None => Ok(()),
        });
        if let Err(e) = cleared {
            tracing::warn!(error = %e, "could not note a clean close; the next open repairs the index entries this process wrote");
        }
    }

    fn index_page<'a>(
        &'a self,
        query: &'a IndexQuery<'a>,
        accept: Accept<'a>,
    ) -> StoreFuture<'a, IndexPage> {
        answered(self.page_now(query, accept))
    }

    fn unindexed(&self, limit: usize) -> StoreFuture<'_, Vec<String>> {
        answered(self.unindexed_now(limit))
    }

    fn index<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        answered(self.index_now(id))
    }

    fn index_entries(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        answered(self.index_entries_now())
    }

    fn remove(&self, id: &str) -> Result<()> {
        self.refuse_if_read_only()?;
        self.mark_dirty(id)?;
        let n = failpoint::before(Call::Write)?;
        for key in self.journal.scan_prefix(instance_prefix(id)).keys() {
            self.journal
                .remove(key.map_err(sled_error)?)
                .map_err(sled_error)?;
        }
        if let Some(facts) = self.facts.remove(id.as_bytes()).map_err(sled_error)?
            && facts.len() >= 8
        {
            self.by_start
                .remove(start_key(&facts[..8], id))
                .map_err(sled_error)?;
        }
        self.index.remove(id.as_bytes()).map_err(sled_error)?;
        self.drop_active(id)?;
        self.drop_lists(id)?;
        failpoint::after(Call::Write, n)
    }

    fn remove_before(&self, id: &str, seq: u64) -> Result<()> {
        self.refuse_if_read_only()?;
        let n = failpoint::before(Call::Write)?;
        // Oldest first: a crash part way leaves the later records of the
        // old runs, and the current run whole.
        for key in self.journal.range(key(id, 0)..key(id, seq)).keys() {
            self.journal
                .remove(key.map_err(sled_error)?)
                .map_err(sled_error)?;
        }
        failpoint::after(Call::Write, n)
    }

    fn queue_limits<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        let value = self.queues.get(name.as_bytes()).map_err(sled_error);
        answered(value.map(|v| v.map(|v| v.to_vec())))
    }

    fn all_queue_limits(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        answered(Self::named_values(&self.queues))
    }

    fn swap_queue_limits<'a>(
        &'a self,
        name: &'a str,
        old: Option<&'a [u8]>,
        new: &'a [u8],
    ) -> StoreFuture<'a, bool> {
        answered(Self::swap_named(&self.queues, name, old, Some(new)))
    }

    fn schedules(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        answered(Self::named_values(&self.schedules))
    }

    fn schedule<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        let value = self.schedules.get(name.as_bytes()).map_err(sled_error);
        answered(value.map(|v| v.map(|v| v.to_vec())))
    }

    fn swap_schedule<'a>(
        &'a self,
        name: &'a str,
        old: Option<&'a [u8]>,
        new: &'a [u8],
    ) -> StoreFuture<'a, bool> {
        answered(Self::swap_named(&self.schedules, name, old, Some(new)))
    }

    fn remove_schedule<'a>(&'a self, name: &'a str, old: &'a [u8]) -> StoreFuture<'a, bool> {
        answered(Self::swap_named(&self.schedules, name, Some(old), None))
    }

    fn flush(&self) -> Result<()> {
        let n = failpoint::before(Call::Flush)?;
        self.db.flush().map_err(sled_error)?;
        failpoint::after(Call::Flush, n)
    }
}

fn instance_prefix(id: &str) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(id.len() + 9);
    prefix.extend_from_slice(id.as_bytes());
    prefix.push(b'/');
    prefix
}

fn key(id: &str, seq: u64) -> Vec<u8> {
    let mut key = instance_prefix(id);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

fn seq_of(id: &str, suffix: &[u8]) -> Result<u64> {
    suffix
        .try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| Error::Corrupt {
            what: format!("journal key of instance {id:?}"),
            detail: format!("a key suffix of {} bytes, not 8", suffix.len()),
        })
}

/// sled's errors, as the store's: no sled type reaches the public API.
fn sled_error(error: sled::Error) -> Error {
    match error {
        sled::Error::Io(io) => Error::Store(format!("the sled store failed: {io}")),
        sled::Error::Corruption { at, .. } => Error::Corrupt {
            what: "the sled store".into(),
            detail: format!("damaged data at {at:?}; restore the directory from a backup"),
        },
        other => Error::Store(format!("the sled store failed: {other}")),
    }
}

/// A page as it ends: full (more may follow, from its last entry on) or
/// at the end of the walk.
fn page_end(mut page: IndexPage, full: bool) -> IndexPage {
    page.next = if full {
        page.entries.last().map(|e| e.position.clone())
    } else {
        None
    };
    page
}
