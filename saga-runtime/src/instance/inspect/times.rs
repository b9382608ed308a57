//! When each slot of an instance began and ended, read from its history.

use std::collections::HashMap;
use std::time::SystemTime;

use crate::journal::SlotKind;
use crate::model::history::{Event, EventKind};

/// When each step, sleep, wait and compensation of the current lineage
/// began and ended, from history.
#[derive(Default)]
pub(super) struct Times {
    /// Steps, sleeps and waits in the order they began.
    pub(super) slots: Vec<Timing>,
    /// Compensations of the current generation, in the order they began.
    pub(super) compensations: Vec<Timing>,
}

pub(super) struct Timing {
    pub(super) kind: SlotKind,
    pub(super) name: String,
    pub(super) occurrence: u32,
    pub(super) started: SystemTime,
    pub(super) ended: Option<SystemTime>,
    /// A sleep's wake time or a wait's deadline.
    pub(super) until: Option<SystemTime>,
    /// A child's workflow.
    pub(super) workflow: String,
}

impl Times {
    pub(super) fn from_history(history: &[Event]) -> Times {
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

    pub(super) fn slot(&self, kind: SlotKind, name: &str, occurrence: u32) -> Option<&Timing> {
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
