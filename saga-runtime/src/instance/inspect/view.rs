//! The read model of one instance that `Instance::inspect` answers.

use std::time::SystemTime;

use crate::codec::Payload;
use crate::error::Result;
use crate::error::failure::{Failure, StepError};
use crate::model::status::Status;
use crate::seal::{Codec, CodecError, Sealed};
use crate::workflow::key::IdempotencyKey;

/// Everything about one instance that a person inspecting it may ask,
/// from [`Instance::inspect`](crate::Instance::inspect).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Inspection {
    /// The instance id.
    pub id: String,
    /// The workflow it runs.
    pub workflow: String,
    /// Where it is.
    pub status: Status,
    /// 0, then one more per restart.
    pub generation: u32,
    /// 0, then one more each time it continued as new
    /// (`ctx.continue_as_new`): everything here is of this run. The runs
    /// before it are kept until retention removes them, and read with
    /// [`Instance::history_of_run`](crate::Instance::history_of_run).
    pub run: u32,
    /// When its current run began (when it was started, for run 0).
    pub run_started_at: SystemTime,
    /// When it was started.
    pub created_at: SystemTime,
    /// When its record last changed.
    pub updated_at: SystemTime,
    /// When it finished.
    pub finished_at: Option<SystemTime>,
    /// The workflow's input.
    pub input: PayloadView,
    /// The workflow's output, once it completed.
    pub output: Option<PayloadView>,
    /// Why it failed, when it ended `Errored`.
    pub failure: Option<Failure>,
    /// The workflow's own error as it was stored, when it failed with one
    /// (a `Result<_, E>` of its own, or a step's typed error it
    /// propagated): what [`Failure::downcast`] decodes, for a person to
    /// read without the type.
    pub error_value: Option<PayloadView>,
    /// Why its rollback began (the workflow's error, or "terminated by
    /// user"), when one began.
    pub rollback_cause: Option<Failure>,
    /// The compensation that gave up, when one did.
    pub rollback_failure: Option<Failure>,
    /// Its steps, sleeps and event waits, in call order.
    pub slots: Vec<InspectedSlot>,
    /// The compensations of this generation, in the order they (last)
    /// began: a compensation run again by `retry_rollback` counts from then.
    pub compensations: Vec<InspectedCompensation>,
    /// Events sent to the instance that no wait has taken yet.
    pub pending_events: Vec<PendingEvent>,
    /// Events a wait set aside because their payload does not decode as
    /// the wait's type, oldest first.
    pub rejected_events: Vec<RejectedEvent>,
    /// The latest value of each name the workflow published
    /// (`ctx.publish`) this run, by name.
    pub published: Vec<PublishedValue>,
    /// The event ids it remembers, by id: a second send with one of them
    /// is a duplicate. Every id sent this run, and those its run began
    /// with: the ids sent within the engine's
    /// [`event_dedup_window`](crate::EngineBuilder::event_dedup_window)
    /// before it continued as new.
    pub event_ids: Vec<RememberedEventId>,
}

/// An event id an instance remembers (see [`Inspection::event_ids`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RememberedEventId {
    /// The id.
    pub id: String,
    /// The type of the event sent with it.
    pub event_type: String,
    /// When it was sent (for an id a release before this one handed over,
    /// when it was handed over).
    pub sent_at: SystemTime,
}

/// The latest value of a name the workflow published (`ctx.publish`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PublishedValue {
    /// The name.
    pub name: String,
    /// The value.
    pub value: PayloadView,
    /// Its version, as [`Published::version`](crate::inspect::Published::version).
    pub version: u64,
    /// When it was published.
    pub published_at: SystemTime,
}

/// One durable call of the workflow code.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum InspectedSlot {
    /// `ctx.step` or a `#[step]` function.
    Step(InspectedStep),
    /// `ctx.sleep` / `ctx.sleep_until`.
    Sleep(InspectedSleep),
    /// `ctx.wait_for_event`.
    Wait(InspectedWait),
    /// `ctx.child`: a child workflow.
    Child(InspectedChild),
}

