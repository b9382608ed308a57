//! An instance's state, folded from its journal: status, slots,
//! compensations and pending events. The fold is the only code that gives
//! a journal record its meaning, and [`public_events`] the only code that
//! turns records into the history users see.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::change::{Change, End, Entry, EventId};
use crate::codec::Payload;
use crate::error::failure::{Failure, FailureKind, StepError};
use crate::model::history::EventKind;
use crate::model::status::Status;
use crate::time::clock::from_millis;

/// Everything durable about one instance.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct InstanceState {
    pub(crate) workflow: String,
    pub(crate) input: Payload,
    pub(crate) status: Status,
    pub(crate) created_at: u64,
    pub(crate) updated_at: u64,
    pub(crate) finished_at: Option<u64>,
    pub(crate) output: Option<Payload>,
    pub(crate) failure: Option<Failure>,
    pub(crate) rollback: Option<RollbackPlan>,
    /// Boxed: a map's node holds room for eleven values, and most
    /// instances take a few slots (an idle state stays cached).
    pub(crate) slots: BTreeMap<u32, Box<SlotRecord>>,
    pub(crate) compensations: BTreeMap<u32, CompensationState>,
    pub(crate) pending: BTreeMap<EventId, PendingEvent>,
    /// 0, then one more per restart: a new generation's steps get new
    /// idempotency keys.
    pub(crate) generation: u32,
    /// How many public history events the journal holds so far.
    pub(crate) events: u64,
    /// The typed error of a `FailureValue` record, until the record that
    /// carries its failure (`RollbackStarted`, `Ended`) takes it. Never
    /// encoded: an `Imported` record holds a state, and it has no such
    /// value.
    #[serde(skip)]
    pub(crate) failure_value: Option<Payload>,
    /// The typed errors of `StepFailureValue` records, by slot, until the
    /// `StepFailed` of that slot takes its own. Never encoded, as
    /// `failure_value`.
    #[serde(skip)]
    pub(crate) step_failure_values: BTreeMap<u32, Payload>,
    /// The events sent with an id, by id, for the whole life of the
    /// instance (restarts included). Never encoded, as `failure_value`.
    #[serde(skip)]
    pub(crate) event_ids: BTreeMap<String, SentEvent>,
    /// Its tags, by key (`Described` records). Never encoded, as
    /// `failure_value`.
    #[serde(skip)]
    pub(crate) tags: BTreeMap<String, String>,
    /// The instance that started it. Never encoded.
    #[serde(skip)]
    pub(crate) parent: Option<String>,
    /// Whether a compensation of it ever failed (a retried rollback does
    /// not take that back). Never encoded.
    #[serde(skip)]
    pub(crate) failed_compensation: bool,
    /// Paused because its parent was (`PausedWithParent`): the parent's
    /// resume resumes it. Never encoded.
    #[serde(skip)]
    pub(crate) paused_with_parent: bool,
    /// How many attempts each compensation made, by its step's slot
    /// (`inspect` reports them). Never encoded.
    #[serde(skip)]
    pub(crate) compensation_attempts: BTreeMap<u32, u32>,
    /// Its place in a queue (`start_on`). Never encoded.
    #[serde(skip)]
    pub(crate) queue: Option<super::queued::QueueSpot>,
    /// The events its waits set aside, oldest first (`inspect` shows
    /// them). Never encoded.
    #[serde(skip)]
    pub(crate) rejected: Vec<Rejected>,
    /// The patches `ctx.patched` answered true for, this generation.
    /// Never encoded.
    #[serde(skip)]
    pub(crate) patches: std::collections::BTreeSet<String>,
    /// When it took a slot of its queue (each `Dequeued`: more than one
    /// after restarts), for the queue's rate. Never encoded.
    #[serde(skip)]
    pub(crate) took_slot_at: Vec<u64>,
    /// It gave its queue's slot back while it waits (`SlotReleased`), and
    /// has not asked for one again since. Never encoded.
    #[serde(skip)]
    pub(crate) slot_released: bool,
    /// Its run: 0, then one more each time it continued as new (`runs`).
    /// Never encoded.
    #[serde(skip)]
    pub(crate) run: u32,
    /// When its run began (its creation, for run 0). Never encoded.
    #[serde(skip)]
    pub(crate) run_began_at: u64,
    /// The hand-over its run ended with (`ContinuedAsNew`): the next run
    /// begins from it, and nothing more is written to this run. Never
    /// encoded.
    #[serde(skip)]
    pub(crate) handed_over: Option<Box<super::runs::Continued>>,
    /// The latest value of each name the workflow published
    /// (`ctx.publish`), this run. Never encoded.
    #[serde(skip)]
    pub(crate) published: BTreeMap<String, PublishedValue>,
}

