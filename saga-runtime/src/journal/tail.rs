//! Following every journal of a store that other processes write too: a
//! subscriber's side of a store shared by workers.
//!
//! The store hands over records in an order that later commits never come
//! before ([`Store::tail`](crate::store::Store::tail)), each durable; this
//! folds them, per instance, into the lifecycle events that a subscriber
//! of the writing process would have seen. An instance met for the first
//! time in the middle of its journal is folded from its start (without
//! telling) to know where it is; one that ended is let go, and folded
//! again if it runs again.

use std::collections::{HashMap, VecDeque};

use super::Journal;
use super::fold::Fold;
use crate::error::Result;
use crate::model::history::Event;
use crate::store::TailPosition;
use crate::time::clock::from_millis;

/// The most records read at once.
const BATCH: usize = 512;

/// A tail of every journal, and where each instance it met stands.
pub(crate) struct Tail {
    /// Where the next read of the store begins.
    position: TailPosition,
    /// Records read and not yet folded: a call dropped while it folds one
    /// (reading what came before it) leaves it here for the next.
    unfolded: VecDeque<(String, u64, Vec<u8>)>,
    instances: HashMap<String, Followed>,
}

/// An instance being followed: its fold, the next record expected, and
/// how many events it made so far.
struct Followed {
    fold: Fold,
    next_seq: u64,
    events: u64,
}

impl Journal {
    /// A tail from now, or `None` when this engine tells its subscribers
    /// itself (it writes every record of its store).
    pub(crate) async fn tail(&self) -> Result<Option<Tail>> {
        Ok(self.store.tail_start().await?.map(|position| Tail {
            position,
            unfolded: VecDeque::new(),
            instances: HashMap::new(),
        }))
    }

    /// Reads what was written after the tail's position, appending its
    /// events to `out`; answers whether there was any.
    ///
    /// Cancel safe: a call dropped at an await loses and repeats nothing.
    pub(crate) async fn follow(&self, tail: &mut Tail, out: &mut VecDeque<Event>) -> Result<bool> {
        if tail.unfolded.is_empty() {
            let (records, position) = self.store.tail(&tail.position, BATCH).await?;
            tail.unfolded.extend(records);
            tail.position = position;
        }
        let any = !tail.unfolded.is_empty();
        while let Some((id, seq, bytes)) = tail.unfolded.front() {
            let (id, seq, bytes) = (id.clone(), *seq, bytes.clone());
            // A journal that does not fold is left out, not read again:
            // every call on it says why (`Error::Corrupt`).
            if let Err(e) = self.follow_record(tail, &id, seq, &bytes, out).await {
                tracing::warn!(instance = %id, seq, error = %e, "a subscriber skips a record it cannot fold");
                tail.instances.remove(&id);
            }
            tail.unfolded.pop_front();
        }
        Ok(any)
    }

    async fn follow_record(
        &self,
        tail: &mut Tail,
        id: &str,
        seq: u64,
        bytes: &[u8],
        out: &mut VecDeque<Event>,
    ) -> Result<()> {
        if tail.instances.get(id).is_none_or(|f| f.next_seq != seq) {
            // First met (or met again) here: fold what came before.
            match self.followed_until(id, seq).await? {
                Some(followed) => tail.instances.insert(id.to_owned(), followed),
                // Removed since (retention): nothing to tell.
                None => return Ok(()),
            };
        }
        let Some(followed) = tail.instances.get_mut(id) else {
            return Ok(());
        };
        let (entry, kinds) = followed.fold.record(id, seq, bytes)?;
        followed.next_seq = seq + 1;
        for kind in kinds {
            out.push_back(Event {
                instance: id.to_owned(),
                seq: followed.events,
                at: from_millis(entry.at),
                kind,
            });
            followed.events += 1;
        }
        if followed
            .fold
            .state
            .as_ref()
            .is_some_and(|s| s.status.is_terminal())
        {
            tail.instances.remove(id);
        }
        Ok(())
    }

    /// The fold of `id`'s records before `seq`, with the count of events
    /// they made; `None` when the instance is gone.
    async fn followed_until(&self, id: &str, seq: u64) -> Result<Option<Followed>> {
        let mut fold = Fold::new(self.sealer());
        let mut events = 0;
        // An instance that continued as new: its run, from its start.
        let mut next_seq = super::handover::start(super::handover::run_of(seq));
        for (s, bytes) in self.store.journal_range(id, next_seq..seq).await? {
            events += fold.record(id, s, &bytes)?.1.len() as u64;
            next_seq = s + 1;
        }
        if next_seq != seq {
            // Its start is gone: removed, or removed and created again.
            return Ok(None);
        }
        Ok(Some(Followed {
            fold,
            next_seq,
            events,
        }))
    }
}