impl InspectedSlot {
    /// The step, sleep or wait name.
    pub fn name(&self) -> &str {
        match self {
            InspectedSlot::Step(s) => &s.name,
            InspectedSlot::Sleep(s) => &s.name,
            InspectedSlot::Wait(w) => &w.name,
            InspectedSlot::Child(c) => &c.name,
        }
    }

    /// When it began, from history.
    pub fn started_at(&self) -> Option<SystemTime> {
        match self {
            InspectedSlot::Step(s) => s.started_at,
            InspectedSlot::Sleep(s) => s.started_at,
            InspectedSlot::Wait(w) => w.started_at,
            InspectedSlot::Child(c) => c.started_at,
        }
    }

    /// When it ended, from history; `None` while it runs.
    pub fn ended_at(&self) -> Option<SystemTime> {
        match self {
            InspectedSlot::Step(s) => s.ended_at,
            InspectedSlot::Sleep(s) => s.ended_at,
            InspectedSlot::Wait(w) => w.ended_at,
            InspectedSlot::Child(c) => c.ended_at,
        }
    }
}

/// One child workflow the instance started.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct InspectedChild {
    /// The call's name.
    pub name: String,
    /// 0 for the first call of this name, 1 for the second, ...
    pub occurrence: u32,
    /// The generation the call was made in (the child's id carries it).
    pub generation: u32,
    /// The child instance's id.
    pub child: String,
    /// The child's workflow.
    pub workflow: String,
    /// Whether the parent's rollback compensates it (`no_rollback` was not
    /// asked for).
    pub has_rollback: bool,
    /// How the child ended, once the parent's call returned; `None` while
    /// it runs.
    pub ended: Option<Status>,
    /// Its output, when it completed.
    pub output: Option<PayloadView>,
    /// Why it failed, when it did.
    pub failure: Option<Failure>,
    /// When the call began, from history.
    pub started_at: Option<SystemTime>,
    /// When it returned, from history.
    pub ended_at: Option<SystemTime>,
}

/// One step call.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct InspectedStep {
    /// The step's name, as stored.
    pub name: String,
    /// 0 for the first call of this name, 1 for the second, ...
    pub occurrence: u32,
    /// The generation the call was made in (its key carries it).
    pub generation: u32,
    /// The idempotency key every attempt got.
    pub key: IdempotencyKey,
    /// Whether a compensation is registered for it.
    pub has_rollback: bool,
    /// Where it is.
    pub state: StepState,
    /// Its inputs, from its start record: the JSON array of a `#[step]`
    /// function's caller-visible inputs (`null` when it takes none).
    /// `None` for a `ctx.step` closure, whose captures are not recorded,
    /// for a step whose inputs could not be recorded (its error says why),
    /// and for steps stored by releases before inputs were recorded.
    pub input: Option<PayloadView>,
    /// Its output, once it completed.
    pub output: Option<PayloadView>,
    /// When its first attempt began.
    pub started_at: Option<SystemTime>,
    /// When it completed, gave up, or was cancelled by a rollback.
    pub ended_at: Option<SystemTime>,
}

/// Where a step is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepState {
    /// In an attempt, or between two.
    Running {
        /// The attempts that failed so far.
        attempts: u32,
        /// When the next attempt may start, between attempts.
        retry_at: Option<SystemTime>,
    },
    /// Its output is stored.
    Completed {
        /// How many attempts it took.
        attempts: u32,
    },
    /// It gave up.
    Failed {
        /// How many attempts ran.
        attempts: u32,
        /// The last error.
        error: StepError,
    },
    /// It was in flight when the workflow failed, and never ran again.
    Cancelled,
}

/// One durable sleep.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InspectedSleep {
    /// Its name.
    pub name: String,
    /// Its occurrence.
    pub occurrence: u32,
    /// The generation it was called in.
    pub generation: u32,
    /// When it ends (or ended).
    pub wake_at: Option<SystemTime>,
    /// Whether it is over.
    pub done: bool,
    /// When it began.
    pub started_at: Option<SystemTime>,
    /// When it ended.
    pub ended_at: Option<SystemTime>,
}

