//! The fold: what each journal record does to an instance's state, and
//! the public history events it stands for.
//!
//! One machine per concern, each applying its own records, in the manner
//! of Temporal's sdk-core machines: [`run`] (creation, the driver's
//! starts, blocking, the end, restarts and the hand-over to the next run),
//! [`queue_slot`], [`step`], [`timer`], [`wait`] (events), [`child`],
//! [`compensation`] and [`control`] (pause and resume). The dispatcher
//! below only routes a record to its machine. The fold is the only code
//! that gives a record its meaning; an `Err` means the journal is
//! inconsistent (a corrupt store).

mod child;
mod compensation;
mod control;
mod queue_slot;
mod run;
mod step;
mod timer;
mod wait;

use super::change::{Change, Entry};
use super::state::InstanceState;
use crate::model::history::EventKind;

/// What a machine makes of a record: the public events it stands for,
/// or why the journal is inconsistent.
type Applied = Result<Vec<EventKind>, String>;

/// Applies `entry` to the state (`None` before the instance's first
/// record); returns the public events it stands for.
pub(crate) fn apply(state: &mut Option<InstanceState>, seq: u64, entry: &Entry) -> Applied {
    match state {
        Some(s) => apply_to_state(s, seq, entry),
        None => run::create(state, seq, entry.at, &entry.change),
    }
}

/// Applies `entry` to the state of an existing instance.
pub(crate) fn apply_to_state(s: &mut InstanceState, seq: u64, entry: &Entry) -> Applied {
    if s.handed_over.is_some() {
        return Err(format!(
            "record {seq} follows the hand-over that ended run {}",
            s.run
        ));
    }
    let events = route(s, seq, entry.at, &entry.change)?;
    s.updated_at = entry.at;
    s.events += events.len() as u64;
    Ok(events)
}

/// Hands `change` to the machine that owns it.
fn route(s: &mut InstanceState, seq: u64, at: u64, change: &Change) -> Applied {
    use Change as C;
    match change {
        C::Created { .. } | C::Imported(_) | C::CreatedOnQueue { .. } => {
            Err(format!("record {seq} creates an instance that exists"))
        }
        C::ContinuedAsNew(_)
        | C::ContinuedAsNewDated(_)
        | C::DriverStarted
        | C::Ended(_)
        | C::Blocked { .. }
        | C::Restarted { .. }
        | C::FailureValue { .. }
        | C::Described { .. }
        | C::Patched { .. }
        | C::Published { .. }
        | C::UpdateReplied { .. } => run::apply(s, seq, at, change),
        C::Dequeued | C::SlotReleased | C::Requeued => queue_slot::apply(s, seq, at, change),
        C::StepStarted { .. }
        | C::StepRetrying { .. }
        | C::StepCompleted { .. }
        | C::StepFailed { .. }
        | C::StepFailureValue { .. }
        | C::ValueRecorded { .. } => step::apply(s, seq, at, change),
        C::SleepStarted { .. } | C::SleepCompleted { .. } => timer::apply(s, seq, at, change),
        C::WaitStarted { .. }
        | C::WaitStartedWithRollback { .. }
        | C::EventReceived { .. }
        | C::EventReceivedWithId { .. }
        | C::EventTaken { .. }
        | C::EventRejected { .. }
        | C::WaitTimedOut { .. } => wait::apply(s, seq, at, change),
        C::ChildStarted { .. }
        | C::ChildEnded { .. }
        | C::Recalled { .. }
        | C::RecallEnded { .. } => child::apply(s, seq, at, change),
        C::RollbackStarted { .. }
        | C::CompensationStarted { .. }
        | C::CompensationRetrying { .. }
        | C::CompensationCompleted { .. }
        | C::CompensationFailed { .. }
        | C::RollbackRetried => compensation::apply(s, seq, change),
        C::Paused | C::PausedWithParent | C::Unpaused => control::apply(s, seq, change),
    }
}

/// A machine was handed a record of another: the dispatcher and the
/// machine disagree, which no store can cause; answered as an
/// inconsistency rather than a panic.
fn misrouted(seq: u64, machine: &str) -> Applied {
    Err(format!(
        "record {seq} was routed to the {machine} machine, which does not own it"
    ))
}

/// One public event.
fn one(event: EventKind) -> Applied {
    Ok(vec![event])
}