/// The latest value of a published name, and how many times this
/// generation published the name (a replay that publishes it again as
/// often writes nothing).
#[derive(Clone, Debug)]
pub(crate) struct PublishedValue {
    pub(crate) value: Payload,
    /// The seq of its record: higher for each newer value, across runs.
    pub(crate) seq: u64,
    pub(crate) at: u64,
    /// The generation that published it, and how often it published the
    /// name.
    pub(crate) generation: u32,
    pub(crate) count: u32,
}

impl PublishedValue {
    /// How many times generation `generation` published the name.
    pub(crate) fn published_in(&self, generation: u32) -> u32 {
        if self.generation == generation {
            self.count
        } else {
            0
        }
    }
}

/// An event a wait set aside: its payload does not decode as the wait's
/// type (`Change::EventRejected`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rejected {
    pub(crate) at: u64,
    pub(crate) wait: String,
    pub(crate) event_type: String,
    pub(crate) error: String,
}

impl InstanceState {
    /// The state of an instance just created, before its first run.
    pub(super) fn created(workflow: &str, input: &Payload, at: u64) -> InstanceState {
        InstanceState {
            workflow: workflow.to_owned(),
            input: input.clone(),
            status: Status::Queued,
            created_at: at,
            updated_at: at,
            finished_at: None,
            output: None,
            failure: None,
            rollback: None,
            slots: BTreeMap::new(),
            compensations: BTreeMap::new(),
            pending: BTreeMap::new(),
            generation: 0,
            events: 1,
            failure_value: None,
            step_failure_values: BTreeMap::new(),
            event_ids: BTreeMap::new(),
            tags: BTreeMap::new(),
            parent: None,
            failed_compensation: false,
            paused_with_parent: false,
            compensation_attempts: BTreeMap::new(),
            queue: None,
            rejected: Vec::new(),
            patches: std::collections::BTreeSet::new(),
            took_slot_at: Vec::new(),
            slot_released: false,
            run: 0,
            run_began_at: at,
            handed_over: None,
            published: BTreeMap::new(),
        }
    }

    /// Whether it waits in a queue for a slot (no driver runs it).
    pub(crate) fn waits_in_queue(&self) -> bool {
        !self.slot_released && self.queue.as_ref().is_some_and(|q| q.waits(self.status))
    }

    /// Whether a rollback would have anything to compensate: a step or a
    /// child it started that has a compensation.
    pub(crate) fn has_anything_to_undo(&self) -> bool {
        self.slots
            .values()
            .any(|slot| slot.has_rollback && matches!(slot.kind, SlotKind::Step | SlotKind::Child))
    }
}

/// An event sent with an id: what a second send with the id must match.
#[derive(Clone, Debug)]
pub(crate) struct SentEvent {
    pub(crate) event_type: String,
    pub(crate) payload: Payload,
}

/// Set when compensation begins, so recovery knows why and how the
/// instance ends.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RollbackPlan {
    /// The error that failed the workflow (or "terminated by user").
    pub(crate) cause: Failure,
    /// `Errored` or `Terminated`.
    pub(crate) then: Status,
    /// A compensation that gave up.
    pub(crate) failure: Option<Failure>,
    /// Begun while the instance was `Blocked`: its code no longer replays
    /// by position, so compensations are rebuilt by step name.
    pub(crate) by_name: bool,
}

/// The kind of a slot: every durable call of workflow code takes the next
/// slot, and replay checks that it asks for the same kind and name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) enum SlotKind {
    Step,
    Sleep,
    Event,
    Now,
    Random,
    /// A child workflow (`ctx.child`).
    Child,
}

impl SlotKind {
    pub(crate) fn describe(self, name: &str) -> String {
        match self {
            SlotKind::Step => format!("step {name:?}"),
            SlotKind::Sleep => format!("sleep {name:?}"),
            SlotKind::Event => format!("event wait {name:?}"),
            SlotKind::Now => "ctx.now()".into(),
            SlotKind::Random => "ctx.random()".into(),
            SlotKind::Child => format!("child {name:?}"),
        }
    }