/// One wait for an event.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct InspectedWait {
    /// Its name.
    pub name: String,
    /// Its occurrence.
    pub occurrence: u32,
    /// The generation it was called in.
    pub generation: u32,
    /// The event type it waits for.
    pub event_type: String,
    /// When it times out (or would have).
    pub deadline: Option<SystemTime>,
    /// Where it is.
    pub state: WaitState,
    /// When it began.
    pub started_at: Option<SystemTime>,
    /// When it took an event or timed out.
    pub ended_at: Option<SystemTime>,
}

/// Where an event wait is.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum WaitState {
    /// No event yet.
    Waiting,
    /// It took an event.
    Received {
        /// The event's payload.
        payload: PayloadView,
    },
    /// Its deadline passed first.
    TimedOut,
}

/// One compensation of the current generation.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InspectedCompensation {
    /// The step it compensates.
    pub step: String,
    /// That step's occurrence.
    pub occurrence: u32,
    /// Its idempotency key.
    pub key: IdempotencyKey,
    /// Where it is.
    pub state: CompensationOutcome,
    /// When it began.
    pub started_at: Option<SystemTime>,
    /// When it completed or gave up.
    pub ended_at: Option<SystemTime>,
    /// The child instance it undoes, when it compensates a child workflow
    /// (`key` is then unused: the child's own compensations have theirs).
    pub child: Option<String>,
    /// The attempts it made so far (the last one included once it
    /// completed or gave up).
    pub attempts: u32,
}

/// Where a compensation is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompensationOutcome {
    /// In an attempt, or between two.
    Running {
        /// The attempts that failed so far.
        attempts: u32,
    },
    /// It finished.
    Completed,
    /// It gave up; the compensations after it did not run.
    Failed {
        /// Its last error.
        error: String,
    },
}

/// An event sent to the instance that no wait took yet.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PendingEvent {
    /// Its type.
    pub event_type: String,
    /// Its payload.
    pub payload: PayloadView,
    /// When it was sent.
    pub sent_at: SystemTime,
}

/// An event a wait set aside: its payload does not decode as the type
/// the wait asks for (see `EventWaitCall::fail_on_undecodable`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RejectedEvent {
    /// The wait that set it aside.
    pub wait: String,
    /// Its type.
    pub event_type: String,
    /// Why it does not decode.
    pub error: String,
    /// When it was set aside.
    pub rejected_at: SystemTime,
}

/// A stored user value, shown without the user's types.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum PayloadView {
    /// A JSON payload.
    Json {
        /// The value.
        value: serde_json::Value,
        /// Its encoded size.
        bytes: usize,
    },
    /// A payload that cannot be shown: written by the first release
    /// (bincode, which needs the type to read), or not valid JSON.
    Unavailable {
        /// Its encoded size.
        bytes: usize,
        /// Why it cannot be shown.
        reason: String,
    },
    /// A payload sealed by a codec with a key the reading engine's codec
    /// does not hold (or read by an engine without one): shown as
    /// `<encrypted: key K>`, or opened with [`PayloadView::open`] by a
    /// codec that holds the key (`saga show --key-file`).
    Encrypted {
        /// The key's id and the sealed bytes.
        sealed: Sealed,
    },
}

/// What the inspection shows instead of a step input marked
/// `#[step(redact = [..])]`.
pub const REDACTED: &str = "<redacted>";

impl PayloadView {
    pub(super) fn of(payload: &Payload) -> Self {
        match payload {
            Payload::Json(bytes) => match serde_json::from_slice(bytes) {
                Ok(value) => PayloadView::Json {
                    value,
                    bytes: bytes.len(),
                },
                Err(e) => PayloadView::Unavailable {
                    bytes: bytes.len(),
                    reason: format!("not valid JSON: {e}"),
                },
            },
            Payload::Bincode(bytes) => PayloadView::Unavailable {
                bytes: bytes.len(),
                reason: "written by the first release (bincode); only its own type reads it".into(),
            },
            Payload::Sealed { key, bytes } => PayloadView::Encrypted {
                sealed: Sealed {
                    key: key.clone(),
                    bytes: bytes.clone(),
                },
            },
            Payload::Redacted { json, hidden } => {
                match PayloadView::of(&Payload::Json(json.clone())) {
                    PayloadView::Json { mut value, bytes } => {
                        redact(&mut value, hidden);
                        PayloadView::Json { value, bytes }
                    }
                    // Not an array of inputs: nothing of it is shown.
                    other => PayloadView::Unavailable {
                        bytes: other.bytes(),
                        reason: "redacted inputs that are not valid JSON".into(),
                    },
                }
            }
        }
    }

