//! The history users see, folded from the records of an instance's run.

use super::{Change, Journal, fold, handover};
use crate::error::{Error, Result};
use crate::model::history::Event;
use crate::time::clock::from_millis;

impl Journal {
    /// The history of `id`'s current run, as users see it.
    /// Answers once all it shows is durable (see [`Journal::read_durable`]).
    pub(crate) async fn history(&self, id: &str) -> Result<Vec<Event>> {
        self.history_of_run(id, None).await
    }

    /// The history of run `run` of `id` (`None`: its current run), as
    /// users see it; `Error::InvalidArgument` for a run it does not keep.
    pub(crate) async fn history_of_run(&self, id: &str, run: Option<u32>) -> Result<Vec<Event>> {
        Ok(self.records_and_history(id, run).await?.1)
    }

    /// The records of run `run` of `id` (`None`: its current run) as the
    /// store holds them, and the history they make (`saga export`: one
    /// read, so the two agree). Answers once all it read is durable.
    pub(crate) async fn records_and_history(
        &self,
        id: &str,
        run: Option<u32>,
    ) -> Result<(Vec<(u64, Vec<u8>)>, Vec<Event>)> {
        let held = self.hold(id);
        let records = match run {
            Some(run) => self.store.journal_range(id, handover::seqs_of(run)).await,
            None => self.current_run(id).await,
        };
        if let (Some(run), Ok(records)) = (run, &records)
            && records.is_empty()
            && self.store.last_seq(id).await?.is_some()
        {
            return Err(Error::InvalidArgument(format!(
                "instance {id:?} keeps no run {run}: it has not begun, or retention removed it \
                 (`inspect().run` is its current run)"
            )));
        }
        // A write that the read saw took its ticket under the instance's
        // lock: once the lock was free after the read, the latest ticket
        // covers it.
        drop(held.cached());
        let ticket = self.flusher.latest_ticket();
        drop(held);
        let records = records?;
        let history = self.fold_history(id, &records)?;
        self.flusher.durable(ticket).await?;
        self.settle_unless_owned(id).await?;
        Ok((records, history))
    }

    fn fold_history(&self, id: &str, records: &[(u64, Vec<u8>)]) -> Result<Vec<Event>> {
        let mut fold = fold::Fold::new(&self.sealer);
        let mut out = Vec::new();
        for (seq, bytes) in records {
            let (record, kinds) = fold.record(id, *seq, bytes)?;
            // An imported instance keeps the times of its old history.
            let times: Vec<u64> = match &record.change {
                Change::Imported(imported) => imported.history.iter().map(|(at, _)| *at).collect(),
                _ => Vec::new(),
            };
            for (i, kind) in kinds.into_iter().enumerate() {
                out.push(Event {
                    instance: id.to_owned(),
                    seq: out.len() as u64,
                    at: from_millis(times.get(i).copied().unwrap_or(record.at)),
                    kind,
                });
            }
        }
        fold.finish(id)?;
        Ok(out)
    }
}
