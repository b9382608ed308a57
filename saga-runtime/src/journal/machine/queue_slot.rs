//! An instance's place in its queue (`start_on`): taking a slot, giving
//! it back while it waits, and going back to wait for one.

use super::{Applied, misrouted, one};
use crate::journal::change::Change;
use crate::journal::state::InstanceState;
use crate::model::history::EventKind;
use crate::model::status::Status;

pub(super) fn apply(s: &mut InstanceState, seq: u64, at: u64, change: &Change) -> Applied {
    match change {
        Change::Dequeued => {
            let Some(spot) = &mut s.queue else {
                return Err(format!("record {seq} takes a slot of no queue"));
            };
            spot.taken = true;
            s.took_slot_at.push(at);
            s.slot_released = false;
            let queue = spot.queue.clone();
            one(EventKind::Dequeued { queue })
        }
        Change::SlotReleased => {
            let Some(spot) = &mut s.queue else {
                return Err(format!("record {seq} gives back a slot of no queue"));
            };
            spot.taken = false;
            s.slot_released = true;
            let queue = spot.queue.clone();
            one(EventKind::SlotReleased { queue })
        }
        Change::Requeued => {
            let Some(spot) = &s.queue else {
                return Err(format!(
                    "record {seq} puts back in a queue an instance of none"
                ));
            };
            let queue = spot.queue.clone();
            s.slot_released = false;
            s.status = Status::Queued;
            one(EventKind::Requeued { queue })
        }
        _ => misrouted(seq, "queue slot"),
    }
}
