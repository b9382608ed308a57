//! The life of an instance.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where an instance is in its life.
///
/// New statuses may be added (variants are only ever appended).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Status {
    /// Stored, not yet picked up (its workflow may not be registered yet);
    /// or started on a queue (`Engine::start_on`) and waiting there for a
    /// slot, with no driver until it takes one.
    Queued,
    /// Running its workflow code.
    Running,
    /// In a durable sleep or waiting for an event.
    Waiting,
    /// Paused by a user at a step boundary; `resume()` continues it.
    Paused,
    /// The workflow failed (or was terminated with rollback) and the
    /// compensations are running.
    RollingBack,
    /// Finished with an output.
    Complete,
    /// Finished with an error (after its compensations ran).
    Errored,
    /// Ended by a user.
    Terminated,
    /// Parked, not ended: its workflow code no longer matches its history
    /// (a step renamed, reordered, removed or added), or a stored value no
    /// longer decodes. Nothing after the divergence runs and no
    /// compensation runs without a decision: deploy a release that matches
    /// again (e.g. with `renamed_from`) and it resumes on the next
    /// `register` or open; or `terminate_with_rollback()` (compensates the
    /// started steps from history), or `terminate()` (does not).
    Blocked,
    /// Completed, then undone: a child workflow whose parent rolled back
    /// ran its own compensations afterwards (see `WorkflowContext::child`).
    /// Finished for good, as `Complete` is.
    Compensated,
}

impl Status {
    /// Every status, for a tool that parses one from its name (`saga list
    /// --status`): outside this crate no match can list them all. A new
    /// status is added here too; the test below stops compiling until it is.
    #[doc(hidden)]
    pub const ALL: [Status; 10] = [
        Status::Queued,
        Status::Running,
        Status::Waiting,
        Status::Paused,
        Status::RollingBack,
        Status::Blocked,
        Status::Complete,
        Status::Errored,
        Status::Terminated,
        Status::Compensated,
    ];

    /// Whether the instance has finished for good.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Status::Complete | Status::Errored | Status::Terminated | Status::Compensated
        )
    }

    /// Whether a process that opens the store should resume this instance.
    /// A `Queued` instance that waits in a queue is the runner's to hold
    /// back until it takes a slot (`run::dequeue`).
    pub(crate) fn resumes_on_open(self) -> bool {
        matches!(
            self,
            Status::Queued
                | Status::Running
                | Status::Waiting
                | Status::RollingBack
                | Status::Blocked
        )
    }
}

impl Status {
    /// How it displays (and how a shared store's index column holds it).
    pub(crate) fn label(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Waiting => "waiting",
            Status::Paused => "paused",
            Status::RollingBack => "rolling back",
            Status::Complete => "complete",
            Status::Errored => "errored",
            Status::Terminated => "terminated",
            Status::Blocked => "blocked",
            Status::Compensated => "compensated",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_holds_every_status_once() {
        for (n, status) in Status::ALL.into_iter().enumerate() {
            assert!(!Status::ALL[..n].contains(&status), "{status} twice");
            // No wildcard: a status added to the enum fails to compile here.
            match status {
                Status::Queued
                | Status::Running
                | Status::Waiting
                | Status::Paused
                | Status::RollingBack
                | Status::Blocked
                | Status::Complete
                | Status::Errored
                | Status::Terminated
                | Status::Compensated => {}
            }
        }
    }
}
