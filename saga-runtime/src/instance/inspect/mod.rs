//! A read model of one instance, for tools that show it to people (the
//! `saga` command): its steps, sleeps and waits in call order, its
//! compensations in the order they ran, its payloads as JSON, with the
//! times from its history.
//!
//! The state says what each slot holds now; the history says when things
//! happened. A slot is matched to its history events by kind, name and
//! occurrence within the lineage that led to the current generation
//! (a restart discards the events of the slots it discarded).

mod times;
mod view;

pub(crate) use self::view::redact;
pub use self::view::*;

use self::times::Times;
use crate::error::Result;
use crate::error::failure::{Failure, StepError};
use crate::instance::Instance;
use crate::journal::{CompensationState, InstanceState, SlotKind, SlotRecord, SlotState};
use crate::time::clock::from_millis;
use crate::workflow::key::IdempotencyKey;

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
        event_ids: state
            .event_ids
            .iter()
            .map(|(id, sent)| RememberedEventId {
                id: id.clone(),
                event_type: sent.event_type.clone(),
                sent_at: from_millis(sent.sent_at),
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
