//! Index entries written before there were facts (tags, parent, ...)
//! get them from their journals, a bounded batch at a time: on open (sled)
//! or connect (a PostgreSQL worker), and whenever a worker claims an
//! instance (its entry is refreshed whole).

use std::collections::HashSet;

use super::{Facts, Indexed, Journal, Summary};
use crate::codec::decode_record;
use crate::error::Result;

/// How many entries one batch backfills.
pub(crate) const BACKFILL_BATCH: usize = 256;

impl Journal {
    /// Backfills every entry without facts; returns how many it wrote.
    /// An instance whose journal does not fold gets the facts its summary
    /// says (none), so a damaged one is not looked at again and again.
    pub(crate) async fn backfill_index(&self) -> Result<usize> {
        let mut seen = HashSet::new();
        loop {
            let ids = self.store.unindexed(BACKFILL_BATCH).await?;
            let fresh: Vec<String> = ids
                .into_iter()
                .filter(|id| seen.insert(id.clone()))
                .collect();
            if fresh.is_empty() {
                return Ok(seen.len());
            }
            for id in &fresh {
                self.backfill_one(id).await?;
            }
        }
    }

    async fn backfill_one(&self, id: &str) -> Result<()> {
        let indexed = match self.load(id).await {
            Ok(Some(loaded)) => Indexed::of(&loaded.state, loaded.next_seq.saturating_sub(1)),
            _ => {
                let Some(bytes) = self.store.index(id).await? else {
                    return Ok(());
                };
                let Ok(summary) = decode_record::<Summary>(&bytes) else {
                    tracing::warn!(instance = %id, "an index entry that does not read gets no facts");
                    return Ok(());
                };
                Indexed::new(summary, Facts::default())
            }
        };
        self.store.backfill_index(id, &indexed.row()).await
    }
}
