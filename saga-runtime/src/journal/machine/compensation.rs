//! Rollback: its start, each compensation's progress, and a retried
//! rollback.

use super::{Applied, misrouted, one};
use crate::error::failure::{Failure, FailureKind};
use crate::journal::change::Change;
use crate::journal::state::{CompensationState, InstanceState, RollbackPlan, SlotState};
use crate::model::history::EventKind;
use crate::model::status::Status;

pub(super) fn apply(s: &mut InstanceState, seq: u64, change: &Change) -> Applied {
    match change {
        Change::RollbackStarted { cause, then } => {
            for record in s.slots.values_mut() {
                if matches!(record.state, SlotState::Running { .. }) {
                    record.state = SlotState::Cancelled;
                }
            }
            let by_name = s.status == Status::Blocked;
            s.status = Status::RollingBack;
            s.rollback = Some(RollbackPlan {
                cause: cause.clone().with_value(s.failure_value.take()),
                then: *then,
                failure: None,
                by_name,
            });
            one(EventKind::RollbackStarted {
                cause: cause.message().to_owned(),
            })
        }
        Change::CompensationStarted { slot } => {
            let running = CompensationState::Running {
                attempts: 0,
                retry_at: None,
            };
            let (step, occurrence) = s.compensation(*slot, running)?;
            s.compensation_attempts.insert(*slot, 0);
            one(EventKind::RollbackStepStarted { step, occurrence })
        }
        Change::CompensationRetrying {
            slot,
            attempt,
            retry_at,
        } => {
            let running = CompensationState::Running {
                attempts: *attempt,
                retry_at: Some(*retry_at),
            };
            s.compensation(*slot, running)?;
            s.compensation_attempts.insert(*slot, *attempt);
            Ok(Vec::new())
        }
        Change::CompensationCompleted { slot } => {
            let (step, occurrence) = s.compensation(*slot, CompensationState::Completed)?;
            *s.compensation_attempts.entry(*slot).or_default() += 1;
            one(EventKind::RollbackStepCompleted { step, occurrence })
        }
        Change::CompensationFailed { slot, error } => {
            s.failed_compensation = true;
            let failed = CompensationState::Failed {
                error: error.clone(),
            };
            let (step, occurrence) = s.compensation(*slot, failed)?;
            *s.compensation_attempts.entry(*slot).or_default() += 1;
            one(EventKind::RollbackStepFailed {
                step,
                occurrence,
                error: error.clone(),
            })
        }
        Change::RollbackRetried => {
            let Some(plan) = &mut s.rollback else {
                return Err(format!("record {seq} retries a rollback that never ran"));
            };
            plan.failure = None;
            // Completed compensations stay done; the one that gave up (and
            // those after it, which never started) run again.
            s.compensations
                .retain(|_, c| *c == CompensationState::Completed);
            let kept = &s.compensations;
            s.compensation_attempts
                .retain(|slot, _| kept.contains_key(slot));
            s.status = Status::RollingBack;
            s.finished_at = None;
            one(EventKind::RollbackRetried)
        }
        _ => misrouted(seq, "compensation"),
    }
}

/// The public event of a rollback that gave up with `failure`.
pub(super) fn gave_up(failure: &Failure) -> EventKind {
    EventKind::RollbackFailed {
        step: match failure.kind() {
            FailureKind::Rollback { step } => step.clone(),
            _ => String::new(),
        },
        error: failure.message().to_owned(),
    }
}
