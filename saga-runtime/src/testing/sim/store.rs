//! A store in memory that can fail as a disk does: its durable part kept
//! apart from the writes not flushed yet, faults drawn from a seed, and a
//! crash that keeps the durable part and a prefix of the rest.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::lock::lock;
use crate::seeded::{SimRng, TraceHash};
use crate::store::{
    Accept, IndexEntry, IndexPage, IndexQuery, IndexRow, PageOrder, PagePosition, Store,
    StoreFuture, answered,
};

/// Journals by instance, each its records in order: sequence number and
/// bytes.
pub type Journals = BTreeMap<String, Vec<(u64, Vec<u8>)>>;

/// The faults a [`SimDisk`] injects, each a chance in 1,000 per call.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimFaults {
    /// A write (append, index, remove, schedule) fails, and is not made.
    pub failed_write: u32,
    /// A flush fails: what it would have made durable stays pending.
    pub failed_flush: u32,
    /// A read (or a create, a schedule's swap) answers only after a delay
    /// on the runtime's clock, up to `max_delay`.
    pub slow: u32,
    /// The longest delay of a slow call.
    pub max_delay: Duration,
}

/// What one process's crash leaves: a simulated disk, shared by the
/// stores opened on it one after the other ([`SimDisk::open`]).
///
/// Every write goes to the view the running process reads, and to a
/// list of pending writes; a flush makes the pending writes durable. A
/// [`crash`](SimDisk::crash) keeps the durable part and a prefix of the
/// pending writes (never a write without the ones before it, as the
/// store contract says), and fails every store opened before it.
#[derive(Clone)]
pub struct SimDisk {
    disk: Arc<Mutex<Disk>>,
}

/// The data of a store: journals, index summaries, schedule states and
/// queue limits.
#[derive(Clone, Default, PartialEq, Eq)]
struct Data {
    journals: BTreeMap<String, BTreeMap<u64, Vec<u8>>>,
    index: BTreeMap<String, Entry>,
    schedules: BTreeMap<String, Vec<u8>>,
    queues: BTreeMap<String, Vec<u8>>,
}

/// Which values of one per name a write changes.
#[derive(Clone, Copy)]
enum Named {
    Schedules,
    Queues,
}

impl Data {
    fn named(&self, table: Named) -> &BTreeMap<String, Vec<u8>> {
        match table {
            Named::Schedules => &self.schedules,
            Named::Queues => &self.queues,
        }
    }

    fn named_mut(&mut self, table: Named) -> &mut BTreeMap<String, Vec<u8>> {
        match table {
            Named::Schedules => &mut self.schedules,
            Named::Queues => &mut self.queues,
        }
    }
}

/// An index entry: its summary, and the facts `list()` filters on with
/// the start time it orders by (kept from the last write that had them).
#[derive(Clone, Default, PartialEq, Eq)]
struct Entry {
    summary: Vec<u8>,
    facts: Option<(u64, Vec<u8>)>,
}

/// One write, as it reaches the disk.
enum Write {
    Record {
        id: String,
        seq: u64,
        bytes: Vec<u8>,
    },
    Index {
        id: String,
        summary: Vec<u8>,
        facts: Option<(u64, Vec<u8>)>,
    },
    Remove {
        id: String,
    },
    RemoveBefore {
        id: String,
        seq: u64,
    },
    Named {
        table: Named,
        name: String,
        value: Option<Vec<u8>>,
    },
}

struct Disk {
    durable: Data,
    /// What the running process reads: `durable` with `pending` applied.
    live: Data,
    pending: Vec<Write>,
    /// Bumped by each crash: a store of an older one fails every call.
    generation: u64,
    rng: SimRng,
    faults: SimFaults,
    injected: u64,
    /// Writes left before an armed crash ([`SimDisk::crash_at_write`]).
    crash_in: Option<u64>,
    /// Crashes that an armed write set off.
    armed_crashes: u64,
    trace: TraceHash,
}

