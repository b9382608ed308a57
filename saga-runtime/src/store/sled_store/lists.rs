//! The list indexes of the sled store: a filtered page walks the keys of
//! the instances that have the filter's most selective fact, from its
//! cursor, instead of every instance in the page's order.
//!
//! - `lists`: per fact of an instance, two empty keys: `S<fact><big-endian
//!   u64 ms started><id>` (start order) and `I<fact><id>` (id order). A
//!   fact is a kind byte, then its parts, each a big-endian u32 length
//!   and its bytes: `w` its workflow, `q` its queue, `p` its parent, `t` a
//!   tag (key, value), `e` whether it ended (`1`) or not (`0`). Only facts
//!   that never change or change once: a status change that does not end
//!   an instance writes no key.
//! - `lists_of`: key `<id>`, its start time (8 bytes) and its facts (each
//!   a u32 length and the fact), as filed: a change of them is written as
//!   the keys to add and to remove.
//!
//! Keys are written (under [`SledStore::lists_lock`]) before the index
//! entry that has the facts, in the same call, so a walk misses no
//! instance; a crash leaves at most extra keys, which the engine's test of
//! each entry rejects (and a start-order key whose start time is not the
//! instance's is skipped, so none is seen twice).
//!
//! They are trusted when the marker says `lists` (or the store is empty):
//! a release before does not keep them, and the engine then refiles every
//! entry in the background, a batch at a time
//! ([`Store::rebuild_lists`](crate::store::Store::rebuild_lists)), while
//! pages walk as before.

use super::{SledStore, is_instance_key, sled_error};
use crate::error::Result;
use crate::store::{IndexQuery, IndexRow, PageOrder, RowOf};

/// The marker's word that says the list indexes were kept.
pub(super) const LISTS: &str = "lists";

/// A fact: `kind`, then each part length-prefixed.
fn fact(kind: u8, parts: &[&str]) -> Vec<u8> {
    let mut out = vec![kind];
    for part in parts {
        let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(part.as_bytes());
    }
    out
}

/// Whether a status (as `Status` labels it) is an end.
fn ended_label(status: &str) -> bool {
    matches!(
        status,
        "complete" | "errored" | "terminated" | "compensated"
    )
}

/// The facts of `row`, and its start time; `None` for a row without facts
/// (a store test's), which files none.
fn facts_of(row: &IndexRow<'_>) -> Option<(u64, Vec<Vec<u8>>)> {
    let facts = row.facts.as_ref()?;
    let mut out = vec![fact(
        b'e',
        &[if ended_label(row.status) { "1" } else { "0" }],
    )];
    if !row.workflow.is_empty() {
        out.push(fact(b'w', &[row.workflow]));
    }
    if let Some(queue) = &facts.queue {
        out.push(fact(b'q', &[queue.queue]));
    }
    if let Some(parent) = facts.parent {
        out.push(fact(b'p', &[parent]));
    }
    for (key, value) in facts.tags {
        out.push(fact(b't', &[key, value]));
    }
    out.sort();
    out.dedup();
    Some((facts.created_at, out))
}

