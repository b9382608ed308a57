//! The `active` and `timers` trees of the sled store (see the store's
//! module docs): which instances a driver must run, and when those that
//! only wait are due. An instance's value in `active` is its timer, so
//! start-up reads the entries of those that may run now and leaves the
//! sleepers unread.

use super::{SledStore, sled_error};
use crate::error::Result;
use crate::store::ActiveSet;

/// An instance's timer as `active` and `timers` keep it: wake time (big
/// endian), then 1 for an event wait's deadline; empty for none.
pub(super) fn timer_bytes(wake: Option<(u64, bool)>) -> Vec<u8> {
    match wake {
        Some((at, deadline)) => {
            let mut bytes = at.to_be_bytes().to_vec();
            bytes.push(u8::from(deadline));
            bytes
        }
        None => Vec::new(),
    }
}

/// The timer in `bytes` (see [`timer_bytes`]), if any.
pub(super) fn timer_of_bytes(bytes: &[u8]) -> Option<(u64, bool)> {
    let at: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    Some((u64::from_be_bytes(at), bytes.get(8) == Some(&1)))
}

/// The key in `timers` of `id`'s timer at `at`.
pub(super) fn timer_key(at: u64, id: &str) -> Vec<u8> {
    let mut key = at.to_be_bytes().to_vec();
    key.extend_from_slice(id.as_bytes());
    key
}

impl SledStore {
    /// Adds `id` to `active` with its timer `wake` (before its entry says
    /// so), its timer key in `timers` first; the timer it had before goes
    /// afterwards, from `timers` ([`SledStore::drop_old_timer`]). Answers
    /// that old timer.
    pub(super) fn add_active_with(
        &self,
        id: &str,
        wake: Option<(u64, bool)>,
    ) -> Result<Option<(u64, bool)>> {
        let old = self.active.get(id.as_bytes()).map_err(sled_error)?;
        let new = timer_bytes(wake);
        if old
            .as_ref()
            .is_some_and(|old| old.as_ref() == new.as_slice())
        {
            return Ok(None);
        }
        if let Some((at, deadline)) = wake {
            Self::insert(&self.timers, &timer_key(at, id), &[u8::from(deadline)])?;
        }
        Self::insert(&self.active, id.as_bytes(), &new)?;
        Ok(old.and_then(|old| timer_of_bytes(&old)))
    }

    /// Removes the timer key of `id` at `old` (it files another now).
    pub(super) fn drop_old_timer(&self, id: &str, old: Option<(u64, bool)>) -> Result<()> {
        if let Some((at, _)) = old {
            self.timers.remove(timer_key(at, id)).map_err(sled_error)?;
        }
        Ok(())
    }

    /// Adds `id` to `active` (before its entry says so) unless it is there.
    pub(super) fn add_active(&self, id: &str) -> Result<()> {
        if self
            .active
            .contains_key(id.as_bytes())
            .map_err(sled_error)?
        {
            return Ok(());
        }
        Self::insert(&self.active, id.as_bytes(), &[])
    }

    /// Removes `id` from `active` (after its entry no longer says so),
    /// and then its timer.
    pub(super) fn drop_active(&self, id: &str) -> Result<()> {
        if let Some(old) = self.active.remove(id.as_bytes()).map_err(sled_error)? {
            self.drop_old_timer(id, timer_of_bytes(&old))?;
        }
        Ok(())
    }

    /// See [`Store::timers_after`].
    pub(super) fn timers_after_now(
        &self,
        after: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Vec<(u64, String, bool)>> {
        use std::ops::Bound;
        let from = match after {
            Some((at, id)) => Bound::Excluded(timer_key(at, id)),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for entry in self.timers.range::<Vec<u8>, _>((from, Bound::Unbounded)) {
            if out.len() >= limit {
                break;
            }
            let (key, value) = entry.map_err(sled_error)?;
            let Some(at) = key.get(..8).and_then(|at| <[u8; 8]>::try_from(at).ok()) else {
                self.timers.remove(&key).map_err(sled_error)?;
                continue;
            };
            let at = u64::from_be_bytes(at);
            let id = String::from_utf8_lossy(&key[8..]).into_owned();
            let deadline = value.first() == Some(&1);
            let filed = self.active.get(id.as_bytes()).map_err(sled_error)?;
            if filed.and_then(|f| timer_of_bytes(&f)) != Some((at, deadline)) {
                // Stale: the instance files another timer, or none.
                self.timers.remove(&key).map_err(sled_error)?;
                continue;
            }
            out.push((at, id, deadline));
        }
        Ok(out)
    }

    /// The index entries of the instances in `active`; a key left there
    /// without an entry (a removal cut short) goes.
    pub(super) fn active_entries_now(&self) -> Result<Vec<(String, Vec<u8>)>> {
        // No timer is after the last moment: every entry is read.
        Ok(self.active_entries_by_now(u64::MAX)?.may_run)
    }

    /// Like [`SledStore::active_entries_now`], leaving unread the entries
    /// of the instances whose timer (their value in `active`) is after
    /// `now`.
    pub(super) fn active_entries_by_now(&self, now: u64) -> Result<ActiveSet> {
        let mut set = ActiveSet::default();
        for pair in self.active.iter() {
            let (key, timer) = pair.map_err(sled_error)?;
            if let Some((at, deadline)) = timer_of_bytes(&timer)
                && at > now
            {
                let id = String::from_utf8_lossy(&key).into_owned();
                set.asleep.push((id, at, deadline));
                continue;
            }
            match self.index.get(&key).map_err(sled_error)? {
                Some(summary) => set
                    .may_run
                    .push((String::from_utf8_lossy(&key).into_owned(), summary.to_vec())),
                None => {
                    self.active.remove(&key).map_err(sled_error)?;
                }
            }
        }
        Ok(set)
    }
}
