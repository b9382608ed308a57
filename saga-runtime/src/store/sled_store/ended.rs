//! The `ended` tree of the sled store: key `<big-endian u64 ms ended><id>`,
//! empty: the ended instances in the order they ended, so retention walks
//! the expired ones a batch at a time and reads no other entry.
//!
//! An instance's key is written before its index entry says it ended (a
//! crash leaves at most an extra key, never a missing one), and goes when
//! retention removes it. A key may go stale (the instance was restarted,
//! and ends again later, or a repair removed it): retention checks each
//! key against the entry and drops the stale ones
//! ([`Store::drop_ended`](crate::store::Store::drop_ended)).
//!
//! It is trusted only when the marker says so ([`ENDED`] among its
//! words): a release before writes the marker without it, and retention
//! then scans every entry once, filing each ended instance again.

use super::{SledStore, sled_error};
use crate::error::Result;
use crate::store::IndexRow;

/// The marker's word that says the `ended` tree was kept.
pub(super) const ENDED: &str = "ended";

/// The key in `ended` of `id`, ended at `at`.
fn ended_key(at: u64, id: &str) -> Vec<u8> {
    let mut key = at.to_be_bytes().to_vec();
    key.extend_from_slice(id.as_bytes());
    key
}

/// When the instance of `row` ended, if its entry says it did.
pub(super) fn ended_at(row: &IndexRow<'_>) -> Option<u64> {
    if row.active {
        return None;
    }
    row.facts.as_ref().and_then(|facts| facts.finished_at)
}

impl SledStore {
    /// Files `id` as ended at `at` unless it is filed so.
    pub(super) fn file_ended_now(&self, id: &str, at: u64) -> Result<()> {
        self.refuse_if_read_only()?;
        let key = ended_key(at, id);
        if self.ended.contains_key(&key).map_err(sled_error)? {
            return Ok(());
        }
        Self::insert(&self.ended, &key, &[])
    }

    /// Drops the key of `id` ended at `at`.
    pub(super) fn drop_ended_now(&self, id: &str, at: u64) -> Result<()> {
        self.refuse_if_read_only()?;
        self.ended.remove(ended_key(at, id)).map_err(sled_error)?;
        Ok(())
    }

    /// See [`Store::ended_until`](crate::store::Store::ended_until).
    pub(super) fn ended_until_now(
        &self,
        until: u64,
        after: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Vec<(u64, String)>> {
        use std::ops::Bound;
        let from = match after {
            Some((at, id)) => Bound::Excluded(ended_key(at, id)),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for key in self
            .ended
            .range::<Vec<u8>, _>((from, Bound::Unbounded))
            .keys()
        {
            if out.len() >= limit {
                break;
            }
            let key = key.map_err(sled_error)?;
            let Some(at) = key.get(..8).and_then(|at| <[u8; 8]>::try_from(at).ok()) else {
                // Not a key this tree keeps: dropped.
                if !self.read_only {
                    self.ended.remove(&key).map_err(sled_error)?;
                }
                continue;
            };
            let at = u64::from_be_bytes(at);
            if at > until {
                break;
            }
            out.push((at, String::from_utf8_lossy(&key[8..]).into_owned()));
        }
        Ok(out)
    }
}
