//! The rebuild of a store's indexes for `list()`'s filters that a release
//! before did not keep (`Store::lists_to_rebuild`, sled): every entry is
//! refiled in the background, [`REBUILD_BATCH`] at a time, yielding
//! between batches, while pages walk as without the indexes. Once every
//! entry is refiled, the store trusts them.

use std::sync::Arc;

use crate::codec::decode_record;
use crate::error::Result;
use crate::journal::{Facts, Indexed, Summary};
use crate::run::runner::Runner;
use crate::store::IndexRow;

/// How many entries a batch of the rebuild refiles.
const REBUILD_BATCH: usize = 512;

/// Starts the rebuild, if the store's indexes need one.
pub(crate) fn spawn(runner: &Arc<Runner>) {
    if !runner.core.journal.store().lists_to_rebuild() {
        return;
    }
    let weak = Arc::downgrade(runner);
    let task = runner.core.spawn(async move {
        let mut after: Option<String> = None;
        loop {
            let Some(runner) = weak.upgrade() else { return };
            if runner.core.is_closed() {
                return;
            }
            let store = runner.core.journal.store();
            match store
                .rebuild_lists(after.as_deref(), REBUILD_BATCH, &row_of)
                .await
            {
                Ok(Some(last)) => after = Some(last),
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "could not rebuild the list indexes; pages walk without them");
                    return;
                }
            }
            drop(runner);
            tokio::task::yield_now().await;
        }
    });
    runner.core.track(task);
}

/// The row of a stored entry, handed to `file`; an entry that does not
/// read is skipped (a page that meets it reports it).
fn row_of(
    _id: &str,
    summary: &[u8],
    facts: Option<&[u8]>,
    file: &mut dyn FnMut(&IndexRow<'_>) -> Result<()>,
) -> Result<()> {
    let Ok(mut summary) = decode_record::<Summary>(summary) else {
        return Ok(());
    };
    let facts = match facts.map(Facts::decode) {
        Some(Ok(facts)) => facts,
        Some(Err(_)) => return Ok(()),
        None => Facts::default(),
    };
    summary.status = facts.status(summary.status);
    file(&Indexed::new(summary, facts).row())
}