    /// The name a `now()`/`random()` slot is stored under.
    pub(crate) fn value_name(self) -> &'static str {
        match self {
            SlotKind::Now => "now",
            SlotKind::Random => "random",
            SlotKind::Step => "step",
            SlotKind::Sleep => "sleep",
            SlotKind::Event => "event",
            SlotKind::Child => "child",
        }
    }
}

/// What happened at one slot.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct SlotRecord {
    pub(crate) kind: SlotKind,
    pub(crate) name: String,
    pub(crate) occurrence: u32,
    pub(crate) has_rollback: bool,
    /// The generation the slot was taken in (its keys carry it).
    pub(crate) generation: u32,
    pub(crate) input: Option<Payload>,
    pub(crate) state: SlotState,
    /// The record that began it, and the one that ended it (`None` while
    /// it runs, or when rollback stopped it): what a concurrent rollback
    /// orders compensations by. Never encoded (an `Imported` state has
    /// none: 0 and `None`).
    #[serde(skip)]
    pub(crate) began: u64,
    #[serde(skip)]
    pub(crate) ended: Option<u64>,
    /// When it began (engine clock, milliseconds): step latency for the
    /// metrics. Never encoded.
    #[serde(skip)]
    pub(crate) began_at: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum SlotState {
    /// A step between attempts or in one; `retry_at` is when the next
    /// attempt may start.
    Running {
        attempts: u32,
        retry_at: Option<u64>,
    },
    Completed {
        output: Payload,
        attempts: u32,
    },
    Failed {
        error: Box<StepError>,
        attempts: u32,
    },
    /// In flight when the workflow failed: stopped, never to run again.
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
        payload: Payload,
    },
    TimedOut {
        event_type: String,
    },
    Value {
        value: u64,
    },
    /// A child workflow started (or about to be) and not yet ended.
    ChildRunning {
        child: String,
        workflow: String,
    },
    /// A child workflow ended: what the parent's call returns.
    ChildEnded {
        child: String,
        status: Status,
        output: Option<Payload>,
        /// With its typed error as its value, when it has one. Boxed, as
        /// `Failed`'s error: the largest variants, and the rarest.
        failure: Option<Box<Failure>>,
    },
}

/// The progress of one compensation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum CompensationState {
    Running {
        attempts: u32,
        retry_at: Option<u64>,
    },
    Completed,
    Failed {
        error: String,
    },
}

/// An event sent to an instance and not yet taken by a wait.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PendingEvent {
    pub(crate) event_type: String,
    pub(crate) payload: Payload,
    pub(crate) sent_at: u64,
}

impl InstanceState {
    /// Whether the workflow code runs (so waits may mark it waiting).
    fn is_active(&self) -> bool {
        matches!(
            self.status,
            Status::Queued | Status::Running | Status::Waiting
        )
    }

    fn set_waiting(&mut self, waiting: bool) {
        if self.is_active() {
            self.status = if waiting {
                Status::Waiting
            } else {
                Status::Running
            };
        }
    }

    /// Takes slot `index` for `record` (boxed: see `slots`).
    fn take_slot(&mut self, index: u32, record: SlotRecord) {
        self.slots.insert(index, Box::new(record));
    }

    fn slot(&mut self, index: u32) -> Result<&mut SlotRecord, String> {
        self.slots
            .get_mut(&index)
            .map(|slot| &mut **slot)
            .ok_or_else(|| format!("a record names slot {index}, which was never taken"))
    }

    /// Sets the compensation state of the step in slot `index`; returns
    /// the step's name and occurrence.
    fn compensation(
        &mut self,
        index: u32,
        state: CompensationState,
    ) -> Result<(String, u32), String> {
        let step = self.slot(index)?;
        let named = (step.name.clone(), step.occurrence);
        self.compensations.insert(index, state);
        Ok(named)
    }

    /// A step before slot `below` whose compensation started (its effect
    /// may be undone).
    pub(crate) fn compensated_before(&self, below: u32) -> Option<&SlotRecord> {
        self.compensations
            .iter()
            .filter(|(slot, _)| **slot < below)
            .find_map(|(slot, _)| self.slots.get(slot).map(|slot| &**slot))
    }
}

