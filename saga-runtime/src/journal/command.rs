//! What a caller asks of one instance, in one type: a control call or an
//! event. A call made here, a call posted by another process (the
//! `saga` command, a reader) and the owner's act on that post are the same
//! [`Command`]; and [`admits`] is the one place that says which status
//! takes which command, beside the fold (`state`) that applies the record
//! the command writes.
//!
//! A command is also what is posted to the inbox of a store shared by
//! workers, so its bytes are stored: append variants only, as for journal
//! records (see `change`).

use serde::{Deserialize, Serialize};

use super::state::{InstanceState, SlotKind};
use crate::codec::Payload;
use crate::error::{Error, Result};
use crate::model::status::Status;

/// One command to an instance.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum Command {
    /// An event for its waits (with the sender's id, deduplicated).
    Event {
        event_type: String,
        payload: Payload,
        event_id: Option<String>,
    },
    /// Stop at the next step boundary.
    Pause,
    Resume,
    /// End it now (`rollback`: after running its compensations).
    Terminate {
        rollback: bool,
    },
    /// Run it again from the first call of step `from` (the beginning
    /// when `None`), as a new generation.
    Restart {
        from: Option<String>,
    },
    /// Run again the compensations whose rollback gave up.
    RetryRollback,
    /// Child workflow `child` of the instance ended (or was compensated):
    /// the call or compensation that waits for it looks again.
    ChildEnded {
        child: String,
    },
    /// Undo a completed child workflow: its parent rolls back (`cause`:
    /// why), so its compensations run and it ends `Compensated`.
    Recall {
        cause: crate::error::failure::Failure,
    },
    /// Its parent was paused: pause it too, as the parent's.
    ParentPaused,
    /// Its parent was resumed: resume it if the parent's pause paused it.
    ParentResumed,
}

/// A posted event's payload is sealed by the engine's codec, as in the
/// journal (`crate::seal`).
impl crate::seal::CarriesPayloads for Command {
    fn payloads_mut(&mut self) -> Vec<&mut Payload> {
        match self {
            Command::Event { payload, .. } => vec![payload],
            Command::Pause
            | Command::Resume
            | Command::Terminate { .. }
            | Command::Restart { .. }
            | Command::RetryRollback
            | Command::ChildEnded { .. }
            | Command::Recall { .. }
            | Command::ParentPaused
            | Command::ParentResumed => Vec::new(),
        }
    }
}

impl Command {
    /// How many kinds of command this release knows (the variants above).
    pub(crate) const KINDS: u32 = 10;

    /// What a refusal says the caller could not do, as in "it is Complete:
    /// cannot terminate it".
    pub(crate) fn operation(&self) -> &'static str {
        match self {
            Command::Event { .. } => SEND_EVENT,
            Command::Pause => "pause it",
            Command::Resume => "resume it",
            Command::Terminate { rollback: false } => "terminate it",
            Command::Terminate { rollback: true } => "terminate it with rollback",
            Command::Restart { .. } => "restart it",
            Command::RetryRollback => RETRY_ROLLBACK,
            Command::ChildEnded { .. } => TELL_OF_CHILD,
            Command::Recall { .. } => RECALL,
            Command::ParentPaused => "pause it with its parent",
            Command::ParentResumed => "resume it with its parent",
        }
    }

    /// The command a child gets when its parent gets this one, if any:
    /// pause, resume and terminate reach the running children (a
    /// terminate with rollback compensates the children that roll back
    /// as the parent's rollback gets to them; the others are terminated).
    pub(crate) fn for_children(&self) -> Option<Command> {
        match self {
            Command::Pause | Command::ParentPaused => Some(Command::ParentPaused),
            Command::Resume | Command::ParentResumed => Some(Command::ParentResumed),
            Command::Terminate { .. } => Some(Command::Terminate { rollback: false }),
            _ => None,
        }
    }
}

