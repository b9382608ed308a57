//! Finished instances are removed after the retention period, history and
//! all, so the store does not grow without bound.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{add_millis, from_millis};
use crate::engine::EngineInner;
use crate::error::Result;
use crate::store::Op;

/// How often the engine looks for expired instances, on its clock.
const SWEEP_EVERY: Duration = Duration::from_secs(60 * 60);

pub(crate) fn spawn_sweeper(engine: &Arc<EngineInner>) {
    let weak = Arc::downgrade(engine);
    let clock = engine.clock.clone();
    let task = engine.runtime.spawn(async move {
        loop {
            let at = from_millis(add_millis(
                crate::clock::to_millis(clock.now()),
                SWEEP_EVERY,
            ));
            // Housekeeping must not make a time-skipping test clock jump.
            clock.timeout_at(at).await;
            let Some(engine) = weak.upgrade() else { return };
            if let Err(e) = sweep(&engine).await {
                tracing::warn!(error = %e, "retention sweep failed");
            }
        }
    });
    engine.track(task);
}

/// Removes every finished instance whose end is older than the retention
/// period; returns how many.
pub(crate) async fn sweep(engine: &Arc<EngineInner>) -> Result<usize> {
    let now = engine.now_millis();
    let mut removed = 0;
    for id in engine.store.instance_ids()? {
        let Ok(Some(record)) = engine.store.instance(&id) else {
            continue;
        };
        let expired = record.status.is_terminal()
            && record
                .finished_at
                .is_some_and(|at| add_millis(at, engine.retention) <= now);
        if expired && engine.live(&id).is_none() {
            remove(engine, &id)?;
            removed += 1;
        }
    }
    if removed > 0 {
        engine.flush().await?;
    }
    Ok(removed)
}

/// Deletes every record of an instance in one write.
pub(crate) fn remove(engine: &EngineInner, id: &str) -> Result<()> {
    engine.write(id, |txn| {
        for (i, _) in engine.store.slots(id)? {
            txn.put(Op::DeleteSlot(id.to_owned(), i));
        }
        txn.truncate_history(0)?;
        for (i, _) in engine.store.rollbacks(id)? {
            txn.put(Op::DeleteRollback(id.to_owned(), i));
        }
        for (i, _) in engine.store.pending_events(id)? {
            txn.put(Op::DeletePendingEvent(id.to_owned(), i));
        }
        txn.put(Op::DeleteInstance(id.to_owned()));
        Ok(())
    })?;
    engine.forget_cursor(id);
    Ok(())
}
