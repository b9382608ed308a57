//! Pausing and resuming an instance.

use super::{Applied, misrouted, one};
use crate::journal::change::Change;
use crate::journal::state::{InstanceState, SlotState};
use crate::model::history::EventKind;
use crate::model::status::Status;

pub(super) fn apply(s: &mut InstanceState, seq: u64, change: &Change) -> Applied {
    match change {
        Change::Paused | Change::PausedWithParent => {
            s.status = Status::Paused;
            s.paused_with_parent = matches!(change, Change::PausedWithParent);
            one(EventKind::Paused)
        }
        Change::Unpaused => unpause(s),
        _ => misrouted(seq, "control"),
    }
}

fn unpause(s: &mut InstanceState) -> Applied {
    s.paused_with_parent = false;
    s.status = Status::Running;
    // Paused while it waited in its queue: it waits again.
    if s.queue.as_ref().is_some_and(|q| !q.taken) {
        s.status = Status::Queued;
        return one(EventKind::Resumed);
    }
    // Paused in a sleep or a wait, it is back in it: replay records no
    // new start for it, so its status says so here.
    let in_a_wait = s.slots.values().any(|r| {
        matches!(
            r.state,
            SlotState::Sleeping { .. } | SlotState::Waiting { .. }
        )
    });
    s.set_waiting(in_a_wait);
    one(EventKind::Resumed)
}
