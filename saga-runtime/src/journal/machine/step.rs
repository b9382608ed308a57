//! A step: its start, its retries, its end, the typed error of a failed
//! attempt, and the values `ctx.now()` and `ctx.random()` record in a
//! slot of their own.

use super::{Applied, misrouted, one};
use crate::journal::change::Change;
use crate::journal::state::{InstanceState, SlotKind, SlotRecord, SlotState};
use crate::model::history::EventKind;

pub(super) fn apply(s: &mut InstanceState, seq: u64, at: u64, change: &Change) -> Applied {
    match change {
        Change::StepStarted {
            slot,
            name,
            occurrence,
            has_rollback,
            input,
        } => {
            let running = SlotState::Running {
                attempts: 0,
                retry_at: None,
            };
            let mut record =
                SlotRecord::begun(s, SlotKind::Step, name, *occurrence, running, seq, at);
            record.has_rollback = *has_rollback;
            record.input.clone_from(input);
            s.take_slot(*slot, record);
            one(EventKind::StepStarted {
                step: name.clone(),
                occurrence: *occurrence,
            })
        }
        Change::StepRetrying {
            slot,
            attempt,
            error,
            retry_at,
            delay,
        } => {
            let record = s.slot(*slot)?;
            record.state = SlotState::Running {
                attempts: *attempt,
                retry_at: Some(*retry_at),
            };
            one(EventKind::StepRetrying {
                step: record.name.clone(),
                occurrence: record.occurrence,
                attempt: *attempt,
                error: error.to_string(),
                delay: *delay,
            })
        }
        Change::StepCompleted {
            slot,
            output,
            attempts,
        } => {
            let record = s.slot(*slot)?;
            record.state = SlotState::Completed {
                output: output.clone(),
                attempts: *attempts,
            };
            record.ended = Some(seq);
            one(EventKind::StepCompleted {
                step: record.name.clone(),
                occurrence: record.occurrence,
                attempts: *attempts,
            })
        }
        Change::StepFailed {
            slot,
            error,
            attempts,
        } => {
            let value = s.step_failure_values.remove(slot);
            let record = s.slot(*slot)?;
            record.state = SlotState::Failed {
                error: Box::new(error.clone().with_value(value)),
                attempts: *attempts,
            };
            record.ended = Some(seq);
            one(EventKind::StepFailed {
                step: record.name.clone(),
                occurrence: record.occurrence,
                attempts: *attempts,
                error: error.to_string(),
            })
        }
        Change::StepFailureValue { slot, value } => {
            s.slot(*slot)?;
            s.step_failure_values.insert(*slot, value.clone());
            Ok(Vec::new())
        }
        Change::ValueRecorded { slot, kind, value } => {
            let recorded = SlotState::Value { value: *value };
            let mut record = SlotRecord::begun(s, *kind, kind.value_name(), 0, recorded, seq, at);
            record.ended = Some(seq);
            s.take_slot(*slot, record);
            Ok(Vec::new())
        }
        _ => misrouted(seq, "step"),
    }
}