/// Applies `entry` to the state (`None` before the instance's first
/// record); returns the public events it stands for. An `Err` means the
/// journal is inconsistent (a corrupt store).
pub(crate) fn apply(
    state: &mut Option<InstanceState>,
    seq: u64,
    entry: &Entry,
) -> Result<Vec<EventKind>, String> {
    let at = entry.at;
    let change = &entry.change;
    let Some(s) = state else {
        return match change {
            Change::Created { workflow, input } => {
                *state = Some(InstanceState::created(workflow, input, at));
                Ok(vec![EventKind::InstanceCreated {
                    workflow: workflow.clone(),
                }])
            }
            Change::CreatedOnQueue {
                workflow,
                input,
                queue,
                key,
                priority,
                order,
            } => {
                let mut created = InstanceState::created(workflow, input, at);
                created.queue = Some(super::queued::QueueSpot {
                    queue: queue.clone(),
                    key: key.clone(),
                    priority: *priority,
                    order: *order,
                    taken: false,
                });
                *state = Some(created);
                Ok(vec![EventKind::InstanceCreated {
                    workflow: workflow.clone(),
                }])
            }
            Change::Imported(imported) => {
                let mut imported_state = imported.state.clone();
                imported_state.events = imported.history.len() as u64;
                imported_state.run_began_at = imported_state.created_at;
                *state = Some(imported_state);
                Ok(imported.history.iter().map(|(_, k)| k.clone()).collect())
            }
            // The first record of a run after the first.
            Change::ContinuedAsNew(continued) => {
                *state = Some(continued.begin(seq, at)?);
                Ok(vec![EventKind::ContinuedAsNew { run: continued.run }])
            }
            _ => Err(format!(
                "record {seq} comes before the instance was created"
            )),
        };
    };
    apply_to_state(s, seq, entry)
}

/// Applies `entry` to the state of an existing instance.
pub(crate) fn apply_to_state(
    s: &mut InstanceState,
    seq: u64,
    entry: &Entry,
) -> Result<Vec<EventKind>, String> {
    let events = apply_to(s, seq, entry.at, &entry.change)?;
    s.updated_at = entry.at;
    s.events += events.len() as u64;
    Ok(events)
}

