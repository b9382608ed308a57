//! `list` and `list_page`: the instances that match a filter, a page at a
//! time, from the store's index (never every instance at once).

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::instance::InstanceInfo;
use crate::instance::filter::{Cursor, ListFilter, Page};

/// A page of a walk through the instances (see [`Engine::list_page`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct InstancePage {
    /// The instances of the page that match the filter, in the page's
    /// order. A page may hold fewer than its limit while more follow.
    pub instances: Vec<InstanceInfo>,
    /// Instances of the page whose index entry does not read (damage):
    /// reported here, not hidden; `engine.instance(id)` answers the same
    /// error for each.
    pub unreadable: Vec<UnreadableInstance>,
    /// Where the next page begins; `None` when the walk is over.
    pub next: Option<Cursor>,
}

/// An instance whose index entry does not read.
#[derive(Debug)]
#[non_exhaustive]
pub struct UnreadableInstance {
    /// Its id.
    pub id: String,
    /// Why ([`Error::Corrupt`]).
    pub error: Error,
}

impl Engine {
    /// One page of the instances that match `filter`: at most the page's
    /// limit, in its order (start time then id, or id), after its
    /// cursor. The store reads only what the page needs: on sled a walk of
    /// its index in the page's order, on PostgreSQL one query on an
    /// index. Walking on with each page's `next` cursor sees every
    /// instance that matches the filter for the whole walk exactly once,
    /// while other instances start and change; one that starts during the
    /// walk may or may not be seen.
    ///
    /// # Cancel safety
    ///
    /// A read; dropping the future changes nothing.
    pub async fn list_page(&self, filter: &ListFilter, page: &Page) -> Result<InstancePage> {
        page.check()?;
        let runner = self.runner();
        let journal = &runner.core.journal;
        let server_clock = journal.server_clock();
        let accept =
            |id: &str, summary: &crate::journal::Summary, facts: &crate::journal::Facts| {
                filter.matches(
                    id,
                    summary,
                    facts,
                    runner.is_registered(&summary.workflow),
                    server_clock,
                )
            };
        let query = filter.query(page);
        let found = journal.page(&query, &accept).await?;
        let mut out = InstancePage {
            instances: Vec::new(),
            unreadable: Vec::new(),
            next: found.next.map(|p| Cursor::new(page.order(), p)),
        };
        for entry in found.entries {
            match entry.read {
                Ok((summary, facts)) => out.instances.push(InstanceInfo::from_summary(
                    runner,
                    &entry.id,
                    summary,
                    facts,
                    entry.owner,
                )),
                Err(error) => out.unreadable.push(UnreadableInstance {
                    id: entry.id,
                    error,
                }),
            }
        }
        // Only durable state: a change a crash could still take back is not
        // shown.
        journal.durable_so_far().await?;
        Ok(out)
    }

    /// The plan of the store's query for `list_page(filter, page)`
    /// (PostgreSQL's `EXPLAIN`; `None` on sled, which walks its trees).
    /// Not a stable API: for operators and tests.
    #[doc(hidden)]
    pub async fn explain_list_page(
        &self,
        filter: &ListFilter,
        page: &Page,
    ) -> Result<Option<String>> {
        page.check()?;
        let query = filter.query(page);
        self.runner().core.journal.explain_page(&query).await
    }

    /// Every instance that matches `filter`, in id order: every page of
    /// [`Engine::list_page`] in id order, gathered into one (its `next`
    /// is `None`), with the index entries that do not read apart, so one
    /// damaged entry hides no other. Materialises every match: walk
    /// `list_page` for a store of millions.
    ///
    /// # Cancel safety
    ///
    /// A read; dropping the future changes nothing.
    pub async fn list_all(&self, filter: &ListFilter) -> Result<InstancePage> {
        let mut page = Page::first(1000).by_id();
        let mut all = InstancePage {
            instances: Vec::new(),
            unreadable: Vec::new(),
            next: None,
        };
        loop {
            let found = self.list_page(filter, &page).await?;
            all.instances.extend(found.instances);
            all.unreadable.extend(found.unreadable);
            match found.next {
                Some(cursor) => page = page.after(cursor),
                None => return Ok(all),
            }
        }
    }

    /// The instances that match `filter`, in id order ([`Engine::list_all`]).
    /// An instance whose index entry does not read is [`Error::Corrupt`]
    /// naming it (and the others like it): `list_all` and `list_page`
    /// report them apart from the rest.
    ///
    /// # Cancel safety
    ///
    /// A read; dropping the future changes nothing.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<InstanceInfo>> {
        let InstancePage {
            instances,
            unreadable,
            ..
        } = self.list_all(filter).await?;
        if unreadable.is_empty() {
            return Ok(instances);
        }
        let ids: Vec<&str> = unreadable.iter().map(|u| u.id.as_str()).collect();
        Err(Error::Corrupt {
            what: format!("the index entries of instances {ids:?}"),
            detail: format!(
                "{} (the first); list_all and list_page report them apart from the others, and `engine.instance(id)` tells more",
                unreadable[0].error
            ),
        })
    }
}
