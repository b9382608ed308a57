//! `instance_counts`: how many instances the store holds in each status,
//! and how deep each queue is, counted store-wide when asked (an
//! operator's scrape), never kept up to date on the hot path.

use std::collections::BTreeMap;

use crate::engine::Engine;
use crate::error::Result;
use crate::instance::filter::{ListFilter, Page};
use crate::model::status::Status;
use crate::queue::QueueDepth;

/// What [`Engine::instance_counts`] counted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstanceCounts {
    /// Every status, with how many instances are in it (zero included,
    /// so a gauge of a status that emptied goes back to 0).
    pub statuses: Vec<(Status, u64)>,
    /// Every queue this engine declares, and every queue an instance in
    /// the store names, by name.
    pub queues: Vec<QueueDepth>,
    /// Index entries that did not read (damage; `saga check` says more).
    pub unreadable: u64,
}

/// One queue's depth while counting.
#[derive(Default)]
struct Depth {
    waiting: u64,
    started: u64,
    oldest_waiting: Option<std::time::SystemTime>,
}

/// Instances read per page while counting.
const PAGE: usize = 1000;

impl Engine {
    /// Counts the instances of the whole store by status, and the waiting
    /// and started instances of each queue, and sets the gauges
    /// `saga_instances{status}`, `saga_queue_waiting{queue}` and
    /// `saga_queue_started{queue}` (the README's metrics table) through
    /// the `metrics` facade. On a store shared by workers the counts are
    /// every worker's.
    ///
    /// It walks the store's index a page at a time (1,000 entries a
    /// read): its cost grows with the instances stored, so call it when a
    /// scraper asks (the admin endpoint's `Admin::with_store_counts`), not
    /// per request.
    ///
    /// # Cancel safety
    ///
    /// A read; dropping the future changes nothing (the gauges are set
    /// once the count is whole).
    pub async fn instance_counts(&self) -> Result<InstanceCounts> {
        let runner = self.runner();
        let mut statuses: Vec<(Status, u64)> = Status::ALL.iter().map(|s| (*s, 0)).collect();
        let mut queues: BTreeMap<String, Depth> = runner
            .queues
            .names()
            .map(|name| (name.to_owned(), Depth::default()))
            .collect();
        let mut unreadable = 0;
        let filter = ListFilter::all();
        let mut page = Page::first(PAGE).by_id();
        loop {
            let found = self.list_page(&filter, &page).await?;
            unreadable += found.unreadable.len() as u64;
            for info in &found.instances {
                match statuses.iter_mut().find(|(s, _)| *s == info.status) {
                    Some((_, n)) => *n += 1,
                    None => statuses.push((info.status, 1)),
                }
                if let Some(queue) = &info.queue {
                    let depth = queues.entry(queue.clone()).or_default();
                    if info.status == Status::Queued {
                        depth.waiting += 1;
                        let oldest = depth.oldest_waiting.get_or_insert(info.created_at);
                        *oldest = (*oldest).min(info.created_at);
                    } else if !info.status.is_terminal() {
                        depth.started += 1;
                    }
                }
            }
            match found.next {
                Some(cursor) => page = page.after(cursor),
                None => break,
            }
        }
        let stored = self.stored_queue_limits().await?;
        for (name, _) in &stored {
            queues.entry(name.clone()).or_default();
        }
        let counts = InstanceCounts {
            statuses,
            queues: queues
                .into_iter()
                .map(|(queue, depth)| QueueDepth {
                    stored: stored.iter().find(|(n, _)| *n == queue).map(|(_, l)| *l),
                    declared: runner
                        .queues
                        .declared()
                        .find(|q| q.name() == queue)
                        .map(crate::queue::Queue::declared),
                    queue,
                    waiting: depth.waiting,
                    started: depth.started,
                    oldest_waiting: depth.oldest_waiting,
                })
                .collect(),
            unreadable,
        };
        crate::metrics::instance_counts(
            counts.statuses.iter().map(|(s, n)| (s.label(), *n)),
            counts
                .queues
                .iter()
                .map(|d| (d.queue.as_str(), d.waiting, d.started)),
        );
        Ok(counts)
    }
}