impl Data {
    fn apply(&mut self, write: &Write) {
        match write {
            Write::Record { id, seq, bytes } => {
                self.journals
                    .entry(id.clone())
                    .or_default()
                    .insert(*seq, bytes.clone());
            }
            Write::Index { id, summary, facts } => {
                let entry = self.index.entry(id.clone()).or_default();
                entry.summary.clone_from(summary);
                if facts.is_some() {
                    entry.facts.clone_from(facts);
                }
            }
            Write::Remove { id } => {
                self.journals.remove(id);
                self.index.remove(id);
            }
            Write::RemoveBefore { id, seq } => {
                if let Some(journal) = self.journals.get_mut(id) {
                    journal.retain(|at, _| at >= seq);
                }
            }
            Write::Named { table, name, value } => match value {
                Some(value) => {
                    self.named_mut(*table).insert(name.clone(), value.clone());
                }
                None => {
                    self.named_mut(*table).remove(name);
                }
            },
        }
    }

    fn has_journal(&self, id: &str) -> bool {
        self.journals.get(id).is_some_and(|j| !j.is_empty())
    }
}

impl Write {
    /// Its bytes in the run's trace.
    fn trace(&self, trace: &mut TraceHash) {
        let (tag, key, seq, bytes): (u8, &str, u64, &[u8]) = match self {
            Write::Record { id, seq, bytes } => (0, id, *seq, bytes),
            Write::Index { id, summary, .. } => (1, id, 0, summary),
            Write::Remove { id } => (2, id, 0, &[]),
            Write::RemoveBefore { id, seq } => (3, id, *seq, &[]),
            Write::Named {
                table: Named::Schedules,
                name,
                value,
            } => (4, name, 0, value.as_deref().unwrap_or(&[])),
            Write::Named {
                table: Named::Queues,
                name,
                value,
            } => (5, name, 0, value.as_deref().unwrap_or(&[])),
        };
        trace.add(&[tag]);
        trace.add(key.as_bytes());
        trace.add(&seq.to_le_bytes());
        trace.add(bytes);
    }
}

impl Disk {
    /// Keeps the durable part and a seeded prefix of the pending writes;
    /// the stores opened before fail from now on.
    fn crash(&mut self) -> (usize, usize) {
        let pending = std::mem::take(&mut self.pending);
        let kept = usize::try_from(self.rng.below(pending.len() as u64 + 1)).unwrap_or(0);
        for write in &pending[..kept] {
            self.durable.apply(write);
        }
        self.live = self.durable.clone();
        self.generation += 1;
        self.crash_in = None;
        (kept, pending.len() - kept)
    }
}

