//! An instance's life as a whole: its creation (or its import from the
//! first release, or the beginning of a run after the first), its driver
//! starting, what it records about itself (tags, parent, patches, the
//! values it publishes, its replies to updates, the typed error of its failure), being blocked, its end, a restart, and
//! the hand-over that ends its run (`journal::runs`).

use super::{Applied, compensation, misrouted, one};
use crate::codec::Payload;
use crate::journal::change::{Change, End};
use crate::journal::handover::{Continued, run_of, start};
use crate::journal::queued::QueueSpot;
use crate::journal::state::{InstanceState, PendingEvent, PublishedValue, SentEvent, SlotState};
use crate::model::history::EventKind;
use crate::model::status::Status;

/// The first record of an instance, or of one of its runs: makes its
/// state.
pub(super) fn create(
    state: &mut Option<InstanceState>,
    seq: u64,
    at: u64,
    change: &Change,
) -> Applied {
    let (created, events) = match change {
        Change::Created { workflow, input } => (
            InstanceState::created(workflow, input, at),
            vec![EventKind::InstanceCreated {
                workflow: workflow.clone(),
            }],
        ),
        Change::CreatedOnQueue {
            workflow,
            input,
            queue,
            key,
            priority,
            order,
        } => {
            let mut created = InstanceState::created(workflow, input, at);
            created.queue = Some(QueueSpot {
                queue: queue.clone(),
                key: key.clone(),
                priority: *priority,
                order: *order,
                taken: false,
            });
            let events = vec![EventKind::InstanceCreated {
                workflow: workflow.clone(),
            }];
            (created, events)
        }
        Change::Imported(imported) => {
            let mut created = imported.state.clone();
            created.events = imported.history.len() as u64;
            created.run_began_at = created.created_at;
            let events = imported.history.iter().map(|(_, k)| k.clone()).collect();
            (created, events)
        }
        // The first record of a run after the first.
        Change::ContinuedAsNewDated(continued) => (
            begin_run(continued, seq, at)?,
            vec![EventKind::ContinuedAsNew { run: continued.run }],
        ),
        Change::ContinuedAsNew(undated) => (
            begin_run(&undated.dated(at), seq, at)?,
            vec![EventKind::ContinuedAsNew { run: undated.run }],
        ),
        _ => {
            return Err(format!(
                "record {seq} comes before the instance was created"
            ));
        }
    };
    *state = Some(created);
    Ok(events)
}

pub(super) fn apply(s: &mut InstanceState, seq: u64, at: u64, change: &Change) -> Applied {
    match change {
        // The hand-over: the run ends here, `Running`, and the next one
        // begins from it.
        Change::ContinuedAsNewDated(continued) => hand_over(s, seq, continued.clone()),
        Change::ContinuedAsNew(undated) => hand_over(s, seq, Box::new(undated.dated(at))),
        Change::DriverStarted => {
            // A value written before a crash belongs to no failure: the
            // run that wrote it did not get to record its end.
            s.failure_value = None;
            s.step_failure_values.clear();
            match s.status {
                Status::Queued => s.status = Status::Running,
                // The code is tried again: it blocks again if it still
                // does not match.
                Status::Blocked => {
                    s.status = Status::Running;
                    s.failure = None;
                }
                _ => {}
            }
            one(EventKind::InstanceResumed)
        }
        Change::Ended(end) => Ok(end_instance(s, at, end)),
        Change::Blocked { failure } => {
            s.status = Status::Blocked;
            s.failure = Some(failure.clone());
            one(EventKind::InstanceBlocked {
                error: failure.message().to_owned(),
            })
        }
        Change::Restarted {
            from_slot,
            from_step,
        } => {
            restart(s, seq, at, *from_slot);
            one(EventKind::InstanceRestarted {
                from_step: from_step.clone(),
            })
        }
        Change::FailureValue { value } => {
            s.failure_value = Some(value.clone());
            Ok(Vec::new())
        }
        Change::Described { parent, tags } => {
            if s.parent.is_none() {
                s.parent.clone_from(parent);
            }
            s.tags.extend(tags.iter().cloned());
            Ok(Vec::new())
        }
        Change::Patched { name } => {
            s.patches.insert(name.clone());
            one(EventKind::Patched { name: name.clone() })
        }
        Change::Published { name, value } => {
            let count = s
                .published
                .get(name)
                .map_or(0, |p| p.published_in(s.generation));
            let latest = PublishedValue {
                value: value.clone(),
                seq,
                at,
                generation: s.generation,
                count: count + 1,
            };
            s.published.insert(name.clone(), latest);
            one(EventKind::Published { name: name.clone() })
        }
        Change::UpdateReplied { update_id, reply } => {
            // The first reply stands: the workflow writes no second one.
            s.update_replies
                .entry(update_id.clone())
                .or_insert_with(|| reply.clone());
            one(EventKind::UpdateReplied {
                update_id: update_id.clone(),
            })
        }
        _ => misrouted(seq, "run"),
    }
}

