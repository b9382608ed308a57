//! The scenarios of an exploration: what fails, where, and how each is
//! told to a person.

use std::fmt;

use crate::workflow::fault::{Attempt, Injection, Site, When};

/// What kind of failure a [`Scenario`] injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ScenarioKind {
    /// Nothing fails: the run every other scenario is drawn from.
    NoFailure,
    /// An attempt of a step fails for good, before its body runs or
    /// after.
    StepFails,
    /// A compensation's first attempt fails, during a rollback; it is
    /// retried (by its own retries, else by `retry_rollback()`).
    CompensationFailsOnce,
    /// The process crashes at a write to the store (the write is not
    /// made, and of the writes not flushed yet only a prefix survives);
    /// a new process opens the durable part and goes on.
    Crash,
}

/// One scenario: the failures it injects. Its `Display` says it in a
/// sentence: "step \"credit\" fails for good at attempt 1, after its body
/// ran".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    pub(crate) fault: Fault,
}

/// The failures of a scenario, nested: a compensation fails or the
/// process crashes during the run of another scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    None,
    Step {
        at: Attempt,
        when: When,
    },
    Compensation {
        at: Attempt,
        when: When,
        during: Box<Fault>,
    },
    Crash {
        write: u64,
        during: Box<Fault>,
    },
}

impl Fault {
    /// The attempts that fail.
    pub(crate) fn injections(&self) -> Vec<Injection> {
        match self {
            Fault::None => Vec::new(),
            Fault::Step { at, when } => vec![Injection {
                at: at.clone(),
                when: *when,
            }],
            Fault::Compensation { at, when, during } => {
                let mut injections = during.injections();
                injections.push(Injection {
                    at: at.clone(),
                    when: *when,
                });
                injections
            }
            Fault::Crash { during, .. } => during.injections(),
        }
    }

    /// The write the process crashes at, if it does.
    pub(crate) fn crash_at(&self) -> Option<u64> {
        match self {
            Fault::Crash { write, .. } => Some(*write),
            _ => None,
        }
    }
}

impl Scenario {
    /// What kind of failure it injects.
    pub fn kind(&self) -> ScenarioKind {
        match self.fault {
            Fault::None => ScenarioKind::NoFailure,
            Fault::Step { .. } => ScenarioKind::StepFails,
            Fault::Compensation { .. } => ScenarioKind::CompensationFailsOnce,
            Fault::Crash { .. } => ScenarioKind::Crash,
        }
    }

    /// The step whose attempt or compensation fails in it, if any.
    pub fn step(&self) -> Option<&str> {
        match &self.fault {
            Fault::Step { at, .. } | Fault::Compensation { at, .. } => Some(&at.step),
            Fault::None | Fault::Crash { .. } => None,
        }
    }
}

/// "step \"debit\"", "step \"debit\" #2", and the instance when it is
/// not the explored one (a child's step).
struct StepName<'a>(&'a Attempt, &'a str);

impl fmt::Display for StepName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Attempt {
            instance,
            step,
            occurrence,
            ..
        } = self.0;
        write!(f, "step {step:?}")?;
        if *occurrence > 0 {
            write!(f, " (call {})", occurrence + 1)?;
        }
        if instance != self.1 {
            write!(f, " of instance {instance:?}")?;
        }
        Ok(())
    }
}

fn body(when: When) -> &'static str {
    match when {
        When::BeforeBody => "before its body ran",
        When::AfterBody => "after its body ran",
    }
}

impl Fault {
    pub(crate) fn describe(&self, f: &mut fmt::Formatter<'_>, id: &str) -> fmt::Result {
        match self {
            Fault::None => f.write_str("no failure"),
            Fault::Step { at, when } => write!(
                f,
                "{} fails for good at attempt {}, {}",
                StepName(at, id),
                at.attempt,
                body(*when)
            ),
            Fault::Compensation { at, when, during } => {
                debug_assert_eq!(at.site, Site::Compensation);
                write!(
                    f,
                    "the compensation of {} fails once, {}; during: ",
                    StepName(at, id),
                    body(*when)
                )?;
                during.describe(f, id)
            }
            Fault::Crash { write, during } => {
                write!(f, "crash at write {}; during: ", write + 1)?;
                during.describe(f, id)
            }
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fault.describe(f, super::INSTANCE)
    }
}
