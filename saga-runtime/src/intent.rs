//! Intents: what a process that does not drive an instance asks of it
//! (posted here, taken by the driving worker's `inbox`).
//!
//! On a store shared by workers (PostgreSQL), a reader (the `saga` command,
//! a dashboard) holds no lease, so it cannot write an instance's journal.
//! Its events and control calls are posted to the store's inbox instead;
//! the worker that drives the instances takes them, oldest first, acts on
//! each through the same calls a local user would make, and only then
//! removes it. A worker that dies between the two acts again after the
//! take-over:
//!
//! - an event carries an id (the caller's, or `inbox-<n>`), so it is stored
//!   once;
//! - pause, resume and terminate acted on twice end the same way (the
//!   second is refused as already done, and dropped);
//! - a restart acted on twice would run the instance twice, so a restart is
//!   removed from the inbox *before* it is acted on: at most once.

use serde::{Deserialize, Serialize};

use crate::codec::{Payload, encode_record};
use crate::error::Result;
use crate::journal::Journal;

impl Intent {
    /// How many kinds of intent this release knows (the variants below;
    /// append only, as journal records: see `journal::change`).
    pub(crate) const KINDS: u32 = 6;
}

/// One posted intent.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Intent {
    Event {
        event_type: String,
        payload: Payload,
        event_id: Option<String>,
    },
    Pause,
    Resume,
    Terminate {
        rollback: bool,
    },
    Restart {
        from: Option<String>,
    },
    RetryRollback,
}

/// Posts `intent` for instance `id` to the worker that drives it.
pub(crate) async fn post(journal: &Journal, id: &str, intent: &Intent) -> Result<()> {
    journal.post(id, &encode_record(intent)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last variant is the last kind [`Intent::KINDS`] counts.
    #[test]
    fn the_last_kind_of_intent_is_counted() {
        let last = encode_record(&Intent::RetryRollback);
        assert_eq!(last, [crate::codec::FORMAT_VERSION, 5]);
        assert_eq!(u32::from(last[1]), Intent::KINDS - 1);
        assert!(crate::codec::from_newer_release(
            &[crate::codec::FORMAT_VERSION, 6],
            0,
            Intent::KINDS
        ));
    }
}
