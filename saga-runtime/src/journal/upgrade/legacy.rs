//! The first release's records (format version 1: one sled tree per kind
//! of record), kept only to upgrade such a store on open. Each instance
//! becomes one `Imported` journal record holding its folded state and its
//! history, and the old trees are dropped.
//!
//! The types below must keep their layout: bincode reads them by position.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::codec::{Payload, decode_legacy_record};
use crate::error::failure::{Failure, StepError};
use crate::journal::state::{
    CompensationState, InstanceState, PendingEvent as NewPendingEvent,
    RollbackPlan as NewRollbackPlan, SlotKind, SlotRecord as NewSlotRecord,
    SlotState as NewSlotState,
};
use crate::model::history::EventKind;
use crate::model::status::Status;
use crate::store::LegacyInstance;

/// An instance of the first release, as one journal record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Imported {
    pub(crate) state: InstanceState,
    /// Its history: when, and what.
    pub(crate) history: Vec<(u64, EventKind)>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct InstanceRecord {
    workflow: String,
    input: Vec<u8>,
    status: Status,
    created_at: u64,
    updated_at: u64,
    finished_at: Option<u64>,
    output: Option<Vec<u8>>,
    failure: Option<Failure>,
    rollback: Option<RollbackPlan>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct RollbackPlan {
    cause: Failure,
    then: Status,
    failure: Option<Failure>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct SlotRecord {
    kind: SlotKind,
    name: String,
    occurrence: u32,
    has_rollback: bool,
    history_seq: u64,
    state: SlotState,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
enum SlotState {
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

#[derive(Clone, Debug, Serialize, Deserialize)]
struct RollbackRecord {
    step: String,
    occurrence: u32,
    state: RollbackState,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum RollbackState {
    Running { attempts: u32 },
    Completed,
    Failed { error: String },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct PendingEvent {
    event_type: String,
    payload: Vec<u8>,
    sent_at: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct HistoryRecord {
    at: u64,
    kind: EventKind,
}

/// Reads one instance of the first release's layout.
pub(crate) fn import(legacy: &LegacyInstance) -> Result<Imported, String> {
    let what = |kind: &str, e: String| format!("{kind} of instance {:?}: {e}", legacy.id);
    let record: InstanceRecord =
        decode_legacy_record(&legacy.record).map_err(|e| what("the instance record", e))?;
    let mut slots = BTreeMap::new();
    for (key, bytes) in &legacy.slots {
        let index = u32_key(key).ok_or_else(|| what("a slot key", "not 4 bytes".into()))?;
        let slot: SlotRecord = decode_legacy_record(bytes).map_err(|e| what("a slot", e))?;
        slots.insert(index, Box::new(convert_slot(slot)?));
    }
    let mut compensations = BTreeMap::new();
    for (key, bytes) in &legacy.rollbacks {
        let index = u32_key(key).ok_or_else(|| what("a rollback key", "not 4 bytes".into()))?;
        let rollback: RollbackRecord =
            decode_legacy_record(bytes).map_err(|e| what("a rollback record", e))?;
        let state = match rollback.state {
            RollbackState::Running { attempts } => CompensationState::Running {
                attempts,
                retry_at: None,
            },
            RollbackState::Completed => CompensationState::Completed,
            RollbackState::Failed { error } => CompensationState::Failed { error },
        };
        compensations.insert(index, state);
    }
    let mut pending = BTreeMap::new();
    for (i, (_, bytes)) in legacy.events.iter().enumerate() {
        let event: PendingEvent =
            decode_legacy_record(bytes).map_err(|e| what("a pending event", e))?;
        pending.insert(
            (0, u32::try_from(i).unwrap_or(u32::MAX)),
            NewPendingEvent {
                event_type: event.event_type,
                payload: Payload::Bincode(event.payload),
                sent_at: event.sent_at,
            },
        );
    }
    let mut history = Vec::new();
    for (_, bytes) in &legacy.history {
        let event: HistoryRecord =
            decode_legacy_record(bytes).map_err(|e| what("a history event", e))?;
        history.push((event.at, event.kind));
    }
    let state = InstanceState {
        workflow: record.workflow,
        input: Payload::Bincode(record.input),
        status: record.status,
        created_at: record.created_at,
        updated_at: record.updated_at,
        finished_at: record.finished_at,
        output: record.output.map(Payload::Bincode),
        failure: record.failure,
        rollback: record.rollback.map(|plan| NewRollbackPlan {
            cause: plan.cause,
            then: plan.then,
            failure: plan.failure,
            by_name: false,
        }),
        slots,
        compensations,
        pending,
        generation: 0,
        events: history.len() as u64,
        failure_value: None,
        step_failure_values: BTreeMap::new(),
        event_ids: BTreeMap::new(),
        tags: BTreeMap::new(),
        parent: None,
        paused_with_parent: false,
        compensation_attempts: BTreeMap::new(),
        failed_compensation: false,
        queue: None,
        rejected: Vec::new(),
        patches: std::collections::BTreeSet::new(),
        took_slot_at: Vec::new(),
        slot_released: false,
        run: 0,
        run_began_at: record.created_at,
        handed_over: None,
        published: BTreeMap::new(),
        update_replies: BTreeMap::new(),
    };
    Ok(Imported { state, history })
}

fn u32_key(key: &[u8]) -> Option<u32> {
    key.try_into().ok().map(u32::from_be_bytes)
}

fn convert_slot(slot: SlotRecord) -> Result<NewSlotRecord, String> {
    let state = match slot.state {
        SlotState::Running { attempts, retry_at } => NewSlotState::Running { attempts, retry_at },
        SlotState::Completed { output, attempts } => NewSlotState::Completed {
            output: Payload::Bincode(output),
            attempts,
        },
        SlotState::Failed { error, attempts } => NewSlotState::Failed {
            error: Box::new(error),
            attempts,
        },
        SlotState::Cancelled => NewSlotState::Cancelled,
        SlotState::Sleeping { wake_at } => NewSlotState::Sleeping { wake_at },
        SlotState::Slept => NewSlotState::Slept,
        SlotState::Waiting {
            event_type,
            deadline,
        } => NewSlotState::Waiting {
            event_type,
            deadline,
        },
        SlotState::Received {
            event_type,
            payload,
        } => NewSlotState::Received {
            event_type,
            payload: Payload::Bincode(payload),
        },
        SlotState::TimedOut { event_type } => NewSlotState::TimedOut { event_type },
        SlotState::Value { value } => NewSlotState::Value {
            value: Payload::Bincode(value)
                .decode::<u64>()
                .map_err(|e| format!("a recorded value: {e}"))?,
        },
    };
    Ok(NewSlotRecord {
        kind: slot.kind,
        name: slot.name,
        occurrence: slot.occurrence,
        has_rollback: slot.has_rollback,
        generation: 0,
        input: None,
        state,
        // The first release kept no order of records: every step counts
        // as overlapping every other.
        began: 0,
        ended: None,
        began_at: 0,
    })
}