    /// The value, when it is JSON (with its redacted inputs replaced by
    /// [`REDACTED`]).
    pub fn json(&self) -> Option<&serde_json::Value> {
        match self {
            PayloadView::Json { value, .. } => Some(value),
            PayloadView::Unavailable { .. } | PayloadView::Encrypted { .. } => None,
        }
    }

    /// The encoded size (of an encrypted payload: its sealed size).
    pub fn bytes(&self) -> usize {
        match self {
            PayloadView::Json { bytes, .. } | PayloadView::Unavailable { bytes, .. } => *bytes,
            PayloadView::Encrypted { sealed } => sealed.bytes.len(),
        }
    }

    /// The key id of an encrypted payload.
    pub fn encrypted_with(&self) -> Option<&str> {
        match self {
            PayloadView::Encrypted { sealed } => Some(&sealed.key),
            _ => None,
        }
    }

    /// An encrypted payload opened with `codec`, shown as any other (its
    /// redacted inputs still redacted); any other payload as it is.
    ///
    /// # Errors
    ///
    /// What the codec says: [`CodecError::MissingKey`] when it does not
    /// hold the key either, [`CodecError::Invalid`] for bytes that do not
    /// open.
    pub fn open(&self, codec: &dyn Codec) -> Result<PayloadView, CodecError> {
        let PayloadView::Encrypted { sealed } = self else {
            return Ok(self.clone());
        };
        let plain = codec.decode(sealed)?;
        match crate::codec::decode_payload(&plain) {
            Ok(Payload::Sealed { .. }) | Err(_) => Err(CodecError::Invalid(format!(
                "the value sealed with key {:?} opens to bytes that are no payload",
                sealed.key
            ))),
            Ok(payload) => Ok(PayloadView::of(&payload)),
        }
    }
}

impl Inspection {
    /// Opens every payload sealed with a key that `codec` holds (a reader's
    /// key file, where the engine that read the store holds none); the
    /// others stay [`PayloadView::Encrypted`].
    pub fn open_with(&mut self, codec: &dyn Codec) {
        let open = |view: &mut PayloadView| {
            if let Ok(opened) = view.open(codec) {
                *view = opened;
            }
        };
        open(&mut self.input);
        self.output.iter_mut().for_each(open);
        for slot in &mut self.slots {
            match slot {
                InspectedSlot::Step(step) => {
                    step.input.iter_mut().for_each(open);
                    step.output.iter_mut().for_each(open);
                }
                InspectedSlot::Wait(InspectedWait {
                    state: WaitState::Received { payload },
                    ..
                }) => open(payload),
                InspectedSlot::Child(child) => child.output.iter_mut().for_each(open),
                InspectedSlot::Wait(_) | InspectedSlot::Sleep(_) => {}
            }
        }
        for event in &mut self.pending_events {
            open(&mut event.payload);
        }
        for published in &mut self.published {
            open(&mut published.value);
        }
    }
}

/// Replaces the inputs at `hidden` of a step's inputs (the array of them)
/// by [`REDACTED`]; a lone input is the array's only element.
pub(crate) fn redact(inputs: &mut serde_json::Value, hidden: &[u32]) {
    match inputs {
        serde_json::Value::Array(elements) => {
            for &position in hidden {
                if let Some(element) = elements.get_mut(position as usize) {
                    *element = serde_json::Value::String(REDACTED.to_owned());
                }
            }
        }
        // Not the array `Payload::tuple` writes: hide all of it.
        other => *other = serde_json::Value::String(REDACTED.to_owned()),
    }
}