fn apply_to(
    s: &mut InstanceState,
    seq: u64,
    at: u64,
    change: &Change,
) -> Result<Vec<EventKind>, String> {
    if s.handed_over.is_some() {
        return Err(format!(
            "record {seq} follows the hand-over that ended run {}",
            s.run
        ));
    }
    let event = match change {
        Change::Created { .. } | Change::Imported(_) | Change::CreatedOnQueue { .. } => {
            return Err(format!("record {seq} creates an instance that exists"));
        }
        // The hand-over: the run ends here, `Running`, and the next one
        // begins from it.
        Change::ContinuedAsNew(continued) => {
            if continued.run != s.run + 1 || super::runs::run_of(seq) != s.run {
                return Err(format!(
                    "record {seq} hands run {} over to run {}",
                    s.run, continued.run
                ));
            }
            s.handed_over = Some(continued.clone());
            EventKind::ContinuedAsNew { run: continued.run }
        }
        Change::Dequeued => {
            let Some(spot) = &mut s.queue else {
                return Err(format!("record {seq} takes a slot of no queue"));
            };
            spot.taken = true;
            s.took_slot_at.push(at);
            s.slot_released = false;
            let queue = spot.queue.clone();
            return Ok(vec![EventKind::Dequeued { queue }]);
        }
        Change::SlotReleased => {
            let Some(spot) = &mut s.queue else {
                return Err(format!("record {seq} gives back a slot of no queue"));
            };
            spot.taken = false;
            s.slot_released = true;
            let queue = spot.queue.clone();
            return Ok(vec![EventKind::SlotReleased { queue }]);
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
            return Ok(vec![EventKind::Requeued { queue }]);
        }
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
            EventKind::InstanceResumed
        }
        Change::StepStarted {
            slot,
            name,
            occurrence,
            has_rollback,
            input,
        } => {
            s.take_slot(
                *slot,
                SlotRecord {
                    kind: SlotKind::Step,
                    name: name.clone(),
                    occurrence: *occurrence,
                    has_rollback: *has_rollback,
                    generation: s.generation,
                    input: input.clone(),
                    state: SlotState::Running {
                        attempts: 0,
                        retry_at: None,
                    },
                    began: seq,
                    began_at: at,
                    ended: None,
                },
            );
            EventKind::StepStarted {
                step: name.clone(),
                occurrence: *occurrence,
            }
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
            EventKind::StepRetrying {
                step: record.name.clone(),
                occurrence: record.occurrence,
                attempt: *attempt,
                error: error.to_string(),
                delay: *delay,
            }
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
            EventKind::StepCompleted {
                step: record.name.clone(),
                occurrence: record.occurrence,
                attempts: *attempts,
            }
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
            EventKind::StepFailed {
                step: record.name.clone(),
                occurrence: record.occurrence,
                attempts: *attempts,
                error: error.to_string(),
            }
        }
        Change::SleepStarted {
            slot,
            name,
            occurrence,
            wake_at,
        } => {
            s.take_slot(
                *slot,
                SlotRecord {
                    kind: SlotKind::Sleep,
                    name: name.clone(),
                    occurrence: *occurrence,
                    has_rollback: false,
                    generation: s.generation,
                    input: None,
                    state: SlotState::Sleeping { wake_at: *wake_at },
                    began: seq,
                    began_at: at,
                    ended: None,
                },
            );
            s.set_waiting(true);
            EventKind::SleepStarted {
                name: name.clone(),
                wake_at: from_millis(*wake_at),
            }
        }
        Change::SleepCompleted { slot } => {
            let record = s.slot(*slot)?;
            record.state = SlotState::Slept;
            record.ended = Some(seq);
            let name = record.name.clone();
            s.set_waiting(false);
            EventKind::SleepCompleted { name }
        }
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
            s.take_slot(
                *slot,
                SlotRecord {
                    kind: SlotKind::Event,
                    name: name.clone(),
                    occurrence: *occurrence,
                    has_rollback: matches!(change, Change::WaitStartedWithRollback { .. }),
                    generation: s.generation,
                    input: None,
                    state: SlotState::Waiting {
                        event_type: event_type.clone(),
                        deadline: *deadline,
                    },
                    began: seq,
                    began_at: at,
                    ended: None,
                },
            );
            s.set_waiting(true);
            EventKind::EventWaitStarted {
                name: name.clone(),
                event_type: event_type.clone(),
                deadline: from_millis(*deadline),
            }
        }
        Change::EventReceived {
            event_type,
            payload,
        } => receive_event(s, seq, at, event_type, payload),
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
                },
            );
            receive_event(s, seq, at, event_type, payload)
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
            EventKind::EventDelivered {
                name,
                event_type: pending.event_type,
            }
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
            EventKind::EventRejected {
                name,
                event_type: pending.event_type,
                error: error.clone(),
            }
        }
        Change::Patched { name } => {
            s.patches.insert(name.clone());
            EventKind::Patched { name: name.clone() }
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
            EventKind::Published { name: name.clone() }
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
            EventKind::EventWaitTimedOut { name, event_type }
        }
        Change::ValueRecorded { slot, kind, value } => {
            s.take_slot(
                *slot,
                SlotRecord {
                    kind: *kind,
                    name: kind.value_name().to_owned(),
                    occurrence: 0,
                    has_rollback: false,
                    generation: s.generation,
                    input: None,
                    state: SlotState::Value { value: *value },
                    began: seq,
                    began_at: at,
                    ended: Some(seq),
                },
            );
            return Ok(Vec::new());
        }
        Change::Paused => {
            s.status = Status::Paused;
            s.paused_with_parent = false;
            EventKind::Paused
        }
        Change::PausedWithParent => {
            s.status = Status::Paused;
            s.paused_with_parent = true;
            EventKind::Paused
        }
        Change::Unpaused => {
            s.paused_with_parent = false;
            s.status = Status::Running;
            // Paused while it waited in its queue: it waits again.
            if s.queue.as_ref().is_some_and(|q| !q.taken) {
                s.status = Status::Queued;
                return Ok(vec![EventKind::Resumed]);
            }
            // Paused in a sleep or a wait, it is back in it: replay records
            // no new start for it, so its status says so here.
            let in_a_wait = s.slots.values().any(|r| {
                matches!(
                    r.state,
                    SlotState::Sleeping { .. } | SlotState::Waiting { .. }
                )
            });
            s.set_waiting(in_a_wait);
            EventKind::Resumed
        }
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
            EventKind::RollbackStarted {
                cause: cause.message().to_owned(),
            }
        }
        Change::CompensationStarted { slot } => {
            let running = CompensationState::Running {
                attempts: 0,
                retry_at: None,
            };
            let (step, occurrence) = s.compensation(*slot, running)?;
            s.compensation_attempts.insert(*slot, 0);
            EventKind::RollbackStepStarted { step, occurrence }
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
            return Ok(Vec::new());
        }
        Change::CompensationCompleted { slot } => {
            let (step, occurrence) = s.compensation(*slot, CompensationState::Completed)?;
            *s.compensation_attempts.entry(*slot).or_default() += 1;
            EventKind::RollbackStepCompleted { step, occurrence }
        }
        Change::CompensationFailed { slot, error } => {
            s.failed_compensation = true;
            let failed = CompensationState::Failed {
                error: error.clone(),
            };
            let (step, occurrence) = s.compensation(*slot, failed)?;
            *s.compensation_attempts.entry(*slot).or_default() += 1;
            EventKind::RollbackStepFailed {
                step,
                occurrence,
                error: error.clone(),
            }
        }
        Change::Ended(end) => return Ok(end_instance(s, at, end)),
        Change::Blocked { failure } => {
            s.status = Status::Blocked;
            s.failure = Some(failure.clone());
            EventKind::InstanceBlocked {
                error: failure.message().to_owned(),
            }
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
            EventKind::RollbackRetried
        }
        Change::FailureValue { value } => {
            s.failure_value = Some(value.clone());
            return Ok(Vec::new());
        }
        Change::StepFailureValue { slot, value } => {
            s.slot(*slot)?;
            s.step_failure_values.insert(*slot, value.clone());
            return Ok(Vec::new());
        }
        Change::Described { parent, tags } => {
            if s.parent.is_none() {
                s.parent.clone_from(parent);
            }
            s.tags.extend(tags.iter().cloned());
            return Ok(Vec::new());
        }
        Change::ChildStarted {
            slot,
            name,
            occurrence,
            workflow,
            child,
            rollback,
        } => {
            s.take_slot(
                *slot,
                SlotRecord {
                    kind: SlotKind::Child,
                    name: name.clone(),
                    occurrence: *occurrence,
                    has_rollback: *rollback,
                    generation: s.generation,
                    input: None,
                    state: SlotState::ChildRunning {
                        child: child.clone(),
                        workflow: workflow.clone(),
                    },
                    began: seq,
                    began_at: at,
                    ended: None,
                },
            );
            s.set_waiting(true);
            EventKind::ChildStarted {
                name: name.clone(),
                occurrence: *occurrence,
                child: child.clone(),
                workflow: workflow.clone(),
            }
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
            EventKind::ChildEnded {
                name,
                child,
                status: *status,
            }
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
            EventKind::RollbackStarted {
                cause: cause.message().to_owned(),
            }
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
                    EventKind::RollbackFailed {
                        step: match failure.kind() {
                            FailureKind::Rollback { step } => step.clone(),
                            _ => String::new(),
                        },
                        error: failure.message().to_owned(),
                    }
                }
            };
            return Ok(vec![event, EventKind::InstanceCompensated]);
        }
        Change::Restarted {
            from_slot,
            from_step,
        } => {
            restart(s, seq, at, *from_slot);
            EventKind::InstanceRestarted {
                from_step: from_step.clone(),
            }
        }
    };
    Ok(vec![event])
}

/// An event arrived: pending until a wait for its type takes it.
fn receive_event(
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

fn end_instance(s: &mut InstanceState, at: u64, end: &End) -> Vec<EventKind> {
    let mut events = Vec::new();
    match &end.rollback {
        Some(Ok(())) => events.push(EventKind::RollbackCompleted),
        Some(Err(failure)) => events.push(EventKind::RollbackFailed {
            step: match failure.kind() {
                FailureKind::Rollback { step } => step.clone(),
                _ => String::new(),
            },
            error: failure.message().to_owned(),
        }),
        None => {}
    }
    if let (Some(plan), Some(Err(failure))) = (&mut s.rollback, &end.rollback) {
        plan.failure = Some(failure.clone());
    }
    s.status = end.status;
    s.finished_at = Some(at);
    s.output = end.output.clone();
    // The typed error: written just before this record, or before the
    // rollback that this end concludes.
    let value = s.failure_value.take().or_else(|| {
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
