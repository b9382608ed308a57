//! Where journals live. The engine talks to a [`Store`]; sled is the
//! embedded one, and a server-backed store (PostgreSQL, for many workers)
//! implements the same trait.
//!
//! A store holds bytes, not records: encoding is the journal's business
//! (`codec` pins it), so every store keeps the same bytes.
//!
//! Two kinds of data:
//!
//! - **Journals**: per instance, records keyed by a sequence number that
//!   grows from 0 without gaps. A record is never changed once appended;
//!   an instance's journal is removed whole, by retention.
//! - **The index**: per instance, a summary (status, workflow, times)
//!   derived from its journal. It may lag the journal; the journal module
//!   rebuilds it on open wherever it does.
//!
//! A write is durable once [`Store::flush`] returns after it. A store
//! recovers after a crash with a prefix of its writes: a write is never
//! kept while one made before it is lost.

mod conformance;
mod flusher;
#[cfg(feature = "postgres")]
mod postgres;
mod sled_store;

#[doc(hidden)]
pub use conformance::run_conformance_suite;
pub(crate) use flusher::Flusher;
#[cfg(feature = "postgres")]
pub(crate) use postgres::{DEFAULT_LEASE, DEFAULT_SCHEMA};
#[cfg(feature = "postgres")]
pub use postgres::{PgOptions, PgStore};
pub use sled_store::SledStore;
pub(crate) use sled_store::{LegacyInstance, wait_until_released};

use crate::error::Result;

/// Durable storage of journals and the index. Not yet a stable API: a
/// server-backed store will reshape it (async calls, leases).
#[doc(hidden)]
pub trait Store: Send + Sync + 'static {
    /// Stores record 0 of a new instance's journal unless the instance
    /// exists; `true` when it was created. Also stores its first index
    /// summary, before the record, so the index never misses an instance.
    fn create(&self, id: &str, index: &[u8], record: &[u8]) -> Result<bool>;
    /// Appends record `seq` to the journal of `id`: one write.
    fn append(&self, id: &str, seq: u64, record: &[u8]) -> Result<()>;
    /// The journal of `id`, in order; empty when there is none.
    fn journal(&self, id: &str) -> Result<Vec<(u64, Vec<u8>)>>;
    /// The sequence number of the last record of `id`'s journal.
    fn last_seq(&self, id: &str) -> Result<Option<u64>>;
    /// Replaces the index summary of `id`.
    fn put_index(&self, id: &str, summary: &[u8]) -> Result<()>;
    /// The index summary of `id`.
    fn index(&self, id: &str) -> Result<Option<Vec<u8>>>;
    /// Every index entry, in id order.
    fn index_entries(&self) -> Result<Vec<(String, Vec<u8>)>>;
    /// Removes an instance: its journal first, then its index entry (so a
    /// crash in between leaves an index entry without a journal, which the
    /// journal module finishes removing on open).
    fn remove(&self, id: &str) -> Result<()>;
    /// Blocks until every write made before the call is durable.
    fn flush(&self) -> Result<()>;
    /// The engine is done with the store (its last flush ran): a store
    /// shared by workers lets another take over now. Later calls fail.
    fn close(&self) {}
    /// A store that only reads (it refuses writes): the engine repairs
    /// nothing on open and drives nothing.
    fn read_only(&self) -> bool {
        false
    }
    /// Whether other processes post intents here for this engine to take
    /// ([`Store::posts`]): a store shared by workers.
    fn has_inbox(&self) -> bool {
        false
    }
    /// Posts an intent for instance `id` (an event, a control call) to the
    /// inbox of the worker that drives it, durably. Readers may post.
    fn post(&self, _id: &str, _intent: &[u8]) -> Result<()> {
        Err(crate::error::Error::ReadOnly {
            what: "posting to another process (this store has no inbox)".into(),
        })
    }
    /// Up to `limit` posted intents, oldest first: number, instance, intent.
    fn posts(&self, _limit: usize) -> Result<Vec<(i64, String, Vec<u8>)>> {
        Ok(Vec::new())
    }
    /// Removes post `n` once it was acted on (only while this worker
    /// drives the store: a fenced worker's acts were refused).
    fn done_post(&self, _n: i64) -> Result<()> {
        Ok(())
    }
}
