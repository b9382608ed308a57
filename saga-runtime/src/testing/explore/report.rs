//! What an exploration found: each scenario with its outcome, and the
//! started steps whose effect no rollback undoes.

use std::fmt;

use crate::model::history::{Event, EventKind};
use crate::model::status::Status;
use crate::workflow::service::{Service, Services};

use super::scenario::{Scenario, ScenarioKind};

/// How the explored instance ended in one scenario, as the invariants
/// see it.
pub struct Outcome {
    pub(crate) status: Status,
    pub(crate) history: Vec<Event>,
    pub(crate) services: Services,
}

impl Outcome {
    /// The instance's status at the end: `Complete`, `Errored` (rolled
    /// back), or, when it did not end, where it stopped.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The instance's history, every process's records in order.
    pub fn history(&self) -> &[Event] {
        &self.history
    }

    /// The error the instance ended with, if it ended `Errored`.
    pub fn error(&self) -> Option<&str> {
        self.history
            .iter()
            .rev()
            .find_map(|event| match &event.kind {
                EventKind::InstanceErrored { error } => Some(error.as_str()),
                _ => None,
            })
    }

    /// The steps whose compensation completed, in the order they ran.
    pub fn compensated(&self) -> Vec<&str> {
        self.history
            .iter()
            .filter_map(|event| match &event.kind {
                EventKind::RollbackStepCompleted { step, .. } => Some(step.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The test double of type `T` this scenario ran with (each scenario
    /// gets fresh ones, from [`Explorer::service`](super::Explorer::service)),
    /// or a message naming the type when none was given.
    pub fn service<T: Send + Sync + 'static>(&self) -> Result<Service<T>, String> {
        self.services.get::<T>().map_err(|error| error.to_string())
    }

    /// Whether a rollback ran to its end.
    fn rolled_back(&self) -> bool {
        self.history
            .iter()
            .rev()
            .find_map(|event| match event.kind {
                EventKind::RollbackCompleted => Some(true),
                EventKind::RollbackFailed { .. } => Some(false),
                _ => None,
            })
            .unwrap_or(true)
    }

    /// The last rollback failure, if the rollback gave up.
    pub(crate) fn rollback_failure(&self) -> Option<String> {
        self.history
            .iter()
            .rev()
            .find_map(|event| match &event.kind {
                EventKind::RollbackFailed { step, error } => {
                    Some(format!("the compensation of step {step:?} failed: {error}"))
                }
                EventKind::RollbackCompleted | EventKind::RollbackRetried => Some(String::new()),
                _ => None,
            })
            .filter(|failure| !failure.is_empty())
    }

    /// The verdict before the invariants.
    pub(crate) fn verdict(&self) -> Verdict {
        match self.status {
            Status::Complete => Verdict::Completed,
            Status::Errored if self.rolled_back() => Verdict::RolledBack,
            Status::Errored => Verdict::RollbackFailed(
                self.rollback_failure()
                    .unwrap_or_else(|| "the rollback gave up".to_owned()),
            ),
            other => Verdict::NotEnded(format!(
                "the instance is {other:?} and nothing it waits on can come; its last record: {}",
                self.history
                    .last()
                    .map_or_else(|| "none".to_owned(), |event| format!("{:?}", event.kind))
            )),
        }
    }
}

/// The outcome of one scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// The instance completed, and every invariant held.
    Completed,
    /// The instance failed, its compensations ran, and every invariant
    /// held.
    RolledBack,
    /// A compensation gave up, even after a `retry_rollback()`.
    RollbackFailed(String),
    /// The instance did not end: it waits on nothing that can come (or
    /// is `Blocked`).
    NotEnded(String),
    /// An invariant broke: its message.
    InvariantBroken(String),
}

impl Verdict {
    /// Whether this outcome is a good one: completed, or rolled back, with
    /// every invariant holding.
    pub fn is_ok(&self) -> bool {
        matches!(self, Verdict::Completed | Verdict::RolledBack)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Completed => f.write_str("completed"),
            Verdict::RolledBack => f.write_str("rolled back"),
            Verdict::RollbackFailed(why) => write!(f, "ROLLBACK FAILED: {why}"),
            Verdict::NotEnded(why) => write!(f, "NOT ENDED: {why}"),
            Verdict::InvariantBroken(why) => write!(f, "INVARIANT BROKEN: {why}"),
        }
    }
}

/// One scenario and its outcome.
#[derive(Clone, Debug)]
pub struct Explored {
    /// Its number in the report, from 1.
    pub number: usize,
    /// What failed.
    pub scenario: Scenario,
    /// How it ended.
    pub verdict: Verdict,
}

/// A started step with side effects (not `read_only`) and no rollback
/// handler: when the workflow fails after it, its effect stays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unguarded {
    /// The step's name.
    pub step: String,
    /// The scenarios it started in.
    pub started: usize,
    /// The numbers of the scenarios that rolled back after it started,
    /// leaving its effect in place.
    pub left_in_place: Vec<usize>,
}

/// What [`Explorer::run`](super::Explorer::run) found: every scenario with
/// its outcome, and every started step with side effects and no
/// rollback. `Display` prints it as a table.
#[derive(Clone, Debug)]
pub struct Report {
    pub(crate) workflow: String,
    pub(crate) explored: Vec<Explored>,
    pub(crate) unguarded: Vec<Unguarded>,
}

impl Report {
    /// Every scenario, in the order they ran.
    pub fn scenarios(&self) -> &[Explored] {
        &self.explored
    }