/// The run of `s` ends with the hand-over `continued`, record `seq`.
fn hand_over(s: &mut InstanceState, seq: u64, continued: Box<Continued>) -> Applied {
    if continued.run != s.run + 1 || run_of(seq) != s.run {
        return Err(format!(
            "record {seq} hands run {} over to run {}",
            s.run, continued.run
        ));
    }
    let run = continued.run;
    s.handed_over = Some(continued);
    one(EventKind::ContinuedAsNew { run })
}

/// The state the run `continued` hands over to begins with, its first
/// record `seq` written at `at`.
fn begin_run(continued: &Continued, seq: u64, at: u64) -> Result<InstanceState, String> {
    if seq != start(continued.run) {
        return Err(format!(
            "record {seq} begins run {}, which begins at {}",
            continued.run,
            start(continued.run)
        ));
    }
    let mut s = InstanceState::created(&continued.workflow, &continued.input, at);
    s.status = Status::Running;
    s.created_at = continued.created_at;
    s.run = continued.run;
    s.run_began_at = at;
    s.parent.clone_from(&continued.parent);
    s.tags = continued.tags.iter().cloned().collect();
    s.queue = continued.queue.as_ref().map(|q| QueueSpot {
        queue: q.queue.clone(),
        key: q.key.clone(),
        priority: q.priority,
        order: q.order,
        taken: q.taken,
    });
    for (place, (event_type, payload, sent_at)) in continued.pending.iter().enumerate() {
        let place = u32::try_from(place).map_err(|_| "too many pending events".to_owned())?;
        s.pending.insert(
            (seq, place),
            PendingEvent {
                event_type: event_type.clone(),
                payload: payload.clone(),
                sent_at: *sent_at,
            },
        );
    }
    for carried in &continued.event_ids {
        s.event_ids.insert(
            carried.id.clone(),
            SentEvent {
                event_type: carried.event_type.clone(),
                payload: carried.payload.clone(),
                sent_at: carried.sent_at,
            },
        );
    }
    Ok(s)
}

fn end_instance(s: &mut InstanceState, at: u64, end: &End) -> Vec<EventKind> {
    let mut events = Vec::new();
    if let Some(Err(failure)) = &end.rollback {
        events.push(compensation::gave_up(failure));
        if let Some(plan) = &mut s.rollback {
            plan.failure = Some(failure.clone());
        }
    } else if end.rollback.is_some() {
        events.push(EventKind::RollbackCompleted);
    }
    s.status = end.status;
    s.finished_at = Some(at);
    s.output = end.output.clone();
    // The typed error: written just before this record, or before the
    // rollback that this end concludes.
    let value: Option<Payload> = s.failure_value.take().or_else(|| {
        s.rollback
            .as_ref()
            .and_then(|plan| plan.cause.value().cloned())
    });
    s.failure = end.failure.clone().map(|failure| failure.with_value(value));
    events.push(match end.status {
        Status::Complete => EventKind::InstanceCompleted,
        Status::Terminated => EventKind::InstanceTerminated,
        _ => EventKind::InstanceErrored {
            error: end
                .failure
                .as_ref()
                .map(|f| f.message().to_owned())
                .unwrap_or_default(),
        },
    });
    events
}

/// A restart keeps the slots before `from_slot` and re-queues the events
/// that the discarded waits took, in their order.
fn restart(s: &mut InstanceState, seq: u64, at: u64, from_slot: u32) {
    let discarded = s.slots.split_off(&from_slot);
    for (i, slot) in discarded.into_values().enumerate() {
        if let SlotState::Received {
            event_type,
            payload,
        } = slot.state
        {
            let place = u32::try_from(i).unwrap_or(u32::MAX);
            s.pending.insert(
                (seq, place),
                PendingEvent {
                    event_type,
                    payload,
                    sent_at: at,
                },
            );
        }
    }
    s.compensations.clear();
    s.compensation_attempts.clear();
    s.step_failure_values.clear();
    s.paused_with_parent = false;
    // A run from the beginning decides its patches again; one from a step
    // keeps the calls before it, and the patches they were made under.
    if from_slot == 0 {
        s.patches.clear();
    }
    s.generation = s.generation.saturating_add(1);
    s.status = Status::Queued;
    // A new generation waits for a slot of its queue again: the one it
    // held (if any) was given back when it ended, or is given back now.
    if let Some(spot) = &mut s.queue {
        spot.taken = false;
    }
    s.slot_released = false;
    s.finished_at = None;
    s.output = None;
    s.failure = None;
    s.rollback = None;
}
