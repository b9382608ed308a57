//! Which instances `list()` and `list_page()` return, and the pages of a
//! walk through them: a cursor says where the next page begins.

use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::journal::{Facts, Summary};
use crate::model::status::Status;
use crate::store::{IndexQuery, PageOrder, PagePosition};
use crate::time::clock::from_millis;

/// Which instances `Engine::list` and `Engine::list_page` return: every
/// condition given must hold.
///
/// ```
/// # use saga_runtime::prelude::*;
/// # use std::time::{Duration, SystemTime};
/// let last_night = SystemTime::now() - Duration::from_secs(12 * 3600);
/// let filter = ListFilter::all()
///     .tag("customer", "42")
///     .rollback_failed()
///     .ended_after(last_night);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ListFilter {
    pub(crate) status: Option<Status>,
    pub(crate) workflow: Option<String>,
    unregistered: bool,
    tags: Vec<(String, String)>,
    parent: Option<String>,
    id_prefix: Option<String>,
    started_from: Option<SystemTime>,
    started_until: Option<SystemTime>,
    ended_from: Option<SystemTime>,
    ended_until: Option<SystemTime>,
    rollback_failed: bool,
    failed_compensation: bool,
    queue: Option<String>,
}

impl ListFilter {
    /// Every instance.
    pub fn all() -> Self {
        ListFilter::default()
    }

    /// Only instances in `status`.
    pub fn status(mut self, status: Status) -> Self {
        self.status = Some(status);
        self
    }

    /// Only instances of the workflow named `name`.
    pub fn workflow(mut self, name: impl Into<String>) -> Self {
        self.workflow = Some(name.into());
        self
    }

    /// Only instances whose workflow is not registered in this process.
    pub fn unregistered(mut self) -> Self {
        self.unregistered = true;
        self
    }

    /// Only instances tagged `key` = `value` (given again, every tag must
    /// match).
    pub fn tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags.push((key.into(), value.into()));
        self
    }

    /// Only instances started by instance `parent` (child workflows).
    pub fn parent(mut self, parent: impl Into<String>) -> Self {
        self.parent = Some(parent.into());
        self
    }

    /// Only instances whose id begins with `prefix`.
    pub fn id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.id_prefix = Some(prefix.into());
        self
    }

    /// Only instances started at or after `at` (on PostgreSQL, by the
    /// database's clock).
    pub fn started_after(mut self, at: SystemTime) -> Self {
        self.started_from = Some(at);
        self
    }

    /// Only instances started before `at` (on PostgreSQL, by the
    /// database's clock).
    pub fn started_before(mut self, at: SystemTime) -> Self {
        self.started_until = Some(at);
        self
    }

    /// Only instances that ended at or after `at`.
    pub fn ended_after(mut self, at: SystemTime) -> Self {
        self.ended_from = Some(at);
        self
    }

    /// Only instances that ended before `at`.
    pub fn ended_before(mut self, at: SystemTime) -> Self {
        self.ended_until = Some(at);
        self
    }

    /// Only instances whose rollback gave up (a compensation failed for
    /// good; `Instance::retry_rollback` runs it again).
    pub fn rollback_failed(mut self) -> Self {
        self.rollback_failed = true;
        self
    }

    /// Only instances a compensation of which failed at least once, even
    /// if a retried rollback completed it later.
    pub fn failed_compensation(mut self) -> Self {
        self.failed_compensation = true;
        self
    }

    /// Only instances started on queue `name` (`Engine::start_on`),
    /// waiting, running or ended; with `.status(Status::Queued)`, those
    /// that wait for a slot.
    pub fn queue(mut self, name: impl Into<String>) -> Self {
        self.queue = Some(name.into());
        self
    }

    /// The store's question for one page.
    pub(crate) fn query<'a>(&'a self, page: &'a Page) -> IndexQuery<'a> {
        IndexQuery {
            status: self.status.map(Status::label),
            workflow: self.workflow.as_deref(),
            tags: &self.tags,
            parent: self.parent.as_deref(),
            id_prefix: self.id_prefix.as_deref(),
            started_from: self.started_from,
            started_until: self.started_until,
            ended_from: self.ended_from,
            ended_until: self.ended_until,
            rollback_failed: self.rollback_failed,
            failed_compensation: self.failed_compensation,
            queue: self.queue.as_deref(),
            order: page.order,
            after: page.after.as_ref().map(|c| &c.position),
            limit: page.limit,
        }
    }

    /// Whether an instance matches. Start times are the store's to judge
    /// when it keeps a clock of its own (`server_clock`).
    pub(crate) fn matches(
        &self,
        id: &str,
        summary: &Summary,
        facts: &Facts,
        registered: bool,
        server_clock: bool,
    ) -> bool {
        let within = |at: Option<u64>, from: Option<SystemTime>, until: Option<SystemTime>| {
            let at = at.map(from_millis);
            from.is_none_or(|from| at.is_some_and(|at| at >= from))
                && until.is_none_or(|until| at.is_some_and(|at| at < until))
        };
        self.status.is_none_or(|s| s == summary.status)
            && self
                .workflow
                .as_ref()
                .is_none_or(|w| *w == summary.workflow)
            && (!self.unregistered || !registered)
            && facts.has_tags(&self.tags)
            && self
                .parent
                .as_ref()
                .is_none_or(|p| facts.parent.as_ref() == Some(p))
            && self.id_prefix.as_ref().is_none_or(|p| id.starts_with(p))
            && (server_clock
                || within(
                    Some(summary.created_at),
                    self.started_from,
                    self.started_until,
                ))
            && within(summary.finished_at, self.ended_from, self.ended_until)
            && (!self.rollback_failed || summary.rollback_failure.is_some())
            && (!self.failed_compensation || facts.failed_compensation)
            && self
                .queue
                .as_ref()
                .is_none_or(|q| facts.queue.as_ref().is_some_and(|spot| spot.queue == *q))
    }
}

