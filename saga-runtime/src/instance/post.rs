//! Posts: how a process that does not drive an instance hands it a
//! [`Command`] (posted here, taken by the driving worker's `inbox`), and
//! the answer that comes back.
//!
//! On a store shared by workers (PostgreSQL), a reader (the `saga` command,
//! a dashboard) holds no lease, so it cannot write an instance's journal.
//! Its events and control calls are posted to the store's inbox instead;
//! the worker that drives the instances takes them, oldest first, acts on
//! each through the same calls a local user would make, and only then
//! removes it. A worker that dies between the two acts again after the
//! take-over:
//!
//! - an event carries an id (the caller's, or `inbox-<n>`), so it is stored
//!   once;
//! - pause, resume and terminate acted on twice end the same way (the
//!   second is refused as already done, and dropped);
//! - a restart acted on twice would run the instance twice, so a restart is
//!   removed from the inbox *before* it is acted on: at most once.

use serde::{Deserialize, Serialize};

use std::time::Duration;

use crate::codec::decode_record;
use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::journal::command::Command;
use crate::model::status::Status;

/// What the worker that acted on a post answered its poster.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Answer {
    /// Taken, and being acted on (a restart is answered so before it is
    /// acted on: at most once); the poster waits on.
    Taken,
    /// The control call did what it asks: paused, resumed, terminated ...
    Done,
    /// The event was stored (`true`), or was a duplicate of one stored
    /// with its id (`false`).
    Event { delivered: bool },
    /// The owner refused it, as it would refuse the same call of its own.
    Refused(Refusal),
}

impl Answer {
    /// How many kinds of answer this release knows (append only).
    pub(crate) const KINDS: u32 = 4;
}

/// Why an owner refused a post: the error it got, in a form that crosses
/// processes, and becomes the same [`Error`] again at the poster.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Refusal {
    InvalidState { status: Status, operation: String },
    EventIdConflict { event_id: String },
    UnknownInstance,
    UnknownStep { step: String },
    RestartAfterCompensation { step: String, compensated: String },
    Other(String),
}

impl Refusal {
    pub(crate) fn of(error: &Error) -> Refusal {
        match error {
            Error::InvalidState {
                status, operation, ..
            } => Refusal::InvalidState {
                status: *status,
                operation: (*operation).to_owned(),
            },
            Error::EventIdConflict { event_id, .. } => Refusal::EventIdConflict {
                event_id: event_id.clone(),
            },
            Error::UnknownInstance { .. } => Refusal::UnknownInstance,
            Error::UnknownStep { step, .. } => Refusal::UnknownStep { step: step.clone() },
            Error::RestartAfterCompensation {
                step, compensated, ..
            } => Refusal::RestartAfterCompensation {
                step: step.clone(),
                compensated: compensated.clone(),
            },
            other => Refusal::Other(other.to_string()),
        }
    }

    /// The error the owner refused with, for instance `id`.
    pub(crate) fn into_error(self, id: &str) -> Error {
        let id = id.to_owned();
        match self {
            Refusal::InvalidState { status, operation } => {
                match crate::journal::command::operation_named(&operation) {
                    Some(operation) => Error::InvalidState {
                        id,
                        status,
                        operation,
                    },
                    None => Error::Refused {
                        id,
                        reason: format!("it is {status}: the worker could not {operation}"),
                    },
                }
            }
            Refusal::EventIdConflict { event_id } => Error::EventIdConflict { id, event_id },
            Refusal::UnknownInstance => Error::UnknownInstance { id },
            Refusal::UnknownStep { step } => Error::UnknownStep { id, step },
            Refusal::RestartAfterCompensation { step, compensated } => {
                Error::RestartAfterCompensation {
                    id,
                    step,
                    compensated,
                }
            }
            Refusal::Other(reason) => Error::Refused { id, reason },
        }
    }
}

/// Posts `command` for instance `id` to the worker that drives it, and
/// waits, at most `patience`, for its answer. Past that:
/// [`Error::NotAnswered`], saying whether the owner's lease is live; the
/// post stays, and is acted on when the owner (or the worker that claims
/// the instance) takes it.
///
/// Cancel safety: the post is stored at the first await that returns;
/// dropped after that, the call still happens, unanswered.
pub(crate) async fn post_and_wait(
    journal: &Journal,
    id: &str,
    command: &Command,
    patience: Duration,
) -> Result<Answer> {
    let token = journal
        .post(id, &journal.sealer().encode_record(command)?)
        .await?;
    let deadline = tokio::time::Instant::now() + patience;
    let mut told = journal.changes(crate::store::Told::Stops);
    let mut every = Duration::from_millis(2);
    loop {
        match journal.answer(&token).await? {
            Some(Some(bytes)) => match decode_record::<Answer>(&bytes) {
                Ok(Answer::Taken) => {}
                Ok(answer) => {
                    // A reader without DELETE on the inbox leaves it to the
                    // owner's clean-up.
                    if let Err(e) = journal.forget_post(&token).await {
                        tracing::debug!(instance = %id, error = %e, "could not remove an answered post");
                    }
                    return Ok(answer);
                }
                Err(detail) if crate::codec::from_newer_release(&bytes, 0, Answer::KINDS) => {
                    return Err(Error::NewerRelease {
                        id: id.to_owned(),
                        detail: format!(
                            "the worker answered a post in a way it does not know: {detail}"
                        ),
                    });
                }
                Err(detail) => {
                    return Err(Error::Corrupt {
                        what: format!("the answer to a post for instance {id:?}"),
                        detail,
                    });
                }
            },
            Some(None) => {}
            // Removed unanswered: by the owner's clean-up, long after.
            None => break,
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::select! {
            // Each only makes it look again.
            // Biased: a simulated run picks the same on every replay of its seed.
            biased;
            () = tokio::time::sleep(every) => {}
            Some(()) = crate::journal::told_of_change(&mut told) => {}
            () = tokio::time::sleep_until(deadline) => {}
        }
        every = (every * 2).min(Duration::from_millis(100));
    }
    let owner_live = journal.owner_live(id).await.ok().flatten().unwrap_or(false);
    Err(Error::NotAnswered {
        id: id.to_owned(),
        owner_live,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_record;

    /// The last variant is the last kind [`Answer::KINDS`] counts.
    #[test]
    fn the_last_kind_of_answer_is_counted() {
        let last = encode_record(&Answer::Refused(Refusal::UnknownInstance));
        assert_eq!(u32::from(last[1]), Answer::KINDS - 1);
    }

    #[test]
    fn a_refusal_crosses_processes_as_the_same_error() {
        let error = Error::InvalidState {
            id: "x".into(),
            status: Status::Complete,
            operation: "terminate it",
        };
        let back = Refusal::of(&error).into_error("x");
        assert!(matches!(
            back,
            Error::InvalidState {
                status: Status::Complete,
                operation: "terminate it",
                ..
            }
        ));
        let conflict = Refusal::of(&Error::EventIdConflict {
            id: "x".into(),
            event_id: "e".into(),
        });
        assert!(matches!(
            conflict.into_error("x"),
            Error::EventIdConflict { .. }
        ));
    }
}