/// `lists_of`'s value for `started` and `facts`.
fn encode(started: u64, facts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = started.to_be_bytes().to_vec();
    for fact in facts {
        let len = u32::try_from(fact.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(fact);
    }
    out
}

/// The start time and facts in `lists_of`'s value `bytes` (what does not
/// read is left out).
fn decode(bytes: &[u8]) -> (u64, Vec<Vec<u8>>) {
    let Some((started, mut rest)) = bytes.split_at_checked(8) else {
        return (0, Vec::new());
    };
    let started = u64::from_be_bytes(started.try_into().unwrap_or([0; 8]));
    let mut facts = Vec::new();
    while let Some((len, after)) = rest.split_at_checked(4) {
        let len = u32::from_be_bytes(len.try_into().unwrap_or([0; 4])) as usize;
        let Some((fact, after)) = after.split_at_checked(len) else {
            break;
        };
        facts.push(fact.to_vec());
        rest = after;
    }
    (started, facts)
}

/// The two keys of `id` under `fact`, started at `started`.
fn keys(fact: &[u8], started: u64, id: &str) -> [Vec<u8>; 2] {
    let mut by_start = vec![b'S'];
    by_start.extend_from_slice(fact);
    by_start.extend_from_slice(&started.to_be_bytes());
    by_start.extend_from_slice(id.as_bytes());
    let mut by_id = vec![b'I'];
    by_id.extend_from_slice(fact);
    by_id.extend_from_slice(id.as_bytes());
    [by_start, by_id]
}

/// The fact whose keys a page of `query` walks: the most selective of
/// its filters that a fact keeps.
pub(super) fn walked_fact(query: &IndexQuery<'_>) -> Option<Vec<u8>> {
    if let Some(parent) = query.parent {
        return Some(fact(b'p', &[parent]));
    }
    if let Some((key, value)) = query.tags.first() {
        return Some(fact(b't', &[key, value]));
    }
    if let Some(queue) = query.queue {
        return Some(fact(b'q', &[queue]));
    }
    if let Some(workflow) = query.workflow {
        return Some(fact(b'w', &[workflow]));
    }
    let status = query.status?;
    Some(fact(b'e', &[if ended_label(status) { "1" } else { "0" }]))
}

/// The prefix of the keys a walk of `fact` in `order` reads.
pub(super) fn walk_prefix(fact: &[u8], order: PageOrder) -> Vec<u8> {
    let mut prefix = vec![if order == PageOrder::Id { b'I' } else { b'S' }];
    prefix.extend_from_slice(fact);
    prefix
}

impl SledStore {
    /// Files the facts of `row` for `id` (the caller holds
    /// [`SledStore::lists_lock`], and writes the entry next): the keys of
    /// new facts first, then the record of them, then the keys of facts
    /// it no longer has.
    pub(super) fn file_lists(&self, id: &str, row: &IndexRow<'_>) -> Result<()> {
        let Some((started, facts)) = facts_of(row) else {
            return Ok(());
        };
        let value = encode(started, &facts);
        let before = self.lists_of.get(id.as_bytes()).map_err(sled_error)?;
        if before.as_deref() == Some(&value[..]) {
            return Ok(());
        }
        let (was_started, had) = before.as_deref().map(decode).unwrap_or_default();
        let had_before = before.is_some();
        for fact in &facts {
            if !(had_before && was_started == started && had.contains(fact)) {
                for key in keys(fact, started, id) {
                    Self::insert(&self.lists, &key, &[])?;
                }
            }
        }
        Self::insert(&self.lists_of, id.as_bytes(), &value)?;
        for fact in &had {
            let kept = facts.contains(fact);
            let [by_start, by_id] = keys(fact, was_started, id);
            if !(kept && was_started == started) {
                self.lists.remove(by_start).map_err(sled_error)?;
            }
            if !kept {
                self.lists.remove(by_id).map_err(sled_error)?;
            }
        }
        Ok(())
    }

    /// Removes the keys of `id` (removed).
    pub(super) fn drop_lists(&self, id: &str) -> Result<()> {
        let _lock = crate::lock::lock(&self.lists_lock);
        if let Some(before) = self.lists_of.get(id.as_bytes()).map_err(sled_error)? {
            let (started, facts) = decode(&before);
            for fact in &facts {
                for key in keys(fact, started, id) {
                    self.lists.remove(key).map_err(sled_error)?;
                }
            }
            self.lists_of.remove(id.as_bytes()).map_err(sled_error)?;
        }
        Ok(())
    }

    /// See [`Store::rebuild_lists`](crate::store::Store::rebuild_lists).
    pub(super) fn rebuild_lists_now(
        &self,
        after: Option<&str>,
        limit: usize,
        row_of: RowOf<'_>,
    ) -> Result<Option<String>> {
        self.refuse_if_read_only()?;
        let from = match after {
            Some(after) => {
                let mut key = after.as_bytes().to_vec();
                key.push(0);
                key
            }
            None => Vec::new(),
        };
        let mut last = None;
        let mut walked = 0;
        for key in self.index.range(from..).keys() {
            let key = key.map_err(sled_error)?;
            if !is_instance_key(&key) {
                continue;
            }
            if walked == limit {
                return Ok(last);
            }
            walked += 1;
            let id = String::from_utf8_lossy(&key).into_owned();
            // Under the lock the entry is the latest: no write of it
            // comes between its read and its keys.
            let _lock = crate::lock::lock(&self.lists_lock);
            if let Some(summary) = self.index.get(&key).map_err(sled_error)? {
                let facts = self.facts.get(&key).map_err(sled_error)?;
                let facts = facts.as_deref().and_then(|f| f.get(8..));
                row_of(&id, &summary, facts, &mut |row| self.file_lists(&id, row))?;
            }
            last = Some(id);
        }
        self.lists_trusted
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.note_marker()?;
        Ok(None)
    }
}

/// A page walked through the list indexes.
impl SledStore {
    /// A page of `query` from the keys of `fact`, from its cursor, in its
    /// order: the entries, positions and cursors a walk of the whole
    /// order gives, without the instances that lack the fact.
    pub(super) fn page_by_fact(
        &self,
        query: &IndexQuery<'_>,
        accept: crate::store::Accept<'_>,
        fact: &[u8],
    ) -> Result<crate::store::IndexPage> {
        let prefix = walk_prefix(fact, query.order);
        let mut page = crate::store::IndexPage::default();
        let from = self.walk_from(query, &prefix);
        let until = query.started_until.map(crate::time::clock::to_millis);
        let id_prefix = query.id_prefix.unwrap_or("");
        for key in self.lists.range(from..).keys() {
            let key = key.map_err(sled_error)?;
            let Some(rest) = key.strip_prefix(prefix.as_slice()) else {
                break;
            };
            let (started, id) = match query.order {
                PageOrder::Id => {
                    let id = String::from_utf8_lossy(rest).into_owned();
                    if !id.starts_with(id_prefix) {
                        break;
                    }
                    (None, id)
                }
                _ => {
                    let Some((started, id)) = super::split_start_key(rest) else {
                        continue;
                    };
                    if until.is_some_and(|until| started >= until) {
                        break;
                    }
                    (Some(started), id.to_owned())
                }
            };
            let filed = self.started_of(&id)?;
            // A key left by a crash, of a start time moved since.
            if started.is_some_and(|started| Some(started) != filed) {
                continue;
            }
            let Some(mut entry) = self.entry(&id, filed.unwrap_or(0))? else {
                continue;
            };
            if started.is_none() {
                entry.position.started_micros = 0;
            }
            if accept(&entry) {
                page.entries.push(entry);
            }
            if page.entries.len() >= query.limit {
                return Ok(super::page_end(page, true));
            }
        }
        Ok(super::page_end(page, false))
    }

    /// Where a walk of `prefix` begins: just past the query's cursor, or
    /// at its first start time (id prefix).
    fn walk_from(&self, query: &IndexQuery<'_>, prefix: &[u8]) -> Vec<u8> {
        let mut from = prefix.to_vec();
        match query.order {
            PageOrder::Id => {
                let id_prefix = query.id_prefix.unwrap_or("");
                match query.after {
                    Some(after) if after.id.as_str() >= id_prefix => {
                        from.extend_from_slice(after.id.as_bytes());
                        from.push(0);
                    }
                    _ => from.extend_from_slice(id_prefix.as_bytes()),
                }
            }
            _ => match query.after {
                Some(after) => {
                    let ms = u64::try_from(after.started_micros / 1000).unwrap_or(0);
                    from.extend_from_slice(&ms.to_be_bytes());
                    from.extend_from_slice(after.id.as_bytes());
                    from.push(0);
                }
                None => {
                    let ms = query.started_from.map(crate::time::clock::to_millis);
                    from.extend_from_slice(&ms.unwrap_or(0).to_be_bytes());
                }
            },
        }
        from
    }

    /// The start time `facts` files for `id` (`None`: no facts).
    fn started_of(&self, id: &str) -> Result<Option<u64>> {
        Ok(self
            .facts
            .get(id.as_bytes())
            .map_err(sled_error)?
            .and_then(|f| f.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()))
            .map(u64::from_be_bytes))
    }
}
