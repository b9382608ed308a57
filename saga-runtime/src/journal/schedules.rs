//! The store's schedule states, reached through the journal (which owns
//! the store): opaque bytes here, encoded by `schedule::state`.

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
        if self.read_only() {
            return Err(crate::Error::ReadOnly {
                what: format!("a change to schedule {name:?}"),
            });
        }
        self.store.swap_schedule(name, old, new).await
    }

    /// Removes the state of `name` if it is `old` now.
    pub(crate) async fn remove_schedule_state(&self, name: &str, old: &[u8]) -> Result<bool> {
        if self.read_only() {
            return Err(crate::Error::ReadOnly {
                what: format!("the deletion of schedule {name:?}"),
            });
        }
        self.store.remove_schedule(name, old).await
    }
}
