//! What `list()` asks of a store: one page of index entries that match a
//! filter, in start-time or id order, after a position.
//!
//! A store answers from its index without reading every entry: sled walks
//! a tree kept in the page's order and stops at the page's end; PostgreSQL
//! runs one keyset query (`WHERE (started_at, id) > ($1, $2) ORDER BY ..
//! LIMIT`) whose every condition is on an index. The engine's own test of
//! an entry ([`Accept`]) has the last word: a store may answer entries it
//! cannot judge (sled judges none), never leave out one that matches.

use std::time::SystemTime;

use super::{StoreFuture, answered};

/// The facts an index entry keeps beside its summary, for the filters of
/// `list()`: typed for the store's own columns, and `encoded` (opaque) for
/// the engine to read back.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct IndexFacts<'a> {
    /// Opaque to the store: given back in [`IndexEntry::facts`].
    pub encoded: &'a [u8],
    /// When it was started, in ms on the engine's clock.
    pub created_at: u64,
    /// When it ended, in ms on the engine's clock.
    pub finished_at: Option<u64>,
    /// The instance that started it.
    pub parent: Option<&'a str>,
    /// Its tags, by key.
    pub tags: &'a [(String, String)],
    /// Its rollback gave up.
    pub rollback_failed: bool,
    /// A compensation of it failed, once at least.
    pub failed_compensation: bool,
    /// The queue it was started on, its key and priority, and whether it
    /// holds a slot of it (taken, whether ended or not).
    pub queue: Option<QueueFacts<'a>>,
}

/// Where an instance stands in its queue, for a store that keeps it in
/// columns (see [`IndexFacts::queue`]).
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct QueueFacts<'a> {
    pub queue: &'a str,
    pub key: Option<&'a str>,
    pub priority: i32,
    /// It took a slot (`Dequeued`) and was not put back since.
    pub taken: bool,
}

/// The order of a walk through the instances.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PageOrder {
    /// By start time, then id: on PostgreSQL by the database's clock.
    #[default]
    Started,
    /// By id (bytewise).
    Id,
}

/// Where a page ended: the last entry the store looked at.
#[doc(hidden)]
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PagePosition {
    /// Its start time in µs since the Unix epoch (0 in id order).
    pub started_micros: i64,
    pub id: String,
}

/// One page's question.
#[doc(hidden)]
#[derive(Clone, Debug, Default)]
pub struct IndexQuery<'a> {
    pub status: Option<&'a str>,
    pub workflow: Option<&'a str>,
    /// Every one must match.
    pub tags: &'a [(String, String)],
    pub parent: Option<&'a str>,
    pub id_prefix: Option<&'a str>,
    /// Started at or after.
    pub started_from: Option<SystemTime>,
    /// Started before.
    pub started_until: Option<SystemTime>,
    /// Ended at or after.
    pub ended_from: Option<SystemTime>,
    /// Ended before.
    pub ended_until: Option<SystemTime>,
    pub rollback_failed: bool,
    pub failed_compensation: bool,
    /// On this queue (`start_on`).
    pub queue: Option<&'a str>,
    pub order: PageOrder,
    pub after: Option<&'a PagePosition>,
    /// At most this many entries.
    pub limit: usize,
}

/// An entry of a page.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct IndexEntry {
    pub id: String,
    /// The encoded summary.
    pub summary: Vec<u8>,
    /// The encoded facts ([`IndexFacts::encoded`]); `None` for an entry
    /// written before there were any (backfilled on open or claim).
    pub facts: Option<Vec<u8>>,
    pub position: PagePosition,
    /// The worker that owns it and since when, on a store shared by
    /// workers.
    pub owner: Option<(String, SystemTime)>,
}

/// A page: its entries, and where the next one begins (`None`: the walk
/// is over).
#[doc(hidden)]
#[derive(Clone, Debug, Default)]
pub struct IndexPage {
    pub entries: Vec<IndexEntry>,
    pub next: Option<PagePosition>,
}

/// The engine's test of an entry.
#[doc(hidden)]
pub type Accept<'a> = &'a (dyn Fn(&IndexEntry) -> bool + Send + Sync);

/// How the engine makes an instance's index row from its stored entry
/// (id, summary, facts if any), for a store that refiles its own indexes
/// of the rows ([`Store::rebuild_lists`](super::Store::rebuild_lists)):
/// it hands the row to the store's continuation. An entry that does not
/// read is skipped.
#[doc(hidden)]
pub type RowOf<'a> = &'a (
        dyn Fn(
    &str,
    &[u8],
    Option<&[u8]>,
    &mut dyn FnMut(&super::IndexRow<'_>) -> crate::error::Result<()>,
) -> crate::error::Result<()>
            + Send
            + Sync
    );

/// A page from every entry at once: for stores that keep no order of
/// their own (test stores). It reads the whole index.
pub(crate) fn page_of_all<'a>(
    entries: Vec<(String, Vec<u8>)>,
    query: &IndexQuery<'_>,
    accept: Accept<'a>,
) -> StoreFuture<'a, IndexPage> {
    let mut page = IndexPage::default();
    let after = query.after.map(|p| p.id.as_str());
    for (id, summary) in entries {
        if after.is_some_and(|after| id.as_str() <= after) {
            continue;
        }
        let entry = IndexEntry {
            position: PagePosition {
                started_micros: 0,
                id: id.clone(),
            },
            id,
            summary,
            facts: None,
            owner: None,
        };
        if page.entries.len() == query.limit {
            page.next = page.entries.last().map(|e| e.position.clone());
            break;
        }
        if accept(&entry) {
            page.entries.push(entry);
        }
    }
    answered(Ok(page))
}
