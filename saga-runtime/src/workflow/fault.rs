//! Failures injected into attempts by `testing::explore`: the one place
//! the step runner and the compensation runner ask whether this attempt
//! is to fail, and note that it ran.
//!
//! An engine has a plan only when `explore` built it, so the runners pay
//! one `Option` check per attempt. The failure comes from the engine,
//! not from the user's code: their steps and their test doubles stay as
//! they are. It may come before the body runs (nothing happened) or
//! after (the effect happened, then the call failed, as a timeout after
//! the bank applied a transfer does): only the second shows a
//! compensation that trusts `output() == None` to mean "nothing to undo".

use std::future::Future;
use std::sync::Mutex;

use crate::error::failure::StepError;
use crate::lock::lock;

/// What an attempt belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Site {
    /// A step's attempt.
    Step,
    /// The attempt of a step's compensation.
    Compensation,
}

/// When an injected failure strikes an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum When {
    /// Before the body runs: it has no effect.
    BeforeBody,
    /// After the body ran and its effect happened: its result is lost.
    AfterBody,
}

/// One attempt, as the runners name it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Attempt {
    pub(crate) site: Site,
    pub(crate) instance: String,
    pub(crate) step: String,
    pub(crate) occurrence: u32,
    pub(crate) attempt: u32,
}

/// The failure a plan injects: at `at`, `when`. A step's fails for good
/// (fatal); a compensation's is retryable (it fails once).
#[derive(Clone, Debug)]
pub(crate) struct Injection {
    pub(crate) at: Attempt,
    pub(crate) when: When,
}

/// What one engine of an explored scenario injects, and the attempts
/// it saw.
#[derive(Default)]
pub(crate) struct FaultPlan {
    /// A compensation's is taken when it strikes (it fails once per
    /// scenario); a step's stays.
    injections: Mutex<Vec<Injection>>,
    seen: Mutex<Vec<Attempt>>,
}

impl FaultPlan {
    pub(crate) fn new(injections: Vec<Injection>) -> FaultPlan {
        FaultPlan {
            injections: Mutex::new(injections),
            seen: Mutex::new(Vec::new()),
        }
    }

    /// The attempts run so far, in order.
    pub(crate) fn seen(&self) -> Vec<Attempt> {
        lock(&self.seen).clone()
    }

    /// Notes `at` and answers whether (and when) it fails.
    fn strike(&self, at: Attempt) -> Option<When> {
        let mut injections = lock(&self.injections);
        let planned = injections.iter().position(|planned| planned.at == at);
        let when = match planned {
            // A step's attempt fails for good: each time it runs (again,
            // after a crash lost its failure).
            Some(index) if at.site == Site::Step => Some(injections[index].when),
            // A compensation's fails once.
            Some(index) => Some(injections.remove(index).when),
            None => None,
        };
        drop(injections);
        lock(&self.seen).push(at);
        when
    }
}

/// `body`, run as the plan says for the attempt `at` (as it is, when
/// there is no plan).
pub(crate) async fn attempt<T>(
    plan: Option<&FaultPlan>,
    at: impl FnOnce() -> Attempt,
    body: impl Future<Output = Result<T, StepError>>,
) -> Result<T, StepError> {
    let Some(plan) = plan else {
        return body.await;
    };
    let at = at();
    let site = at.site;
    let when = plan.strike(at);
    let injected = |when: When| {
        let message = match when {
            When::BeforeBody => "explore: a failure injected before the body ran",
            When::AfterBody => "explore: a failure injected after the body ran",
        };
        match site {
            Site::Step => StepError::fatal(message),
            Site::Compensation => StepError::retryable(message),
        }
    };
    match when {
        Some(When::BeforeBody) => Err(injected(When::BeforeBody)),
        Some(When::AfterBody) => {
            // The body's own outcome is lost, as a reply lost on the wire.
            let _ = body.await;
            Err(injected(When::AfterBody))
        }
        None => body.await,
    }
}
