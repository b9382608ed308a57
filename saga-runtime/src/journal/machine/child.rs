//! A child workflow (`ctx.child`): its start and end in the parent, and
//! the recall that rolls back a completed child with its parent.

use super::{Applied, compensation, misrouted, one};
use crate::journal::change::Change;
use crate::journal::state::{InstanceState, RollbackPlan, SlotKind, SlotRecord, SlotState};
use crate::model::history::EventKind;
use crate::model::status::Status;

pub(super) fn apply(s: &mut InstanceState, seq: u64, at: u64, change: &Change) -> Applied {
    match change {
        Change::ChildStarted {
            slot,
            name,
            occurrence,
            workflow,
            child,
            rollback,
        } => {
            let running = SlotState::ChildRunning {
                child: child.clone(),
                workflow: workflow.clone(),
            };
            let mut record =
                SlotRecord::begun(s, SlotKind::Child, name, *occurrence, running, seq, at);
            record.has_rollback = *rollback;
            s.take_slot(*slot, record);
            s.set_waiting(true);
            one(EventKind::ChildStarted {
                name: name.clone(),
                occurrence: *occurrence,
                child: child.clone(),
                workflow: workflow.clone(),
            })
        }
        Change::ChildEnded {
            slot,
            status,
            output,
            failure,
            value,
        } => {
            let record = s.slot(*slot)?;
            let SlotState::ChildRunning { child, .. } = &record.state else {
                return Err(format!(
                    "record {seq} ends the child of slot {slot}, which runs no child"
                ));
            };
            let child = child.clone();
            record.ended = Some(seq);
            record.state = SlotState::ChildEnded {
                child: child.clone(),
                status: *status,
                output: output.clone(),
                failure: failure
                    .clone()
                    .map(|f| Box::new(f.with_value(value.clone()))),
            };
            let name = record.name.clone();
            s.set_waiting(false);
            one(EventKind::ChildEnded {
                name,
                child,
                status: *status,
            })
        }
        Change::Recalled { cause } => {
            s.status = Status::RollingBack;
            s.finished_at = None;
            s.rollback = Some(RollbackPlan {
                cause: cause.clone(),
                then: Status::Compensated,
                failure: None,
                by_name: false,
            });
            one(EventKind::RollbackStarted {
                cause: cause.message().to_owned(),
            })
        }
        Change::RecallEnded { rollback } => {
            s.status = Status::Compensated;
            s.finished_at = Some(at);
            let event = match rollback {
                Ok(()) => EventKind::RollbackCompleted,
                Err(failure) => {
                    if let Some(plan) = &mut s.rollback {
                        plan.failure = Some(failure.clone());
                    }
                    compensation::gave_up(failure)
                }
            };
            Ok(vec![event, EventKind::InstanceCompensated])
        }
        _ => misrouted(seq, "child"),
    }
}
