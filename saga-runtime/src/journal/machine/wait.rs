//! Events: a wait for one (`ctx.wait_for_event`), an event arriving
//! (pending until a wait takes it), taken, set aside, or the wait's
//! deadline passing.

use super::{Applied, misrouted, one};
use crate::codec::Payload;
use crate::journal::change::Change;
use crate::journal::state::{
    InstanceState, PendingEvent, Rejected, SentEvent, SlotKind, SlotRecord, SlotState,
};
use crate::model::history::EventKind;
use crate::time::clock::from_millis;

pub(super) fn apply(s: &mut InstanceState, seq: u64, at: u64, change: &Change) -> Applied {
    match change {
        Change::WaitStarted {
            slot,
            name,
            occurrence,
            event_type,
            deadline,
        }
        | Change::WaitStartedWithRollback {
            slot,
            name,
            occurrence,
            event_type,
            deadline,
        } => {
            let waiting = SlotState::Waiting {
                event_type: event_type.clone(),
                deadline: *deadline,
            };
            let mut record =
                SlotRecord::begun(s, SlotKind::Event, name, *occurrence, waiting, seq, at);
            record.has_rollback = matches!(change, Change::WaitStartedWithRollback { .. });
            s.take_slot(*slot, record);
            s.set_waiting(true);
            one(EventKind::EventWaitStarted {
                name: name.clone(),
                event_type: event_type.clone(),
                deadline: from_millis(*deadline),
            })
        }
        Change::EventReceived {
            event_type,
            payload,
        } => one(receive(s, seq, at, event_type, payload)),
        Change::EventReceivedWithId {
            event_type,
            payload,
            event_id,
        } => {
            s.event_ids.insert(
                event_id.clone(),
                SentEvent {
                    event_type: event_type.clone(),
                    payload: payload.clone(),
                    sent_at: at,
                },
            );
            one(receive(s, seq, at, event_type, payload))
        }
        Change::EventTaken { slot, event } => {
            let pending = s.pending.remove(event).ok_or_else(|| {
                format!("record {seq} takes event {event:?}, which is not pending")
            })?;
            let record = s.slot(*slot)?;
            record.state = SlotState::Received {
                event_type: pending.event_type.clone(),
                payload: pending.payload,
            };
            record.ended = Some(seq);
            let name = record.name.clone();
            s.set_waiting(false);
            one(EventKind::EventDelivered {
                name,
                event_type: pending.event_type,
            })
        }
        Change::EventRejected { slot, event, error } => {
            let pending = s.pending.remove(event).ok_or_else(|| {
                format!("record {seq} rejects event {event:?}, which is not pending")
            })?;
            let name = s.slot(*slot)?.name.clone();
            s.rejected.push(Rejected {
                at,
                wait: name.clone(),
                event_type: pending.event_type.clone(),
                error: error.clone(),
            });
            one(EventKind::EventRejected {
                name,
                event_type: pending.event_type,
                error: error.clone(),
            })
        }
        Change::WaitTimedOut { slot } => {
            let record = s.slot(*slot)?;
            let event_type = match &record.state {
                SlotState::Waiting { event_type, .. } => event_type.clone(),
                _ => String::new(),
            };
            record.state = SlotState::TimedOut {
                event_type: event_type.clone(),
            };
            record.ended = Some(seq);
            let name = record.name.clone();
            s.set_waiting(false);
            one(EventKind::EventWaitTimedOut { name, event_type })
        }
        _ => misrouted(seq, "wait"),
    }
}

/// An event arrived: pending until a wait for its type takes it.
fn receive(
    s: &mut InstanceState,
    seq: u64,
    at: u64,
    event_type: &str,
    payload: &Payload,
) -> EventKind {
    s.pending.insert(
        (seq, 0),
        PendingEvent {
            event_type: event_type.to_owned(),
            payload: payload.clone(),
            sent_at: at,
        },
    );
    EventKind::EventReceived {
        event_type: event_type.to_owned(),
    }
}