/// The page of a walk to read: how many instances at most, in which
/// order, after which cursor.
///
/// ```
/// # use saga_runtime::prelude::*;
/// # async fn walk(engine: Engine) -> Result<(), saga_runtime::Error> {
/// let filter = ListFilter::all().tag("customer", "42");
/// let mut page = Page::first(100);
/// loop {
///     let found = engine.list_page(&filter, &page).await?;
///     for info in &found.instances {
///         println!("{} {}", info.id, info.status);
///     }
///     match found.next {
///         Some(cursor) => page = page.after(cursor),
///         None => break,
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    limit: usize,
    order: PageOrder,
    after: Option<Cursor>,
}

/// The most instances a page holds.
pub const MAX_PAGE: usize = 10_000;

impl Page {
    /// The first page of at most `limit` instances (1 to [`MAX_PAGE`]),
    /// by start time, then id.
    pub fn first(limit: usize) -> Page {
        Page {
            limit: limit.clamp(1, MAX_PAGE),
            order: PageOrder::Started,
            after: None,
        }
    }

    /// The same walk in id order.
    pub fn by_id(mut self) -> Page {
        self.order = PageOrder::Id;
        self
    }

    /// The page that begins after `cursor` (a page's `next`).
    pub fn after(mut self, cursor: Cursor) -> Page {
        self.after = Some(cursor);
        self
    }

    /// Its order.
    pub fn order(&self) -> PageOrder {
        self.order
    }

    /// A cursor of another order than the page's is refused.
    pub(crate) fn check(&self) -> Result<()> {
        match &self.after {
            Some(cursor) if cursor.order != self.order => Err(Error::InvalidArgument(format!(
                "cursor {cursor} is of a walk in {:?} order, and this page is in {:?} order: walk on in the cursor's order, or start from the first page",
                cursor.order, self.order
            ))),
            _ => Ok(()),
        }
    }
}

/// Where the next page of a walk begins. Opaque; it prints as a string
/// (`to_string()`) and parses back (`str::parse`), for a command line or
/// a URL.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cursor {
    order: PageOrder,
    position: PagePosition,
}

impl Cursor {
    pub(crate) fn new(order: PageOrder, position: PagePosition) -> Cursor {
        Cursor { order, position }
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.order {
            PageOrder::Started => {
                write!(f, "s{}.{}", self.position.started_micros, self.position.id)
            }
            PageOrder::Id => write!(f, "i.{}", self.position.id),
        }
    }
}

impl std::str::FromStr for Cursor {
    type Err = Error;

    /// `s<µs>.<id>` (start order) or `i.<id>` (id order).
    fn from_str(text: &str) -> Result<Cursor> {
        let invalid = || {
            Error::InvalidArgument(format!(
                "{text:?} is not a cursor: give the `next` cursor of a page as it was printed"
            ))
        };
        let (head, id) = text.split_once('.').ok_or_else(invalid)?;
        let (order, started_micros) = match head.strip_prefix('s') {
            Some(micros) => (PageOrder::Started, micros.parse().map_err(|_| invalid())?),
            None if head == "i" => (PageOrder::Id, 0),
            None => return Err(invalid()),
        };
        Ok(Cursor {
            order,
            position: PagePosition {
                started_micros,
                id: id.to_owned(),
            },
        })
    }
}
