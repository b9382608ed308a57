//! The records the engine stores. Private: their encoding is pinned by
//! `codec` and their layout by the golden fixtures in `tests/fixtures`.

use serde::{Deserialize, Serialize};

use crate::failure::{Failure, StepError};
use crate::history::EventKind;
use crate::status::Status;

/// One instance: what it runs, with what, and where it is.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct InstanceRecord {
    pub(crate) workflow: String,
    pub(crate) input: Vec<u8>,
    pub(crate) status: Status,
    pub(crate) created_at: u64,
    pub(crate) updated_at: u64,
    pub(crate) finished_at: Option<u64>,
    pub(crate) output: Option<Vec<u8>>,
    pub(crate) failure: Option<Failure>,
    pub(crate) rollback: Option<RollbackPlan>,
}

/// Set when compensation begins; survives crashes so recovery knows why and
/// how the instance ends.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RollbackPlan {
    /// The error that failed the workflow (or "terminated by user").
    pub(crate) cause: Failure,
    /// `Errored` or `Terminated`.
    pub(crate) then: Status,
    /// A compensation that gave up.
    pub(crate) failure: Option<Failure>,
}

/// The kind of a history slot: every durable call of workflow code takes
/// the next slot, and replay checks that it asks for the same kind and name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) enum SlotKind {
    Step,
    Sleep,
    Event,
    Now,
    Random,
}

impl SlotKind {
    pub(crate) fn describe(self, name: &str) -> String {
        match self {
            SlotKind::Step => format!("step {name:?}"),
            SlotKind::Sleep => format!("sleep {name:?}"),
            SlotKind::Event => format!("event wait {name:?}"),
            SlotKind::Now => "ctx.now()".into(),
            SlotKind::Random => "ctx.random()".into(),
        }
    }
}

/// What happened at one slot.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct SlotRecord {
    pub(crate) kind: SlotKind,
    pub(crate) name: String,
    pub(crate) occurrence: u32,
    pub(crate) has_rollback: bool,
    /// The history sequence number at which the slot was taken, so
    /// `restart_from` can cut history there.
    pub(crate) history_seq: u64,
    pub(crate) state: SlotState,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum SlotState {
    /// A step between attempts or in one; `retry_at` is when the next
    /// attempt may start.
    Running {
        attempts: u32,
        retry_at: Option<u64>,
    },
    Completed {
        output: Vec<u8>,
        attempts: u32,
    },
    Failed {
        error: StepError,
        attempts: u32,
    },
    /// In flight when the workflow failed: stopped, never to run again.
    Cancelled,
    Sleeping {
        wake_at: u64,
    },
    Slept,
    Waiting {
        event_type: String,
        deadline: u64,
    },
    Received {
        event_type: String,
        payload: Vec<u8>,
    },
    TimedOut {
        event_type: String,
    },
    Value {
        value: Vec<u8>,
    },
}

/// The progress of one compensation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RollbackRecord {
    pub(crate) step: String,
    pub(crate) occurrence: u32,
    pub(crate) state: RollbackState,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum RollbackState {
    Running { attempts: u32 },
    Completed,
    Failed { error: String },
}

/// An event sent to an instance and not yet taken by a wait.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PendingEvent {
    pub(crate) event_type: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) sent_at: u64,
}

/// One history entry as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct HistoryRecord {
    pub(crate) at: u64,
    pub(crate) kind: EventKind,
}
