//! The durable history of an instance, and the lifecycle events that
//! `Engine::subscribe` streams. They are the same records: an event is sent
//! to subscribers only after it is durable.

use std::fmt;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::model::status::Status;

/// One entry of an instance's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The instance it belongs to.
    pub instance: String,
    /// Its position in the instance's history, from 0 without gaps: in
    /// its run's history, for an instance that continued as new (each run
    /// counts from 0 again).
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
    /// The workflow code no longer matches the history (or a stored value
    /// no longer decodes): the instance is parked `Blocked`.
    InstanceBlocked {
        /// Why.
        error: String,
    },
    /// A user asked to run again the compensations that did not complete.
    RollbackRetried,
    /// The workflow started a child workflow (`ctx.child`).
    ChildStarted {
        /// The call's name.
        name: String,
        /// That call's occurrence.
        occurrence: u32,
        /// The child instance's id.
        child: String,
        /// The child's workflow.
        workflow: String,
    },
    /// A child workflow ended, and the parent's call returned.
    ChildEnded {
        /// The call's name.
        name: String,
        /// The child instance's id.
        child: String,
        /// How the child ended.
        status: Status,
    },
    /// The instance completed, was undone by its parent's rollback, and
    /// its compensations are over: it is `Compensated`.
    InstanceCompensated,
    /// A wait found a stored event of its type whose payload does not
    /// decode as the type the wait asks for: the event is set aside (no
    /// longer pending) and the wait goes on waiting.
    EventRejected {
        /// The wait's name.
        name: String,
        /// The event's type.
        event_type: String,
        /// Why it does not decode.
        error: String,
    },
    /// `ctx.patched(name)` answered true: the instance runs the patched
    /// code.
    Patched {
        /// The patch's name.
        name: String,
    },
    /// It took a slot of its queue: it leaves the queue's wait and runs.
    Dequeued {
        /// The queue.
        queue: String,
    },
    /// It gave its queue's slot back while it waits (the queue says
    /// [`release_while_waiting`](crate::queue::Queue::release_while_waiting)).
    SlotReleased {
        /// The queue.
        queue: String,
    },
    /// Its wait is over: it waits for a slot of its queue again
    /// (`Queued`), and goes on from that wait once it takes one.
    Requeued {
        /// The queue.
        queue: String,
    },
    /// `ctx.continue_as_new(input)`: the last event of the run that ends,
    /// and the first of the run that begins (`run`), which starts with the
    /// new input and an empty history under the same id.
    ContinuedAsNew {
        /// The run that begins (1 for the first continuation).
        run: u32,
    },
    /// The workflow published a new value of `name` (`ctx.publish`);
    /// [`Instance::published`](crate::Instance::published) reads the
    /// latest.
    Published {
        /// The published name.
        name: String,
    },
    /// The workflow replied to the update `update_id`
    /// ([`Update::reply`](crate::context::Update::reply)); the caller of
    /// [`Instance::update`](crate::Instance::update) gets the reply.
    UpdateReplied {
        /// The update's id.
        update_id: String,
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
                | EventKind::InstanceCompensated
        )
    }
}