impl SimDisk {
    /// An empty disk whose faults and crashes draw from `seed`.
    pub fn new(seed: u64) -> SimDisk {
        SimDisk {
            disk: Arc::new(Mutex::new(Disk {
                durable: Data::default(),
                live: Data::default(),
                pending: Vec::new(),
                generation: 0,
                rng: SimRng::new(seed),
                faults: SimFaults::default(),
                injected: 0,
                crash_in: None,
                armed_crashes: 0,
                trace: TraceHash::default(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Disk> {
        lock(&self.disk)
    }

    /// The store of a process that opens the disk now.
    pub fn open(&self) -> SimStore {
        SimStore {
            disk: self.clone(),
            generation: self.lock().generation,
        }
    }

    /// The faults to inject from now on (none at first).
    pub fn set_faults(&self, faults: SimFaults) {
        self.lock().faults = faults;
    }

    /// The process crashes: the durable part stays, with a prefix (drawn
    /// from the seed) of the writes not flushed yet, and every store
    /// opened before fails from now on. Returns how many pending writes
    /// were kept and how many lost.
    pub fn crash(&self) -> (usize, usize) {
        self.lock().crash()
    }

    /// Arms a crash at the `n`th write from now (0: the next): the write
    /// is not made, the process crashes there ([`crash`](SimDisk::crash)),
    /// and [`armed_crashes`](SimDisk::armed_crashes) counts it. A crash
    /// between any two records, as a kill lands.
    pub fn crash_at_write(&self, n: u64) {
        self.lock().crash_in = Some(n);
    }

    /// Takes back a crash armed and not gone off.
    pub fn disarm(&self) {
        self.lock().crash_in = None;
    }

    /// How many armed crashes went off so far.
    pub fn armed_crashes(&self) -> u64 {
        self.lock().armed_crashes
    }

    /// How many faults were injected so far.
    pub fn faults_injected(&self) -> u64 {
        self.lock().injected
    }

    /// A hash of every write made so far, in order: two runs that wrote
    /// the same bytes in the same order have the same hash.
    pub fn trace_hash(&self) -> u64 {
        self.lock().trace.value()
    }

    /// Every durable journal, by instance: what a crash now would keep
    /// at least.
    pub fn durable_journals(&self) -> Journals {
        let disk = self.lock();
        disk.durable
            .journals
            .iter()
            .map(|(id, j)| (id.clone(), j.iter().map(|(s, r)| (*s, r.clone())).collect()))
            .collect()
    }
}

/// The store a process opened on a [`SimDisk`]: what an engine takes
/// (`Engine::builder().open_store(Arc::new(disk.open()))`). Every call fails once
/// the disk crashed after it was opened.
pub struct SimStore {
    disk: SimDisk,
    generation: u64,
}

impl SimStore {
    /// The disk, locked, if this store's process has not crashed.
    fn disk(&self) -> Result<MutexGuard<'_, Disk>> {
        let disk = self.disk.lock();
        if disk.generation != self.generation {
            return Err(Error::Store("the simulated process crashed".into()));
        }
        Ok(disk)
    }

    /// Makes `writes`, unless a fault drawn now fails them.
    fn write(&self, writes: Vec<Write>) -> Result<()> {
        let mut disk = self.disk()?;
        match disk.crash_in {
            Some(0) => {
                disk.crash();
                disk.armed_crashes += 1;
                return Err(Error::Store("the simulated process crashed".into()));
            }
            Some(n) => disk.crash_in = Some(n - 1),
            None => {}
        }
        let chance = disk.faults.failed_write;
        if disk.rng.chance(chance) {
            disk.injected += 1;
            return Err(Error::Store("simulated write failure".into()));
        }
        for write in writes {
            let disk = &mut *disk;
            write.trace(&mut disk.trace);
            disk.live.apply(&write);
            disk.pending.push(write);
        }
        Ok(())
    }

    /// Answers `read` of the live data, at once or, slow, after a delay.
    fn answer<'a, T: Send + 'a>(
        &'a self,
        read: impl FnOnce(&SimStore) -> Result<T> + Send + 'a,
    ) -> StoreFuture<'a, T> {
        let delay = match self.disk() {
            Ok(mut disk) => {
                let (slow, max) = (disk.faults.slow, disk.faults.max_delay);
                let millis = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
                disk.rng
                    .chance(slow)
                    .then(|| Duration::from_millis(1 + disk.rng.below(millis)))
            }
            Err(e) => return answered(Err(e)),
        };
        match delay {
            None => answered(read(self)),
            Some(delay) => Box::pin(async move {
                tokio::time::sleep(delay).await;
                read(self)
            }),
        }
    }

    fn create_now(&self, id: &str, index: &IndexRow<'_>, record: &[u8]) -> Result<bool> {
        if self.disk()?.live.has_journal(id) {
            return Ok(false);
        }
        // An index entry without a journal is a create cut short: this
        // one takes its place.
        self.write(vec![
            index_write(id, index),
            Write::Record {
                id: id.to_owned(),
                seq: 0,
                bytes: record.to_vec(),
            },
        ])?;
        Ok(true)
    }

    fn records(&self, id: &str, seqs: std::ops::Range<u64>) -> Result<Vec<(u64, Vec<u8>)>> {
        let disk = self.disk()?;
        Ok(match disk.live.journals.get(id) {
            Some(journal) if !seqs.is_empty() => journal
                .range(seqs)
                .map(|(seq, bytes)| (*seq, bytes.clone()))
                .collect(),
            _ => Vec::new(),
        })
    }

    fn swap_now(
        &self,
        table: Named,
        name: &str,
        old: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool> {
        if self.disk()?.live.named(table).get(name).map(Vec::as_slice) != old {
            return Ok(false);
        }
        self.write(vec![Write::Named {
            table,
            name: name.to_owned(),
            value: new.map(<[u8]>::to_vec),
        }])?;
        Ok(true)
    }

    fn all_named(&self, table: Named) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(self
            .disk()?
            .live
            .named(table)
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect())
    }
}

fn index_write(id: &str, index: &IndexRow<'_>) -> Write {
    Write::Index {
        id: id.to_owned(),
        summary: index.summary.to_vec(),
        facts: index
            .facts
            .map(|facts| (facts.created_at, facts.encoded.to_vec())),
    }
}

/// One page of `list()`, as sled walks it: in start order (or id order,
/// under a prefix) after the query's position, each entry `accept`ed.
fn page(data: &Data, query: &IndexQuery<'_>, accept: Accept<'_>) -> IndexPage {
    let to_millis = crate::time::clock::to_millis;
    let started_ms = |entry: &Entry| entry.facts.as_ref().map_or(0, |(at, _)| *at);
    let mut walk: Vec<(u64, &String, &Entry)> = match query.order {
        PageOrder::Started => {
            let from = query.started_from.map_or(0, to_millis);
            let until = query.started_until.map_or(u64::MAX, to_millis);
            let mut walk: Vec<_> = data
                .index
                .iter()
                .filter(|(_, e)| e.facts.is_some())
                .map(|(id, e)| (started_ms(e), id, e))
                .filter(|(at, _, _)| (from..until).contains(at))
                .collect();
            walk.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
            walk
        }
        PageOrder::Id => {
            let prefix = query.id_prefix.unwrap_or("");
            data.index
                .range(prefix.to_owned()..)
                .take_while(|(id, _)| id.starts_with(prefix))
                .map(|(id, e)| (0, id, e))
                .collect()
        }
    };
    if let Some(after) = query.after {
        let after_ms = u64::try_from(after.started_micros / 1000).unwrap_or(0);
        walk.retain(|(at, id, _)| (*at, id.as_str()) > (after_ms, after.id.as_str()));
    }
    let mut page = IndexPage::default();
    for (at, id, entry) in walk {
        let entry = IndexEntry {
            id: id.clone(),
            summary: entry.summary.clone(),
            facts: entry.facts.as_ref().map(|(_, facts)| facts.clone()),
            position: PagePosition {
                started_micros: i64::try_from(at.saturating_mul(1000)).unwrap_or(i64::MAX),
                id: id.clone(),
            },
            owner: None,
        };
        if accept(&entry) {
            page.entries.push(entry);
            if page.entries.len() >= query.limit {
                page.next = page.entries.last().map(|e| e.position.clone());
                break;
            }
        }
    }
    page
}

impl Store for SimStore {
    fn create<'a>(
        &'a self,
        id: &'a str,
        index: &'a IndexRow<'_>,
        record: &'a [u8],
    ) -> StoreFuture<'a, bool> {
        self.answer(move |store| store.create_now(id, index, record))
    }

    fn append(&self, id: &str, seq: u64, record: &[u8]) -> Result<()> {
        self.write(vec![Write::Record {
            id: id.to_owned(),
            seq,
            bytes: record.to_vec(),
        }])
    }

    fn journal<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Vec<(u64, Vec<u8>)>> {
        self.answer(move |store| store.records(id, 0..u64::MAX))
    }

    fn journal_range<'a>(
        &'a self,
        id: &'a str,
        seqs: std::ops::Range<u64>,
    ) -> StoreFuture<'a, Vec<(u64, Vec<u8>)>> {
        self.answer(move |store| store.records(id, seqs))
    }

