//! A read model of one instance, for tools that show it to people (the
//! `saga` command): its steps, sleeps and waits in call order, its
//! compensations in the order they ran, its payloads as JSON, with the
//! times from its history.
//!
//! The state says what each slot holds now; the history says when things
//! happened. A slot is matched to its history events by kind, name and
//! occurrence within the lineage that led to the current generation
//! (a restart discards the events of the slots it discarded).

use std::collections::HashMap;
use std::time::SystemTime;

use crate::codec::Payload;
use crate::error::Result;
use crate::error::failure::{Failure, StepError};
use crate::instance::Instance;
use crate::journal::{CompensationState, InstanceState, SlotKind, SlotRecord, SlotState};
use crate::model::history::{Event, EventKind};
use crate::model::status::Status;
use crate::seal::{Codec, CodecError, Sealed};
use crate::time::clock::from_millis;
use crate::workflow::key::IdempotencyKey;

/// Everything about one instance that a person inspecting it may ask,
/// from [`Instance::inspect`].
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
}

/// The latest value of a name the workflow published (`ctx.publish`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PublishedValue {
    /// The name.
    pub name: String,
    /// The value.
    pub value: PayloadView,
    /// Its version, as [`Published::version`](crate::Published::version).
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
    fn of(payload: &Payload) -> Self {
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

impl Instance {
    /// Everything about the instance for a person to inspect: its steps,
    /// sleeps and waits with their states, keys, payloads and times, its
    /// compensations in the order they ran, and both errors.
    ///
    /// # Examples
    ///
    /// ```
    /// use saga_runtime::prelude::*;
    /// use saga_runtime::inspect::{InspectedSlot, StepState};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), saga_runtime::Error> {
    /// let double = workflow_fn("double", |ctx: WorkflowContext, n: u64| async move {
    ///     let n = ctx
    ///         .step("double", StepConfig::default(), move |_key| async move { Ok(n * 2) })
    ///         .await?;
    ///     Ok::<_, WorkflowError>(n)
    /// });
    /// let engine = Engine::temporary()?;
    /// let run = engine.start(double, "d-1", 21).await?;
    /// run.result().await?;
    /// let inspection = run.inspect().await?;
    /// let InspectedSlot::Step(step) = &inspection.slots[0] else { panic!() };
    /// assert_eq!(step.key.as_str(), "d-1:double");
    /// assert_eq!(step.state, StepState::Completed { attempts: 1 });
    /// assert_eq!(step.output.as_ref().and_then(|o| o.json()), Some(&42.into()));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// a read; dropping the future changes nothing.
    pub async fn inspect(&self) -> Result<Inspection> {
        // History first: a change in between shows as a slot without its
        // latest time, never as a time without its slot.
        let history = self.history().await?;
        let times = Times::from_history(&history);
        self.journal()
            .read(self.id(), |state| inspection(self.id(), state, &times))
            .await
    }
}

fn inspection(id: &str, state: &InstanceState, times: &Times) -> Inspection {
    let slots = state
        .slots
        .values()
        .filter_map(|slot| inspected_slot(id, slot, times, state.run))
        .collect();
    let mut compensations: Vec<(Option<usize>, InspectedCompensation)> = state
        .compensations
        .iter()
        .filter_map(|(index, compensation)| {
            let step = state.slots.get(index)?;
            let timed = times
                .compensations
                .iter()
                .rposition(|c| c.name == step.name && c.occurrence == step.occurrence);
            let timing = timed.map(|i| &times.compensations[i]);
            Some((
                timed,
                InspectedCompensation {
                    step: step.name.clone(),
                    occurrence: step.occurrence,
                    key: IdempotencyKey::rollback(
                        id,
                        &step.name,
                        step.occurrence,
                        step.generation,
                        state.run,
                    ),
                    state: match compensation {
                        CompensationState::Running { attempts, .. } => {
                            CompensationOutcome::Running {
                                attempts: *attempts,
                            }
                        }
                        CompensationState::Completed => CompensationOutcome::Completed,
                        CompensationState::Failed { error } => CompensationOutcome::Failed {
                            error: error.clone(),
                        },
                    },
                    started_at: timing.map(|t| t.started),
                    ended_at: timing.and_then(|t| t.ended),
                    attempts: state.compensation_attempts.get(index).copied().unwrap_or(0),
                    child: match &step.state {
                        SlotState::ChildRunning { child, .. }
                        | SlotState::ChildEnded { child, .. } => Some(child.clone()),
                        _ => None,
                    },
                },
            ))
        })
        .collect();
    // The order they began in; reverse start order when history lacks one.
    compensations.sort_by_key(|(timed, _)| timed.unwrap_or(usize::MAX));
    let rollback = state.rollback.as_ref();
    Inspection {
        id: id.to_owned(),
        workflow: state.workflow.clone(),
        status: state.status,
        generation: state.generation,
        run: state.run,
        run_started_at: from_millis(state.run_began_at),
        created_at: from_millis(state.created_at),
        updated_at: from_millis(state.updated_at),
        finished_at: state.finished_at.map(from_millis),
        input: PayloadView::of(&state.input),
        output: state.output.as_ref().map(PayloadView::of),
        failure: state.failure.clone(),
        error_value: state
            .failure
            .as_ref()
            .and_then(Failure::value)
            .map(PayloadView::of),
        rollback_cause: rollback.map(|plan| plan.cause.clone()),
        rollback_failure: rollback.and_then(|plan| plan.failure.clone()),
        slots,
        compensations: compensations.into_iter().map(|(_, c)| c).collect(),
        pending_events: state
            .pending
            .values()
            .map(|event| PendingEvent {
                event_type: event.event_type.clone(),
                payload: PayloadView::of(&event.payload),
                sent_at: from_millis(event.sent_at),
            })
            .collect(),
        rejected_events: state
            .rejected
            .iter()
            .map(|r| RejectedEvent {
                wait: r.wait.clone(),
                event_type: r.event_type.clone(),
                error: r.error.clone(),
                rejected_at: from_millis(r.at),
            })
            .collect(),
        published: state
            .published
            .iter()
            .map(|(name, p)| PublishedValue {
                name: name.clone(),
                value: PayloadView::of(&p.value),
                version: p.seq,
                published_at: from_millis(p.at),
            })
            .collect(),
    }
}

/// The inspected form of a slot; `None` for `ctx.now()`/`ctx.random()`.
fn inspected_slot(id: &str, slot: &SlotRecord, times: &Times, run: u32) -> Option<InspectedSlot> {
    let timing = times.slot(slot.kind, &slot.name, slot.occurrence);
    let started_at = timing.map(|t| t.started);
    let ended_at = timing.and_then(|t| t.ended);
    let until = timing.and_then(|t| t.until);
    let inspected = match (&slot.kind, &slot.state) {
        (SlotKind::Step, state) => {
            let (state, output) = match state {
                SlotState::Running { attempts, retry_at } => (
                    StepState::Running {
                        attempts: *attempts,
                        retry_at: retry_at.map(from_millis),
                    },
                    None,
                ),
                SlotState::Completed { output, attempts } => (
                    StepState::Completed {
                        attempts: *attempts,
                    },
                    Some(PayloadView::of(output)),
                ),
                SlotState::Failed { error, attempts } => (
                    StepState::Failed {
                        attempts: *attempts,
                        error: StepError::clone(error),
                    },
                    None,
                ),
                _ => (StepState::Cancelled, None),
            };
            InspectedSlot::Step(InspectedStep {
                name: slot.name.clone(),
                occurrence: slot.occurrence,
                generation: slot.generation,
                key: IdempotencyKey::forward(id, &slot.name, slot.occurrence, slot.generation, run),
                has_rollback: slot.has_rollback,
                state,
                input: slot.input.as_ref().map(PayloadView::of),
                output,
                started_at,
                ended_at,
            })
        }
        (SlotKind::Sleep, state) => InspectedSlot::Sleep(InspectedSleep {
            name: slot.name.clone(),
            occurrence: slot.occurrence,
            generation: slot.generation,
            wake_at: match state {
                SlotState::Sleeping { wake_at } => Some(from_millis(*wake_at)),
                _ => until,
            },
            done: !matches!(state, SlotState::Sleeping { .. }),
            started_at,
            ended_at,
        }),
        (SlotKind::Event, state) => {
            let (event_type, deadline, state) = match state {
                SlotState::Waiting {
                    event_type,
                    deadline,
                } => (
                    event_type.clone(),
                    Some(from_millis(*deadline)),
                    WaitState::Waiting,
                ),
                SlotState::Received {
                    event_type,
                    payload,
                } => (
                    event_type.clone(),
                    until,
                    WaitState::Received {
                        payload: PayloadView::of(payload),
                    },
                ),
                SlotState::TimedOut { event_type } => {
                    (event_type.clone(), until, WaitState::TimedOut)
                }
                _ => (String::new(), until, WaitState::Waiting),
            };
            InspectedSlot::Wait(InspectedWait {
                name: slot.name.clone(),
                occurrence: slot.occurrence,
                generation: slot.generation,
                event_type,
                deadline,
                state,
                started_at,
                ended_at,
            })
        }
        (SlotKind::Child, state) => {
            let (child, workflow, ended, output, failure) = match state {
                SlotState::ChildRunning { child, workflow } => {
                    (child.clone(), workflow.clone(), None, None, None)
                }
                SlotState::ChildEnded {
                    child,
                    status,
                    output,
                    failure,
                } => (
                    child.clone(),
                    timing.map(|t| t.workflow.clone()).unwrap_or_default(),
                    Some(*status),
                    output.as_ref().map(PayloadView::of),
                    failure.clone(),
                ),
                _ => (String::new(), String::new(), None, None, None),
            };
            InspectedSlot::Child(InspectedChild {
                name: slot.name.clone(),
                occurrence: slot.occurrence,
                generation: slot.generation,
                child,
                workflow,
                has_rollback: slot.has_rollback,
                ended,
                output,
                failure: failure.map(|f| *f),
                started_at,
                ended_at,
            })
        }
        (SlotKind::Now | SlotKind::Random, _) => return None,
    };
    Some(inspected)
}

/// When each step, sleep, wait and compensation of the current lineage
/// began and ended, from history.
#[derive(Default)]
struct Times {
    /// Steps, sleeps and waits in the order they began.
    slots: Vec<Timing>,
    /// Compensations of the current generation, in the order they began.
    compensations: Vec<Timing>,
}

struct Timing {
    kind: SlotKind,
    name: String,
    occurrence: u32,
    started: SystemTime,
    ended: Option<SystemTime>,
    /// A sleep's wake time or a wait's deadline.
    until: Option<SystemTime>,
    /// A child's workflow.
    workflow: String,
}

impl Times {
    fn from_history(history: &[Event]) -> Times {
        let mut times = Times::default();
        // Sleeps' and waits' events carry no occurrence: count them, per
        // kind and name as the workflow context does.
        let mut occurrences: HashMap<(SlotKind, String), u32> = HashMap::new();
        for event in history {
            times.apply(event, &mut occurrences);
        }
        times
    }

    fn apply(&mut self, event: &Event, occurrences: &mut HashMap<(SlotKind, String), u32>) {
        let at = event.at;
        match &event.kind {
            EventKind::StepStarted { step, occurrence } => {
                self.begin(SlotKind::Step, step, *occurrence, at, None);
            }
            EventKind::StepCompleted {
                step, occurrence, ..
            }
            | EventKind::StepFailed {
                step, occurrence, ..
            } => self.end(SlotKind::Step, step, Some(*occurrence), at),
            EventKind::SleepStarted { name, wake_at } => {
                let occurrence = next_occurrence(occurrences, SlotKind::Sleep, name);
                self.begin(SlotKind::Sleep, name, occurrence, at, Some(*wake_at));
            }
            EventKind::SleepCompleted { name } => self.end(SlotKind::Sleep, name, None, at),
            EventKind::ChildStarted {
                name,
                occurrence,
                workflow,
                ..
            } => {
                self.begin(SlotKind::Child, name, *occurrence, at, None);
                if let Some(timing) = self.slots.last_mut() {
                    timing.workflow.clone_from(workflow);
                }
            }
            EventKind::ChildEnded { name, .. } => self.end(SlotKind::Child, name, None, at),
            EventKind::EventWaitStarted { name, deadline, .. } => {
                let occurrence = next_occurrence(occurrences, SlotKind::Event, name);
                self.begin(SlotKind::Event, name, occurrence, at, Some(*deadline));
            }
            EventKind::EventDelivered { name, .. } | EventKind::EventWaitTimedOut { name, .. } => {
                self.end(SlotKind::Event, name, None, at);
            }
            // Steps in flight when rollback begins are cancelled then.
            EventKind::RollbackStarted { .. } => {
                for timing in &mut self.slots {
                    if timing.kind == SlotKind::Step && timing.ended.is_none() {
                        timing.ended = Some(at);
                    }
                }
            }
            EventKind::RollbackStepStarted { step, occurrence } => {
                self.compensations.push(Timing {
                    kind: SlotKind::Step,
                    name: step.clone(),
                    occurrence: *occurrence,
                    started: at,
                    ended: None,
                    until: None,
                    workflow: String::new(),
                });
            }
            EventKind::RollbackStepCompleted {
                step, occurrence, ..
            }
            | EventKind::RollbackStepFailed {
                step, occurrence, ..
            } => {
                if let Some(c) = self
                    .compensations
                    .iter_mut()
                    .rfind(|c| c.name == *step && c.occurrence == *occurrence)
                {
                    c.ended = Some(at);
                }
            }
            EventKind::InstanceRestarted { from_step } => {
                self.restart(from_step.as_deref(), occurrences);
            }
            _ => {}
        }
    }

    fn begin(
        &mut self,
        kind: SlotKind,
        name: &str,
        occurrence: u32,
        started: SystemTime,
        until: Option<SystemTime>,
    ) {
        self.slots.push(Timing {
            kind,
            name: name.to_owned(),
            occurrence,
            started,
            ended: None,
            until,
            workflow: String::new(),
        });
    }

    /// Ends the latest unended call of `kind` and `name` (and occurrence,
    /// when the event names it).
    fn end(&mut self, kind: SlotKind, name: &str, occurrence: Option<u32>, at: SystemTime) {
        if let Some(timing) = self.slots.iter_mut().rfind(|t| {
            t.kind == kind
                && t.name == name
                && t.ended.is_none()
                && occurrence.is_none_or(|o| o == t.occurrence)
        }) {
            timing.ended = Some(at);
        }
    }

    /// A restart keeps the calls before the first call of `from_step` (all
    /// of them are discarded for a restart from the beginning), and its
    /// compensations start over.
    fn restart(
        &mut self,
        from_step: Option<&str>,
        occurrences: &mut HashMap<(SlotKind, String), u32>,
    ) {
        let keep = from_step
            .and_then(|step| {
                self.slots
                    .iter()
                    .position(|t| t.kind == SlotKind::Step && t.name == step)
            })
            .unwrap_or(0);
        self.slots.truncate(keep);
        self.compensations.clear();
        occurrences.clear();
        for timing in &self.slots {
            next_occurrence(occurrences, timing.kind, &timing.name);
        }
    }

    fn slot(&self, kind: SlotKind, name: &str, occurrence: u32) -> Option<&Timing> {
        self.slots
            .iter()
            .rfind(|t| t.kind == kind && t.name == name && t.occurrence == occurrence)
    }
}

fn next_occurrence(
    occurrences: &mut HashMap<(SlotKind, String), u32>,
    kind: SlotKind,
    name: &str,
) -> u32 {
    let counter = occurrences.entry((kind, name.to_owned())).or_insert(0);
    let occurrence = *counter;
    *counter += 1;
    occurrence
}
