//! The index entries (summaries) of instances: written from a folded
//! state, read for listing and resuming, and repaired where they lag
//! the journals; and the removal of an instance, journal and all.

use super::{Indexed, InstanceState, Journal, Summary};
use crate::codec::decode_record;
use crate::error::{Error, Result};
use crate::lock::lock;
use crate::model::status::Status;

impl Journal {
    /// Writes the index entry of `id` from `state`, folded from its
    /// records before `next_seq`.
    pub(super) fn put_summary(&self, id: &str, state: &InstanceState, next_seq: u64) -> Result<()> {
        let indexed = Indexed::of(state, next_seq.saturating_sub(1));
        self.store.put_index(id, &indexed.row())
    }

    /// The summaries of every instance, in id order; the state of an
    /// instance cached here wins over its (possibly lagging) summary.
    pub(crate) async fn summaries(&self) -> Result<Vec<(String, Result<Summary>)>> {
        self.summaries_where(None, None).await
    }

    /// Like [`Journal::summaries`], of the instances that may need a
    /// driver: the store may leave out the others, and reads no ended
    /// instance when it keeps an index of the active ones.
    pub(crate) async fn active_summaries(&self) -> Result<Vec<(String, Result<Summary>)>> {
        let entries = self.store.active_entries().await?;
        Ok(self.summaries_of(entries).await)
    }

    /// Like [`Journal::active_summaries`], on a store whose timer index is
    /// kept: the summaries of the instances that may run by `now`, and
    /// apart the timers of those that only wait for later, unread
    /// (`Store::active_entries_by`).
    pub(crate) async fn active_summaries_by(
        &self,
        now: u64,
    ) -> Result<(Vec<(String, Result<Summary>)>, Vec<(String, u64, bool)>)> {
        let set = self.store.active_entries_by(now).await?;
        Ok((self.summaries_of(set.may_run).await, set.asleep))
    }

    /// The summary of `id` from its index entry (its state cached here
    /// wins); `None` when it has no entry.
    pub(crate) async fn summary_of(&self, id: &str) -> Result<Option<Result<Summary>>> {
        let Some(bytes) = self.store.index(id).await? else {
            return Ok(None);
        };
        let mut read = self.summaries_of(vec![(id.to_owned(), bytes)]).await;
        Ok(read.pop().map(|(_, summary)| summary))
    }

    /// Like [`Journal::summaries`], of the instances that may be in
    /// `status` and run `workflow` (`None`: any): the store may leave out
    /// the others, and the caller filters what it answers again.
    pub(crate) async fn summaries_where(
        &self,
        status: Option<Status>,
        workflow: Option<&str>,
    ) -> Result<Vec<(String, Result<Summary>)>> {
        let entries = self
            .store
            .index_entries_where(status.map(Status::label), workflow)
            .await?;
        Ok(self.summaries_of(entries).await)
    }

    /// The summaries of `entries`; the state of an instance cached here
    /// wins over its (possibly lagging) summary, and an entry that does not
    /// read is rebuilt from its journal where it can be.
    async fn summaries_of(
        &self,
        entries: Vec<(String, Vec<u8>)>,
    ) -> Vec<(String, Result<Summary>)> {
        let mut out = Vec::with_capacity(entries.len());
        for (id, bytes) in entries {
            let entry = lock(&self.cache).get(id.as_str()).cloned();
            let cached = entry.and_then(|entry| {
                lock(&entry)
                    .loaded
                    .as_ref()
                    .map(|l| Summary::of(&l.state, l.next_seq.saturating_sub(1)))
            });
            let summary = match cached {
                Some(summary) => Ok(summary),
                None => decode_record::<Summary>(&bytes).map_err(|detail| Error::Corrupt {
                    what: format!("index entry of instance {id:?}"),
                    detail,
                }),
            };
            let summary = match summary {
                Err(e) => match self.rebuild_unreadable(&id).await {
                    Some((summary, _)) => Ok(summary),
                    None => Err(e),
                },
                read => read,
            };
            out.push((id, summary));
        }
        out
    }

