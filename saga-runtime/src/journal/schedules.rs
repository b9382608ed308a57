//! The store's schedule states and queue limits, reached through the
//! journal (which owns the store): opaque bytes here, encoded by
//! `schedule::state` and `queue::stored`.

use super::Journal;
use crate::error::Result;

impl Journal {
    /// Every stored schedule state, by name.
    pub(crate) async fn schedule_states(&self) -> Result<Vec<(String, Vec<u8>)>> {
        self.store.schedules().await
    }

    /// The stored state of schedule `name`.
    pub(crate) async fn schedule_state(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.store.schedule(name).await
    }

    /// Replaces the state of `name` with `new` if it is `old` now.
    pub(crate) async fn swap_schedule_state(
        &self,
        name: &str,
        old: Option<&[u8]>,
        new: &[u8],
    ) -> Result<bool> {
        self.refuse_if_reading(|| format!("a change to schedule {name:?}"))?;
        self.store.swap_schedule(name, old, new).await
    }

    /// Removes the state of `name` if it is `old` now.
    pub(crate) async fn remove_schedule_state(&self, name: &str, old: &[u8]) -> Result<bool> {
        self.refuse_if_reading(|| format!("the deletion of schedule {name:?}"))?;
        self.store.remove_schedule(name, old).await
    }
}

/// The store's queue limits, likewise: opaque bytes here, encoded by
/// `queue::stored`.
impl Journal {
    /// The stored limits of queue `name`.
    pub(crate) async fn queue_limits(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.store.queue_limits(name).await
    }

    /// Every queue's stored limits, by name.
    pub(crate) async fn all_queue_limits(&self) -> Result<Vec<(String, Vec<u8>)>> {
        self.store.all_queue_limits().await
    }

    /// Replaces the limits of queue `name` with `new` if they are `old` now.
    pub(crate) async fn swap_queue_limits(
        &self,
        name: &str,
        old: Option<&[u8]>,
        new: &[u8],
    ) -> Result<bool> {
        self.refuse_if_reading(|| format!("a change to the limits of queue {name:?}"))?;
        self.store.swap_queue_limits(name, old, new).await
    }

    /// [`Error::ReadOnly`](crate::Error::ReadOnly) for `what` on an engine
    /// that only reads.
    fn refuse_if_reading(&self, what: impl FnOnce() -> String) -> Result<()> {
        if self.read_only() {
            return Err(crate::Error::ReadOnly { what: what() });
        }
        Ok(())
    }
}
