//! An instance's state, folded from its journal: status, slots,
//! compensations and pending events. The fold (`machine`) is the only code
//! that gives a journal record its meaning, and turns records into the
//! history users see.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::handover::Continued;
use super::queued::QueueSpot;
use crate::codec::Payload;
use crate::error::failure::{Failure, StepError};
use crate::model::status::Status;

/// A pending event's place: the record that brought it, and its place
/// among the events that record brought.
pub(crate) type EventId = (u64, u32);

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
    /// The events sent with an id, by id: every one sent in this run
    /// (restarts included), and those the hand-over that began it carried
    /// (sent within the deduplication window, see `runs`). Never encoded,
    /// as `failure_value`.
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
    pub(crate) queue: Option<QueueSpot>,
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
    pub(crate) handed_over: Option<Box<Continued>>,
    /// The latest value of each name the workflow published
    /// (`ctx.publish`), this run. Never encoded.
    #[serde(skip)]
    pub(crate) published: BTreeMap<String, PublishedValue>,
    /// The reply to each update the workflow answered (`Update::reply`),
    /// by update id, this run. Never encoded.
    #[serde(skip)]
    pub(crate) update_replies: BTreeMap<String, Payload>,
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
            update_replies: BTreeMap::new(),
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
    /// When it was sent (milliseconds, the engine's clock): a hand-over
    /// carries it to the next run only within the deduplication window.
    pub(crate) sent_at: u64,
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

impl SlotRecord {
    /// A slot of `kind` that record `seq`, written at `at`, takes in the
    /// current generation of `s`, in `state`; without a rollback or an
    /// input until the caller says otherwise.
    pub(super) fn begun(
        s: &InstanceState,
        kind: SlotKind,
        name: &str,
        occurrence: u32,
        state: SlotState,
        seq: u64,
        at: u64,
    ) -> SlotRecord {
        SlotRecord {
            kind,
            name: name.to_owned(),
            occurrence,
            has_rollback: false,
            generation: s.generation,
            input: None,
            state,
            began: seq,
            began_at: at,
            ended: None,
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
    pub(super) fn is_active(&self) -> bool {
        matches!(
            self.status,
            Status::Queued | Status::Running | Status::Waiting
        )
    }

    pub(super) fn set_waiting(&mut self, waiting: bool) {
        if self.is_active() {
            self.status = if waiting {
                Status::Waiting
            } else {
                Status::Running
            };
        }
    }

    /// Takes slot `index` for `record` (boxed: see `slots`).
    pub(super) fn take_slot(&mut self, index: u32, record: SlotRecord) {
        self.slots.insert(index, Box::new(record));
    }

    pub(super) fn slot(&mut self, index: u32) -> Result<&mut SlotRecord, String> {
        self.slots
            .get_mut(&index)
            .map(|slot| &mut **slot)
            .ok_or_else(|| format!("a record names slot {index}, which was never taken"))
    }

    /// Sets the compensation state of the step in slot `index`; returns
    /// the step's name and occurrence.
    pub(super) fn compensation(
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
