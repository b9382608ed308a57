//! The hand-over record of a run to the next (`Change::ContinuedAsNew`)
//! and how runs number their records: what `journal::runs` writes, and
//! what the fold (`machine::run`) and the stores' ranges read.

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
    /// Events sent with an id: id, type, payload.
    pub(crate) event_ids: Vec<(String, String, Payload)>,
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
            .chain(self.event_ids.iter_mut().map(|(_, _, p)| p))
            .collect()
    }
}