const RETRY_ROLLBACK: &str = "retry its rollback (it has no failed rollback)";
const TELL_OF_CHILD: &str = "tell it that a child workflow ended";
const RECALL: &str = "compensate it (only a completed instance is undone)";

const SEND_EVENT: &str = "send an event to it";

/// What the journal refuses once an instance holds all it may
/// (`Error::InstanceFull`'s neighbour: a record of the run itself).
pub(crate) const RECORD_MORE: &str = "record more of its run";

/// Every operation a refusal may name: what [`Command::operation`]
/// answers, and [`RECORD_MORE`]. A refusal crosses processes as text, and
/// becomes `Error::InvalidState` (which names a `&'static str`) again.
const OPERATIONS: &[&str] = &[
    SEND_EVENT,
    "pause it",
    "resume it",
    "terminate it",
    "terminate it with rollback",
    "restart it",
    RETRY_ROLLBACK,
    TELL_OF_CHILD,
    RECALL,
    "pause it with its parent",
    "resume it with its parent",
    RECORD_MORE,
];

/// The operation named `name`, as this release spells it.
pub(crate) fn operation_named(name: &str) -> Option<&'static str> {
    OPERATIONS.iter().find(|known| **known == name).copied()
}

/// What an instance does with a command its status takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// It acts: the command writes its record (or stops the driver, which
    /// writes it).
    Act,
    /// It is so already (a pause of a paused instance, a resume of a
    /// running one): nothing is written, and the call succeeds.
    AlreadySo,
}

/// Whether instance `id`, in `state`, takes `command`: the rule for every
/// caller, here or in another process. A refusal is the error the caller
/// gets (`Error::InvalidState`, or why a restart cannot begin where it
/// asks).
pub(crate) fn admits(command: &Command, state: &InstanceState, id: &str) -> Result<Admit> {
    let status = state.status;
    let admit = match command {
        Command::Event { .. } => {
            admits_event(state, id)?;
            Some(Admit::Act)
        }
        Command::Pause => match status {
            Status::Queued | Status::Running | Status::Waiting => Some(Admit::Act),
            Status::Paused => Some(Admit::AlreadySo),
            _ => None,
        },
        Command::Resume => match status {
            Status::Paused => Some(Admit::Act),
            Status::Queued | Status::Running | Status::Waiting => Some(Admit::AlreadySo),
            _ => None,
        },
        Command::Terminate { .. } => {
            (!status.is_terminal() && status != Status::RollingBack).then_some(Admit::Act)
        }
        Command::Restart { from } => {
            restart_slot(state, from.as_deref(), id)?;
            Some(Admit::Act)
        }
        Command::RetryRollback => {
            let gave_up = state.rollback.as_ref().is_some_and(|p| p.failure.is_some());
            (status.is_terminal() && gave_up).then_some(Admit::Act)
        }
        // A wake-up: whatever waits for the child looks at it again.
        Command::ChildEnded { .. } => Some(Admit::Act),
        Command::Recall { .. } => {
            let recalled = state
                .rollback
                .as_ref()
                .is_some_and(|plan| plan.then == Status::Compensated);
            match status {
                Status::Complete => Some(Admit::Act),
                Status::Compensated => Some(Admit::AlreadySo),
                Status::RollingBack if recalled => Some(Admit::AlreadySo),
                _ => None,
            }
        }
        Command::ParentPaused => match status {
            Status::Queued | Status::Running | Status::Waiting => Some(Admit::Act),
            Status::Paused => Some(Admit::AlreadySo),
            _ => None,
        },
        Command::ParentResumed => match status {
            Status::Paused if state.paused_with_parent => Some(Admit::Act),
            // Paused on its own: it stays paused.
            Status::Paused | Status::Queued | Status::Running | Status::Waiting => {
                Some(Admit::AlreadySo)
            }
            _ => None,
        },
    };
    admit.ok_or_else(|| Error::InvalidState {
        id: id.to_owned(),
        status,
        operation: command.operation(),
    })
}

