//! The hand-over record of a run to the next
//! (`Change::ContinuedAsNewDated`, and the release before's
//! `Change::ContinuedAsNew`) and how runs number their records: what
//! `journal::runs` writes, and what the fold (`machine::run`) and the
//! stores' ranges read.

use serde::{Deserialize, Serialize};

use crate::codec::Payload;

/// How far the run is shifted into a sequence number.
const RUN_SHIFT: u32 = 32;

/// The last run a store can key (a PostgreSQL `bigint` is signed).
pub(crate) const LAST_RUN: u32 = (1 << 31) - 1;

/// The run a sequence number belongs to.
pub(crate) fn run_of(seq: u64) -> u32 {
    (seq >> RUN_SHIFT) as u32
}

/// The sequence number of a run's first record.
pub(crate) fn start(run: u32) -> u64 {
    u64::from(run) << RUN_SHIFT
}

/// Every sequence number of a run.
pub(crate) fn seqs_of(run: u32) -> std::ops::Range<u64> {
    start(run)..start(run).saturating_add(1 << RUN_SHIFT)
}

/// The hand-over from one run to the next: everything the next run
/// begins with.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Continued {
    /// The run that begins.
    pub(crate) run: u32,
    pub(crate) workflow: String,
    /// The next run's input.
    pub(crate) input: Payload,
    /// When the instance (its run 0) was created.
    pub(crate) created_at: u64,
    pub(crate) parent: Option<String>,
    pub(crate) tags: Vec<(String, String)>,
    pub(crate) queue: Option<CarriedSpot>,
    /// Events no wait took yet: type, payload, when sent.
    pub(crate) pending: Vec<(String, Payload, u64)>,
    /// The ids of events sent within the deduplication window before the
    /// hand-over (`runs`), each with when it was sent.
    pub(crate) event_ids: Vec<CarriedEventId>,
}

/// An event id a run hands over, so a send repeated in the next run is
/// still recognised.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct CarriedEventId {
    pub(crate) id: String,
    pub(crate) event_type: String,
    pub(crate) payload: Payload,
    /// When it was sent (milliseconds, the engine's clock).
    pub(crate) sent_at: u64,
}

/// The hand-over as the release before wrote it (`Change::ContinuedAsNew`):
/// its event ids carry no send time, and it carried every id ever sent.
/// Read only: this release writes [`Continued`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ContinuedUndated {
    pub(crate) run: u32,
    pub(crate) workflow: String,
    pub(crate) input: Payload,
    pub(crate) created_at: u64,
    pub(crate) parent: Option<String>,
    pub(crate) tags: Vec<(String, String)>,
    pub(crate) queue: Option<CarriedSpot>,
    pub(crate) pending: Vec<(String, Payload, u64)>,
    /// Events sent with an id: id, type, payload.
    pub(crate) event_ids: Vec<(String, String, Payload)>,
}

impl ContinuedUndated {
    /// The hand-over read as this release's, its record written at `at`:
    /// its ids count as sent then (their send times were never stored), so
    /// each is remembered one more window from the hand-over, and an id
    /// a sender may still retry is not forgotten at the upgrade.
    pub(crate) fn dated(&self, at: u64) -> Continued {
        Continued {
            run: self.run,
            workflow: self.workflow.clone(),
            input: self.input.clone(),
            created_at: self.created_at,
            parent: self.parent.clone(),
            tags: self.tags.clone(),
            queue: self.queue.clone(),
            pending: self.pending.clone(),
            event_ids: self
                .event_ids
                .iter()
                .map(|(id, event_type, payload)| CarriedEventId {
                    id: id.clone(),
                    event_type: event_type.clone(),
                    payload: payload.clone(),
                    sent_at: at,
                })
                .collect(),
        }
    }

    /// The user values it holds, for the engine's codec.
    pub(crate) fn payloads_mut(&mut self) -> Vec<&mut Payload> {
        std::iter::once(&mut self.input)
            .chain(self.pending.iter_mut().map(|(_, p, _)| p))
            .chain(self.event_ids.iter_mut().map(|(_, _, p)| p))
            .collect()
    }
}

/// An instance's place in its queue, carried over (see `queued`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct CarriedSpot {
    pub(crate) queue: String,
    pub(crate) key: Option<String>,
    pub(crate) priority: i32,
    pub(crate) order: u64,
    pub(crate) taken: bool,
}

impl Continued {
    /// The user values it holds, for the engine's codec.
    pub(crate) fn payloads_mut(&mut self) -> Vec<&mut Payload> {
        std::iter::once(&mut self.input)
            .chain(self.pending.iter_mut().map(|(_, p, _)| p))
            .chain(self.event_ids.iter_mut().map(|e| &mut e.payload))
            .collect()
    }
}