    fn last_seq<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<u64>> {
        self.answer(move |store| {
            let disk = store.disk()?;
            Ok(disk
                .live
                .journals
                .get(id)
                .and_then(|j| j.keys().next_back().copied()))
        })
    }

    fn put_index(&self, id: &str, index: &IndexRow<'_>) -> Result<()> {
        self.write(vec![index_write(id, index)])
    }

    fn index<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        self.answer(move |store| Ok(store.disk()?.live.index.get(id).map(|e| e.summary.clone())))
    }

    fn index_page<'a>(
        &'a self,
        query: &'a IndexQuery<'a>,
        accept: Accept<'a>,
    ) -> StoreFuture<'a, IndexPage> {
        self.answer(move |store| Ok(page(&store.disk()?.live, query, accept)))
    }

    fn index_entries(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        self.answer(|store| {
            let disk = store.disk()?;
            Ok(disk
                .live
                .index
                .iter()
                .map(|(id, entry)| (id.clone(), entry.summary.clone()))
                .collect())
        })
    }

    fn remove(&self, id: &str) -> Result<()> {
        self.write(vec![Write::Remove { id: id.to_owned() }])
    }

    fn remove_before(&self, id: &str, seq: u64) -> Result<()> {
        self.write(vec![Write::RemoveBefore {
            id: id.to_owned(),
            seq,
        }])
    }

    fn flush(&self) -> Result<()> {
        let mut disk = self.disk()?;
        let chance = disk.faults.failed_flush;
        if disk.rng.chance(chance) {
            disk.injected += 1;
            return Err(Error::Store("simulated flush failure".into()));
        }
        let disk = &mut *disk;
        for write in disk.pending.drain(..) {
            disk.durable.apply(&write);
        }
        Ok(())
    }

    fn flushes_inline(&self) -> bool {
        true
    }

    fn queue_limits<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        self.answer(move |store| Ok(store.disk()?.live.queues.get(name).cloned()))
    }

    fn all_queue_limits(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        self.answer(|store| store.all_named(Named::Queues))
    }

    fn swap_queue_limits<'a>(
        &'a self,
        name: &'a str,
        old: Option<&'a [u8]>,
        new: &'a [u8],
    ) -> StoreFuture<'a, bool> {
        self.answer(move |store| store.swap_now(Named::Queues, name, old, Some(new)))
    }

    fn schedules(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        self.answer(|store| store.all_named(Named::Schedules))
    }

    fn schedule<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        self.answer(move |store| Ok(store.disk()?.live.schedules.get(name).cloned()))
    }

    fn swap_schedule<'a>(
        &'a self,
        name: &'a str,
        old: Option<&'a [u8]>,
        new: &'a [u8],
    ) -> StoreFuture<'a, bool> {
        self.answer(move |store| store.swap_now(Named::Schedules, name, old, Some(new)))
    }

    fn remove_schedule<'a>(&'a self, name: &'a str, old: &'a [u8]) -> StoreFuture<'a, bool> {
        self.answer(move |store| store.swap_now(Named::Schedules, name, Some(old), None))
    }
}

#[cfg(test)]
mod tests {
    use super::SimDisk;
    use crate::store::Store;

    #[test]
    fn a_crash_keeps_what_was_flushed_and_a_prefix_of_the_rest() {
        for seed in 0..20 {
            let disk = SimDisk::new(seed);
            let store = disk.open();
            store.append("a", 0, b"r0").unwrap();
            store.flush().unwrap();
            for seq in 1..10 {
                store.append("a", seq, b"r").unwrap();
            }
            let (kept, lost) = disk.crash();
            assert_eq!(kept + lost, 9);
            let journal = &disk.durable_journals()["a"];
            let seqs: Vec<u64> = journal.iter().map(|(seq, _)| *seq).collect();
            assert_eq!(seqs, (0..=kept as u64).collect::<Vec<_>>());
            assert!(
                store.append("a", 10, b"r").is_err(),
                "a crashed process writes on"
            );
            let reopened = disk.open();
            let last = crate::store::now_or_never(reopened.last_seq("a"))
                .unwrap()
                .unwrap();
            assert_eq!(last, Some(kept as u64));
        }
    }
}
