//! Where records live. The engine talks to a [`Store`]; sled is the
//! embedded one, and a server-backed store (PostgreSQL, for many workers)
//! can be added beside it without touching the engine.

mod flusher;
mod sled_store;

pub(crate) use flusher::Flusher;
pub(crate) use sled_store::{SledStore, wait_until_released};

use crate::error::Result;
use crate::record::{HistoryRecord, InstanceRecord, PendingEvent, RollbackRecord, SlotRecord};

/// Durable storage of instances, slots, history, compensations and pending
/// events. Writes are atomic per [`Batch`]; a write is durable once
/// [`Store::flush`] returns after it.
pub(crate) trait Store: Send + Sync + 'static {
    fn instance(&self, id: &str) -> Result<Option<InstanceRecord>>;
    fn instance_ids(&self) -> Result<Vec<String>>;
    fn slots(&self, id: &str) -> Result<Vec<(u32, SlotRecord)>>;
    fn rollbacks(&self, id: &str) -> Result<Vec<(u32, RollbackRecord)>>;
    fn history(&self, id: &str) -> Result<Vec<(u64, HistoryRecord)>>;
    /// One past the last history sequence number of the instance.
    fn next_history_seq(&self, id: &str) -> Result<u64>;
    fn pending_events(&self, id: &str) -> Result<Vec<(u64, PendingEvent)>>;
    /// Stores `record` and applies `batch`, atomically, unless an instance
    /// with this id exists (then nothing is written and `false` returned).
    fn create_instance(&self, id: &str, record: &InstanceRecord, batch: Batch) -> Result<bool>;
    fn apply(&self, batch: Batch) -> Result<()>;
    /// A number never returned before by this store.
    fn unique_id(&self) -> Result<u64>;
    /// Blocks until every write applied before the call is on disk.
    fn flush(&self) -> Result<()>;
}

/// Writes applied together or not at all.
#[derive(Default, Debug)]
pub(crate) struct Batch {
    pub(crate) ops: Vec<Op>,
}

#[derive(Debug)]
pub(crate) enum Op {
    PutInstance(String, Box<InstanceRecord>),
    DeleteInstance(String),
    PutSlot(String, u32, SlotRecord),
    DeleteSlot(String, u32),
    PutHistory(String, u64, HistoryRecord),
    DeleteHistory(String, u64),
    PutRollback(String, u32, RollbackRecord),
    DeleteRollback(String, u32),
    PutPendingEvent(String, u64, PendingEvent),
    DeletePendingEvent(String, u64),
}

impl Batch {
    pub(crate) fn new() -> Self {
        Batch::default()
    }

    pub(crate) fn push(&mut self, op: Op) -> &mut Self {
        self.ops.push(op);
        self
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}