    /// How many scenarios of `kind` ran.
    pub fn count(&self, kind: ScenarioKind) -> usize {
        self.explored
            .iter()
            .filter(|e| e.scenario.kind() == kind)
            .count()
    }

    /// The scenarios whose outcome is not a good one.
    pub fn failures(&self) -> Vec<&Explored> {
        self.explored
            .iter()
            .filter(|e| !e.verdict.is_ok())
            .collect()
    }

    /// The started steps with side effects and no rollback.
    pub fn unguarded(&self) -> &[Unguarded] {
        &self.unguarded
    }

    /// Whether every scenario ended well (completed or rolled back, every
    /// invariant holding). Steps without rollback do not count: see
    /// [`unguarded`](Report::unguarded).
    pub fn is_ok(&self) -> bool {
        self.failures().is_empty()
    }

    /// Panics with the report when a scenario ended badly, naming each:
    /// a test's assertion, the one panic of this crate's API.
    #[track_caller]
    #[allow(clippy::panic)] // failing the test is its purpose
    pub fn assert_ok(&self) {
        if !self.is_ok() {
            panic!("{self}");
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failures = self.failures();
        writeln!(
            f,
            "explored workflow {:?}: {} scenarios, {} failed",
            self.workflow,
            self.explored.len(),
            failures.len()
        )?;
        let told: Vec<String> = self
            .explored
            .iter()
            .map(|e| e.scenario.to_string())
            .collect();
        let width = told.iter().map(String::len).max().unwrap_or(0);
        let digits = self.explored.len().to_string().len();
        for (explored, told) in self.explored.iter().zip(&told) {
            writeln!(
                f,
                "  {:>digits$}  {told:<width$}  {}",
                explored.number, explored.verdict
            )?;
        }
        if !failures.is_empty() {
            writeln!(f, "failed:")?;
            for failed in &failures {
                writeln!(
                    f,
                    "  #{} {}: {}",
                    failed.number, failed.scenario, failed.verdict
                )?;
            }
        }
        if !self.unguarded.is_empty() {
            writeln!(f, "started steps with side effects and no rollback:")?;
            for step in &self.unguarded {
                write!(
                    f,
                    "  step {:?}: started in {} scenarios",
                    step.step, step.started
                )?;
                match step.left_in_place.first() {
                    Some(first) => writeln!(
                        f,
                        ", left in place by the rollback of {} (first: #{first})",
                        step.left_in_place.len()
                    )?,
                    None => writeln!(f, ", none of which rolled back")?,
                }
            }
        }
        Ok(())
    }
}