    /// Writes the index entry of `id` from its folded state, for an
    /// instance this worker just claimed: its entry may lag its journal,
    /// and a state the records do not say alone (a damaged record parked
    /// it) shows in `list()` too.
    pub(crate) async fn refresh_index(&self, id: &str) {
        let held = match self.hold_loaded(id).await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(instance = %id, error = %e, "could not refresh an index entry");
                return;
            }
        };
        let cached = held.cached();
        if let Some(loaded) = &cached.loaded
            && let Err(e) = self.put_summary(id, &loaded.state, loaded.next_seq)
        {
            tracing::warn!(instance = %id, error = %e, "could not refresh an index entry");
        }
    }

    /// On open (a store of one process): makes the index agree with the
    /// journals, and gives entries of a release before facts their facts.
    /// A store that marks the entries that may lag (those a process wrote
    /// and did not close) has those repaired alone; one that cannot tell
    /// is repaired whole, its index of active instances rebuilt, and its
    /// facts backfilled. Returns how many entries were repaired and
    /// backfilled.
    pub(crate) async fn repair_on_open(&self) -> Result<(usize, usize)> {
        let lagging = self.store.lagging().await?;
        let whole = lagging.is_none();
        let entries = match lagging {
            Some(ids) => {
                let mut entries = Vec::with_capacity(ids.len());
                for id in ids {
                    // None: removed whole since it was marked.
                    if let Some(bytes) = self.store.index(&id).await? {
                        entries.push((id, bytes));
                    }
                }
                entries
            }
            None => self.store.index_entries().await?,
        };
        let mut repaired = 0;
        for (id, bytes) in entries {
            repaired += usize::from(self.repair_entry(&id, &bytes).await?);
        }
        // Entries written since there are marks have their facts.
        let backfilled = if whole {
            self.backfill_index().await?
        } else {
            0
        };
        self.store.flush()?;
        self.store.repaired()?;
        Ok((repaired, backfilled))
    }

    /// Makes the entry of `id` (`bytes`) agree with its journal: an entry
    /// whose journal lags or leads it is rebuilt from the journal; one
    /// without a journal (a create or a removal cut short) is removed.
    /// Whether it did either.
    async fn repair_entry(&self, id: &str, bytes: &[u8]) -> Result<bool> {
        let last = self.store.last_seq(id).await?;
        let summary = decode_record::<Summary>(bytes).ok();
        match last {
            None => {
                self.store.remove(id)?;
                Ok(true)
            }
            Some(last) if summary.as_ref().is_none_or(|s| s.last_seq != last) => {
                match self.load(id).await {
                    Ok(Some(loaded)) => self.put_summary(id, &loaded.state, loaded.next_seq)?,
                    Ok(None) => self.store.remove(id)?,
                    Err(e) => {
                        // Kept among the active: resuming it says why it
                        // does not run.
                        self.store.set_active(id, true)?;
                        tracing::warn!(instance = %id, error = %e, "could not rebuild the index entry of a corrupt instance");
                    }
                }
                Ok(true)
            }
            Some(_) => {
                let active = summary.is_none_or(|s| s.status.resumes_on_open());
                self.store.set_active(id, active)?;
                Ok(false)
            }
        }
    }

    /// Removes an instance, journal and all, when `f` says so, deciding
    /// under the instance's write lock (nothing writes in between).
    pub(crate) async fn remove_if(
        &self,
        id: &str,
        f: impl FnOnce(&InstanceState) -> bool,
    ) -> Result<bool> {
        let held = self.hold_loaded(id).await?;
        let mut cached = held.cached();
        let remove = cached.loaded.as_ref().is_some_and(|l| f(&l.state));
        if remove {
            self.store.remove(id)?;
            cached.invalidate();
            cached.keep = false;
            self.note_settling(id, None);
        }
        Ok(remove)
    }
}
