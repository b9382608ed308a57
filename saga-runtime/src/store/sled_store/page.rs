//! A page of the sled store's index: a walk of `by_start` (start order)
//! or of `index` (id order) from the query's cursor, or of a list index
//! when the filter names a fact it keeps (`lists`).

use super::{SledStore, is_instance_key, lists, page_end, sled_error};
use crate::error::Result;
use crate::store::{Accept, IndexEntry, IndexPage, IndexQuery, PageOrder};

impl SledStore {
    /// A page: walks `by_start` (or `index`, in id order) from the
    /// query's cursor, and stops once the page is full.
    pub(super) fn page_now(&self, query: &IndexQuery<'_>, accept: Accept<'_>) -> Result<IndexPage> {
        if self.lists_trusted.load(std::sync::atomic::Ordering::SeqCst)
            && let Some(fact) = lists::walked_fact(query)
        {
            return self.page_by_fact(query, accept, &fact);
        }
        let mut page = IndexPage::default();
        let mut take = |entry: IndexEntry| {
            if accept(&entry) {
                page.entries.push(entry);
            }
            page.entries.len() < query.limit
        };
        match query.order {
            PageOrder::Started => {
                let ms = |at: std::time::SystemTime| crate::time::clock::to_millis(at);
                let from = match query.after {
                    Some(after) => {
                        let ms = u64::try_from(after.started_micros / 1000).unwrap_or(0);
                        let mut key = start_key(&ms.to_be_bytes(), &after.id);
                        // Just past the cursor's own key.
                        key.push(0);
                        key
                    }
                    None => query
                        .started_from
                        .map(ms)
                        .unwrap_or(0)
                        .to_be_bytes()
                        .to_vec(),
                };
                let until = query.started_until.map(ms);
                for key in self.by_start.range(from..).keys() {
                    let key = key.map_err(sled_error)?;
                    let Some((started, id)) = split_start_key(&key) else {
                        continue;
                    };
                    if until.is_some_and(|until| started >= until) {
                        return Ok(page_end(page, false));
                    }
                    if let Some(entry) = self.entry(id, started)?
                        && !take(entry)
                    {
                        return Ok(page_end(page, true));
                    }
                }
            }
            PageOrder::Id => {
                let prefix = query.id_prefix.unwrap_or("");
                let from = match query.after {
                    Some(after) if after.id.as_str() >= prefix => {
                        let mut key = after.id.as_bytes().to_vec();
                        key.push(0);
                        key
                    }
                    _ => prefix.as_bytes().to_vec(),
                };
                for key in self.index.range(from..).keys() {
                    let key = key.map_err(sled_error)?;
                    if !is_instance_key(&key) {
                        continue;
                    }
                    let id = String::from_utf8_lossy(&key).into_owned();
                    if !id.starts_with(prefix) {
                        return Ok(page_end(page, false));
                    }
                    let started = self
                        .facts
                        .get(&key)
                        .map_err(sled_error)?
                        .and_then(|f| f.get(..8).and_then(|b| b.try_into().ok()))
                        .map_or(0, u64::from_be_bytes);
                    if let Some(mut entry) = self.entry(&id, started)?
                        && {
                            entry.position.started_micros = 0;
                            !take(entry)
                        }
                    {
                        return Ok(page_end(page, true));
                    }
                }
            }
        }
        Ok(page_end(page, false))
    }
}

/// The `by_start` key of `id`, started at `started` (8 bytes).
pub(super) fn start_key(started: &[u8], id: &str) -> Vec<u8> {
    let mut key = started.to_vec();
    key.extend_from_slice(id.as_bytes());
    key
}

pub(super) fn split_start_key(key: &[u8]) -> Option<(u64, &str)> {
    let (started, id) = key.split_at_checked(8)?;
    Some((
        u64::from_be_bytes(started.try_into().ok()?),
        std::str::from_utf8(id).ok()?,
    ))
}