impl fmt::Display for Event {
    /// `t-1 #3 2030-01-01T00:00:00.000Z step "charge" completed after 1 attempt`:
    /// the instance first, so a subscriber printing events of many
    /// instances can tell them apart.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} #{} {} {}",
            self.instance,
            self.seq,
            Timestamp(self.at),
            self.kind
        )
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nth = |occurrence: &u32| match occurrence {
            0 => String::new(),
            n => format!(" (occurrence {n})"),
        };
        let attempts = |n: &u32| {
            if *n == 1 {
                "1 attempt".to_owned()
            } else {
                format!("{n} attempts")
            }
        };
        match self {
            EventKind::InstanceCreated { workflow } => write!(f, "created (workflow {workflow:?})"),
            EventKind::InstanceResumed => f.write_str("resumed by a driver"),
            EventKind::StepStarted { step, occurrence } => {
                write!(f, "step {step:?}{} started", nth(occurrence))
            }
            EventKind::StepRetrying {
                step,
                occurrence,
                attempt,
                error,
                delay,
            } => write!(
                f,
                "step {step:?}{} attempt {attempt} failed: {error}; retrying in {delay:?}",
                nth(occurrence)
            ),
            EventKind::StepCompleted {
                step,
                occurrence,
                attempts: n,
            } => {
                write!(
                    f,
                    "step {step:?}{} completed after {}",
                    nth(occurrence),
                    attempts(n)
                )
            }
            EventKind::StepFailed {
                step,
                occurrence,
                attempts: n,
                error,
            } => write!(
                f,
                "step {step:?}{} failed after {}: {error}",
                nth(occurrence),
                attempts(n)
            ),
            EventKind::SleepStarted { name, wake_at } => {
                write!(f, "sleep {name:?} until {}", Timestamp(*wake_at))
            }
            EventKind::SleepCompleted { name } => write!(f, "sleep {name:?} ended"),
            EventKind::EventWaitStarted {
                name,
                event_type,
                deadline,
            } => write!(
                f,
                "wait {name:?} for event {event_type:?} until {}",
                Timestamp(*deadline)
            ),
            EventKind::EventReceived { event_type } => write!(f, "event {event_type:?} received"),
            EventKind::EventDelivered { name, event_type } => {
                write!(f, "wait {name:?} took event {event_type:?}")
            }
            EventKind::EventWaitTimedOut { name, event_type } => {
                write!(f, "wait {name:?} for event {event_type:?} timed out")
            }
            EventKind::Paused => f.write_str("paused"),
            EventKind::Resumed => f.write_str("resumed"),
            EventKind::RollbackStarted { cause } => write!(f, "rollback started: {cause}"),
            EventKind::RollbackStepStarted { step, occurrence } => {
                write!(f, "compensation of {step:?}{} started", nth(occurrence))
            }
            EventKind::RollbackStepCompleted { step, occurrence } => {
                write!(f, "compensation of {step:?}{} completed", nth(occurrence))
            }
            EventKind::RollbackStepFailed {
                step,
                occurrence,
                error,
            } => {
                write!(
                    f,
                    "compensation of {step:?}{} failed: {error}",
                    nth(occurrence)
                )
            }
            EventKind::RollbackCompleted => f.write_str("rollback completed"),
            EventKind::RollbackFailed { step, error } => {
                write!(f, "rollback failed at {step:?}: {error}")
            }
            EventKind::InstanceCompleted => f.write_str("completed"),
            EventKind::InstanceErrored { error } => write!(f, "errored: {error}"),
            EventKind::InstanceTerminated => f.write_str("terminated"),
            EventKind::InstanceRestarted { from_step: None } => f.write_str("restarted"),
            EventKind::InstanceRestarted {
                from_step: Some(step),
            } => {
                write!(f, "restarted from step {step:?}")
            }
            EventKind::InstanceBlocked { error } => write!(f, "blocked: {error}"),
            EventKind::RollbackRetried => f.write_str("rollback retried"),
            EventKind::ChildStarted {
                name,
                occurrence,
                child,
                workflow,
            } => write!(
                f,
                "child {name:?}{} started: instance {child:?} (workflow {workflow:?})",
                nth(occurrence)
            ),
            EventKind::ChildEnded {
                name,
                child,
                status,
            } => write!(f, "child {name:?} ({child:?}) ended {status}"),
            EventKind::InstanceCompensated => f.write_str("compensated"),
            EventKind::EventRejected {
                name,
                event_type,
                error,
            } => write!(
                f,
                "wait {name:?} rejected event {event_type:?}, which does not decode: {error}"
            ),
            EventKind::Patched { name } => write!(f, "patch {name:?} taken"),
            EventKind::Published { name } => write!(f, "published a new value of {name:?}"),
            EventKind::UpdateReplied { update_id } => write!(f, "replied to update {update_id:?}"),
            EventKind::Dequeued { queue } => write!(f, "took a slot of queue {queue:?}"),
            EventKind::SlotReleased { queue } => {
                write!(f, "gave its slot of queue {queue:?} back while it waits")
            }
            EventKind::Requeued { queue } => {
                write!(f, "waits for a slot of queue {queue:?} again")
            }
            EventKind::ContinuedAsNew { run } => write!(f, "continued as new: run {run}"),
        }
    }
}

/// A time as RFC 3339 in UTC, to the millisecond.
pub(crate) struct Timestamp(pub(crate) SystemTime);

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let since = self
            .0
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let secs = since.as_secs();
        let (days, rem) = (secs / 86_400, secs % 86_400);
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60,
            since.subsec_millis()
        )
    }
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_rfc_3339() {
        let at = std::time::UNIX_EPOCH + Duration::from_millis(1_893_456_000_250);
        assert_eq!(Timestamp(at).to_string(), "2030-01-01T00:00:00.250Z");
        assert_eq!(
            Timestamp(std::time::UNIX_EPOCH).to_string(),
            "1970-01-01T00:00:00.000Z"
        );
        let leap = std::time::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(Timestamp(leap).to_string(), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn events_read_as_sentences() {
        let event = Event {
            instance: "t-1".into(),
            seq: 3,
            at: std::time::UNIX_EPOCH + Duration::from_secs(1_893_456_000),
            kind: EventKind::StepCompleted {
                step: "charge".into(),
                occurrence: 0,
                attempts: 1,
            },
        };
        assert_eq!(
            event.to_string(),
            "t-1 #3 2030-01-01T00:00:00.000Z step \"charge\" completed after 1 attempt"
        );
    }
}
