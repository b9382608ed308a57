//! Reading a journal back: its records, decoded and folded in order.
//!
//! A record after the first that does not decode (or does not fit the
//! state before it) parks the instance `Blocked` with a `Corrupt` failure
//! naming it, instead of making the instance unreadable: the records
//! before it still say which steps started and what they stored, so a
//! person can decide, and `terminate_with_rollback()` can compensate from
//! history. Such an instance stays `Blocked` whatever later records say,
//! until one ends it or starts its rollback; it never runs forward again
//! (a step whose completion was in the damaged record would run twice).
//! A damaged first record leaves nothing to read: that is `Error::Corrupt`.

use super::change::{Change, Entry};
use super::machine;
use super::state::InstanceState;
use crate::codec::from_newer_release;
use crate::error::failure::{Failure, FailureKind};
use crate::error::{Error, Result};
use crate::model::history::EventKind;
use crate::model::status::Status;
use crate::seal::Sealer;

pub(super) struct Fold {
    pub(super) state: Option<InstanceState>,
    /// Opens the sealed values of each record.
    sealer: Sealer,
    /// The failure of the first damaged record, once one was met.
    damaged: Option<Failure>,
    /// The time of the last record read, for the synthetic block.
    last_at: u64,
}

impl Fold {
    pub(super) fn new(sealer: &Sealer) -> Fold {
        Fold {
            state: None,
            sealer: sealer.clone(),
            damaged: None,
            last_at: 0,
        }
    }

    /// Folds record `seq` of instance `id`; the entry it stood for (a
    /// synthetic `Blocked` for a damaged one) and the events it made.
    pub(super) fn record(
        &mut self,
        id: &str,
        seq: u64,
        bytes: &[u8],
    ) -> Result<(Entry, Vec<EventKind>)> {
        let decoded: std::result::Result<Entry, String> = self.sealer.decode_record(bytes);
        let attempt = decoded.and_then(|entry| {
            // Applied to a copy: a record that does not fit leaves the state
            // as it was before it.
            let mut next = self.state.clone();
            let kinds = machine::apply(&mut next, seq, &entry)?;
            Ok((entry, kinds, next))
        });
        match attempt {
            Ok((entry, kinds, next)) => {
                self.state = next;
                self.last_at = entry.at;
                self.keep_blocked();
                Ok((entry, kinds))
            }
            // Not damage: a newer release's record. Not ours to read, run
            // or park (see `change`).
            Err(detail) if from_newer_release(bytes, 1, Change::KINDS) => {
                Err(Error::NewerRelease {
                    id: id.to_owned(),
                    detail: format!("journal record {seq} is of a kind it does not know: {detail}"),
                })
            }
            Err(detail) if self.state.is_some() => {
                tracing::error!(instance = %id, seq, detail = %detail, "a journal record is damaged; the instance is parked Blocked");
                let failure = Failure::new(
                    FailureKind::Corrupt { seq },
                    format!(
                        "journal record {seq} is damaged ({detail}); the instance is parked: \
                         restore the store from a backup, or terminate it (with_rollback compensates \
                         the steps the records before it name)"
                    ),
                );
                self.damaged.get_or_insert_with(|| failure.clone());
                let entry = Entry {
                    at: self.last_at,
                    change: Change::Blocked { failure },
                };
                let kinds = machine::apply(&mut self.state, seq, &entry)
                    .map_err(|e| super::corrupt(id, seq, e))?;
                Ok((entry, kinds))
            }
            Err(detail) => Err(super::corrupt(id, seq, detail)),
        }
    }

    /// After a damaged record, the instance stays parked unless it ended
    /// or its rollback started.
    fn keep_blocked(&mut self) {
        if let (Some(failure), Some(s)) = (&self.damaged, self.state.as_mut())
            && !s.status.is_terminal()
            && s.status != Status::RollingBack
        {
            s.status = Status::Blocked;
            s.failure = Some(failure.clone());
        }
    }

    /// Whether a damaged record parked the instance.
    pub(super) fn damaged(&self) -> bool {
        self.damaged.is_some()
    }

    /// The folded state; `Error::UnknownInstance` when there was none.
    pub(super) fn finish(self, id: &str) -> Result<InstanceState> {
        self.state
            .ok_or_else(|| Error::UnknownInstance { id: id.to_owned() })
    }
}