/// Whether instance `id`, in `state`, takes an event (of any type, with
/// or without an id): [`admits`] for a [`Command::Event`], for a sender
/// that holds the event's parts rather than the command. A duplicate of an
/// event stored before is answered as such before this is asked.
pub(crate) fn admits_event(state: &InstanceState, id: &str) -> Result<()> {
    if state.status.is_terminal() {
        return Err(Error::InvalidState {
            id: id.to_owned(),
            status: state.status,
            operation: SEND_EVENT,
        });
    }
    Ok(())
}

/// The slot a restart from step `from` begins at: the step's first call
/// (slot 0 from the beginning). Refused when a step it would keep was
/// compensated: its effect was undone, so only a restart from the
/// beginning is sound.
pub(crate) fn restart_slot(state: &InstanceState, from: Option<&str>, id: &str) -> Result<u32> {
    let Some(step) = from else { return Ok(0) };
    let from_slot = state
        .slots
        .iter()
        .find(|(_, s)| s.kind == SlotKind::Step && s.name == step)
        .map(|(i, _)| *i)
        .ok_or_else(|| Error::UnknownStep {
            id: id.to_owned(),
            step: step.to_owned(),
        })?;
    if let Some(kept) = state.compensated_before(from_slot) {
        return Err(Error::RestartAfterCompensation {
            id: id.to_owned(),
            step: step.to_owned(),
            compensated: kept.name.clone(),
        });
    }
    Ok(from_slot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_record;

    /// The bytes a post carries: the same as the release before wrote for
    /// the same call (its `Intent`), so either reads the other's posts.
    #[test]
    fn a_command_is_stored_as_before() {
        assert_eq!(
            encode_record(&Command::Pause),
            [crate::codec::FORMAT_VERSION, 1]
        );
        assert_eq!(
            encode_record(&Command::Terminate { rollback: true }),
            [crate::codec::FORMAT_VERSION, 3, 1]
        );
        assert_eq!(
            encode_record(&Command::Restart {
                from: Some("b".into())
            }),
            [crate::codec::FORMAT_VERSION, 4, 1, 1, b'b']
        );
        assert_eq!(
            encode_record(&Command::RetryRollback),
            [crate::codec::FORMAT_VERSION, 5]
        );
        assert_eq!(
            encode_record(&Command::ChildEnded {
                child: "p.c".into()
            }),
            [crate::codec::FORMAT_VERSION, 6, 3, b'p', b'.', b'c']
        );
        let last = encode_record(&Command::ParentResumed);
        assert_eq!(last, [crate::codec::FORMAT_VERSION, 9]);
        assert_eq!(u32::from(last[1]), Command::KINDS - 1);
        assert!(crate::codec::from_newer_release(
            &[crate::codec::FORMAT_VERSION, 10],
            0,
            Command::KINDS
        ));
    }

    #[test]
    fn every_operation_a_refusal_names_crosses_processes() {
        let commands = [
            Command::Event {
                event_type: "e".into(),
                payload: Payload::Json(b"null".to_vec()),
                event_id: None,
            },
            Command::Pause,
            Command::Resume,
            Command::Terminate { rollback: false },
            Command::Terminate { rollback: true },
            Command::Restart { from: None },
            Command::RetryRollback,
            Command::ChildEnded {
                child: "p.c".into(),
            },
            Command::Recall {
                cause: crate::error::failure::Failure::new(
                    crate::error::failure::FailureKind::Workflow,
                    "no",
                ),
            },
            Command::ParentPaused,
            Command::ParentResumed,
        ];
        for command in &commands {
            let operation = command.operation();
            assert_eq!(operation_named(operation), Some(operation), "{command:?}");
        }
        assert_eq!(operation_named(RECORD_MORE), Some(RECORD_MORE));
        assert_eq!(operation_named("fly it"), None);
    }
}
