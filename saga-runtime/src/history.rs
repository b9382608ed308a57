//! The durable history of an instance, and the lifecycle events that
//! `Engine::subscribe` streams. They are the same records: an event is sent
//! to subscribers only after it is durable.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// One entry of an instance's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The instance it belongs to.
    pub instance: String,
    /// Its position in the instance's history, from 0 without gaps.
    pub seq: u64,
    /// When it was recorded, on the engine's clock.
    pub at: SystemTime,
    /// What happened.
    pub kind: EventKind,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum EventKind {
    /// `engine.start` stored the instance.
    InstanceCreated {
        /// The workflow it runs.
        workflow: String,
    },
    /// A process began (or, after a restart, resumed) running the instance.
    InstanceResumed,
    /// A step's first attempt began.
    StepStarted {
        /// The step's name.
        step: String,
        /// 0 for the first call of this name, 1 for the second, ...
        occurrence: u32,
    },
    /// An attempt failed and another will run after `delay`.
    StepRetrying {
        /// The step's name.
        step: String,
        /// Its occurrence.
        occurrence: u32,
        /// The attempt that failed (1-based).
        attempt: u32,
        /// Its error.
        error: String,
        /// How long until the next attempt.
        delay: Duration,
    },
    /// The step's output is stored; the step will never run again.
    StepCompleted {
        /// The step's name.
        step: String,
        /// Its occurrence.
        occurrence: u32,
        /// How many attempts it took.
        attempts: u32,
    },
    /// The step gave up.
    StepFailed {
        /// The step's name.
        step: String,
        /// Its occurrence.
        occurrence: u32,
        /// How many attempts ran.
        attempts: u32,
        /// The last error.
        error: String,
    },
    /// A durable sleep began.
    SleepStarted {
        /// The sleep's name.
        name: String,
        /// When it ends.
        wake_at: SystemTime,
    },
    /// A durable sleep ended.
    SleepCompleted {
        /// The sleep's name.
        name: String,
    },
    /// A wait for an event began.
    EventWaitStarted {
        /// The wait's name.
        name: String,
        /// The event type it waits for.
        event_type: String,
        /// When it times out.
        deadline: SystemTime,
    },
    /// `engine.send_event` stored an event for the instance.
    EventReceived {
        /// Its type.
        event_type: String,
    },
    /// A wait took a stored event.
    EventDelivered {
        /// The wait's name.
        name: String,
        /// The event's type.
        event_type: String,
    },
    /// A wait timed out.
    EventWaitTimedOut {
        /// The wait's name.
        name: String,
        /// The event type it waited for.
        event_type: String,
    },
    /// A user paused the instance.
    Paused,
    /// A user resumed it.
    Resumed,
    /// The workflow is failing (or was terminated with rollback) and the
    /// compensations begin.
    RollbackStarted {
        /// The error that failed the workflow.
        cause: String,
    },
    /// A compensation's first attempt began.
    RollbackStepStarted {
        /// The step it compensates.
        step: String,
        /// That step's occurrence.
        occurrence: u32,
    },
    /// A compensation finished.
    RollbackStepCompleted {
        /// The step it compensates.
        step: String,
        /// That step's occurrence.
        occurrence: u32,
    },
    /// A compensation gave up.
    RollbackStepFailed {
        /// The step it compensates.
        step: String,
        /// That step's occurrence.
        occurrence: u32,
        /// Its last error.
        error: String,
    },
    /// Every compensation finished.
    RollbackCompleted,
    /// A compensation gave up; the remaining ones did not run.
    RollbackFailed {
        /// The step whose compensation failed.
        step: String,
        /// Its error.
        error: String,
    },
    /// The instance finished with an output.
    InstanceCompleted,
    /// The instance finished with an error.
    InstanceErrored {
        /// The error.
        error: String,
    },
    /// A user ended the instance.
    InstanceTerminated,
    /// A user restarted the instance.
    InstanceRestarted {
        /// The step it restarted from; `None` for the beginning.
        from_step: Option<String>,
    },
}

impl EventKind {
    /// Whether this event ends the instance.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            EventKind::InstanceCompleted
                | EventKind::InstanceErrored { .. }
                | EventKind::InstanceTerminated
        )
    }
}
