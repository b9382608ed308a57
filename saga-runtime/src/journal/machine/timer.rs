//! A durable sleep (`ctx.sleep`).

use super::{Applied, misrouted, one};
use crate::journal::change::Change;
use crate::journal::state::{InstanceState, SlotKind, SlotRecord, SlotState};
use crate::model::history::EventKind;
use crate::time::clock::from_millis;

pub(super) fn apply(s: &mut InstanceState, seq: u64, at: u64, change: &Change) -> Applied {
    match change {
        Change::SleepStarted {
            slot,
            name,
            occurrence,
            wake_at,
        } => {
            let sleeping = SlotState::Sleeping { wake_at: *wake_at };
            let record =
                SlotRecord::begun(s, SlotKind::Sleep, name, *occurrence, sleeping, seq, at);
            s.take_slot(*slot, record);
            s.set_waiting(true);
            one(EventKind::SleepStarted {
                name: name.clone(),
                wake_at: from_millis(*wake_at),
            })
        }
        Change::SleepCompleted { slot } => {
            let record = s.slot(*slot)?;
            record.state = SlotState::Slept;
            record.ended = Some(seq);
            let name = record.name.clone();
            s.set_waiting(false);
            one(EventKind::SleepCompleted { name })
        }
        _ => misrouted(seq, "timer"),
    }
}
