//! One page of `list()`: the store's page of index entries, each read as
//! this engine knows it (the state of an instance cached here wins over
//! its entry, which may lag), and tested by the caller's filter.

use std::time::SystemTime;

use super::{Facts, Journal, Summary};
use crate::codec::decode_record;
use crate::error::{Error, Result};
use crate::lock::lock;
use crate::store::{IndexEntry, IndexQuery, PagePosition};

/// An entry of a page: its summary and facts, or why they do not read.
pub(crate) struct PageEntry {
    pub(crate) id: String,
    pub(crate) read: Result<(Summary, Facts)>,
    pub(crate) owner: Option<(String, SystemTime)>,
}

/// A page, and where the next begins (`None`: the walk is over).
pub(crate) struct SummaryPage {
    pub(crate) entries: Vec<PageEntry>,
    pub(crate) next: Option<PagePosition>,
}

/// The caller's filter: id, summary, facts.
pub(crate) type Filter<'a> = &'a (dyn Fn(&str, &Summary, &Facts) -> bool + Send + Sync);

impl Journal {
    /// The entries of `query`'s page that `filter` accepts, and every
    /// entry there whose summary does not read (damage, reported, not
    /// hidden).
    pub(crate) async fn page(
        &self,
        query: &IndexQuery<'_>,
        filter: Filter<'_>,
    ) -> Result<SummaryPage> {
        let accept = |entry: &IndexEntry| match self.read_entry(entry) {
            Ok((summary, facts)) => filter(&entry.id, &summary, &facts),
            Err(_) => true,
        };
        let page = self.store.index_page(query, &accept).await?;
        let mut entries = Vec::with_capacity(page.entries.len());
        for entry in page.entries {
            let read = match self.read_entry(&entry) {
                Ok(read) => Ok(read),
                Err(e) => self.rebuild_unreadable(&entry.id).await.ok_or(e),
            };
            entries.push(PageEntry {
                read,
                id: entry.id,
                owner: entry.owner,
            });
        }
        let entries = entries
            .into_iter()
            .filter(|entry| match &entry.read {
                // The store may hold a state older than the cache's: the
                // filter has the last word.
                Ok((summary, facts)) => filter(&entry.id, summary, facts),
                Err(_) => true,
            })
            .collect();
        Ok(SummaryPage {
            entries,
            next: page.next,
        })
    }

    /// The summary and facts of `id` folded from its journal, for an
    /// entry that does not read (damaged): written back, so it is rebuilt
    /// once, when it is first met. Open repairs only the entries that may
    /// lag (see `Journal::repair_on_open`), so this is where damage to an
    /// entry of a store closed cleanly is mended. `None` when this engine
    /// does not write the instance, or its journal does not fold either.
    pub(super) async fn rebuild_unreadable(&self, id: &str) -> Option<(Summary, Facts)> {
        if self.store.read_only() || !self.store.owns(id) {
            return None;
        }
        let held = self.hold_loaded(id).await.ok()?;
        let cached = held.cached();
        let loaded = cached.loaded.as_ref()?;
        if let Err(e) = self.put_summary(id, &loaded.state, loaded.next_seq) {
            tracing::warn!(instance = %id, error = %e, "could not rebuild an index entry that does not read");
        }
        let summary = Summary::of(&loaded.state, loaded.next_seq.saturating_sub(1));
        Some((summary, Facts::of(&loaded.state)))
    }

    /// The summary and facts of an entry.
    fn read_entry(&self, entry: &IndexEntry) -> Result<(Summary, Facts)> {
        let cached = lock(&self.cache).get(entry.id.as_str()).cloned();
        let cached = cached.and_then(|cached| {
            lock(&cached).loaded.as_ref().map(|l| {
                (
                    Summary::of(&l.state, l.next_seq.saturating_sub(1)),
                    Facts::of(&l.state),
                )
            })
        });
        if let Some(read) = cached {
            return Ok(read);
        }
        let corrupt = |detail| Error::Corrupt {
            what: format!("index entry of instance {:?}", entry.id),
            detail,
        };
        let mut summary = decode_record::<Summary>(&entry.summary).map_err(corrupt)?;
        let facts = match &entry.facts {
            // A newer release may append fields: the known ones are read.
            Some(bytes) => Facts::decode(bytes).map_err(corrupt)?,
            None => Facts::default(),
        };
        summary.status = facts.status(summary.status);
        Ok((summary, facts))
    }
}

/// When this process opened its first engine: since when it owns the
/// instances of a store of one process.
static OPENED: std::sync::OnceLock<SystemTime> = std::sync::OnceLock::new();

/// Notes that this process opened an engine.
pub(crate) fn note_opened() {
    OPENED.get_or_init(SystemTime::now);
}

impl Journal {
    /// Whether start times of pages are the store's clock (see
    /// [`crate::store::Store::server_clock`]).
    pub(crate) fn server_clock(&self) -> bool {
        self.store.server_clock()
    }

    /// The plan of the store's query of a page.
    pub(crate) async fn explain_page(&self, query: &IndexQuery<'_>) -> Result<Option<String>> {
        self.store.explain_page(query).await
    }

    /// The owner of `id`, and since when, on a store shared by workers.
    pub(crate) async fn owner_of(&self, id: &str) -> Result<Option<(String, SystemTime)>> {
        self.store.owner_of(id).await
    }

    /// Who drives the unfinished instances of a store of one process:
    /// this process (`None` on a store shared by workers).
    pub(crate) fn local_owner(&self) -> Option<(String, SystemTime)> {
        if self.store.shared() || self.store.read_only() {
            return None;
        }
        Some((
            format!("this process (pid {})", std::process::id()),
            *OPENED.get_or_init(SystemTime::now),
        ))
    }
}
