//! What a workflow knows of its steps without running: the table of the
//! `#[step]` functions it calls, and how each rebuilds its compensation
//! from its start record. `terminate_with_rollback()` on a `Blocked`
//! instance compensates from it, without the changed workflow code.

use crate::codec::Payload;
use crate::workflow::compensation::{ErasedRollback, Registered, Unbuildable};
use crate::workflow::service::ServiceNeed;

/// A `#[step]` function as its workflow sees it: its name, the name
/// earlier releases gave it, its services, and its compensation from
/// history.
#[derive(Clone, Copy)]
pub struct StepNames {
    /// `name = ".."`.
    pub name: &'static str,
    /// `renamed_from = ".."`.
    pub renamed_from: Option<&'static str>,
    /// The services the step takes.
    pub services: &'static [ServiceNeed],
    /// The services its rollback handler takes.
    pub rollback_services: &'static [ServiceNeed],
    /// Its compensation from history alone, when it has one.
    pub rollback_from_history: Option<RebuildRollback>,
    /// `read_only`: no side effect worth a key (nor a rollback).
    pub read_only: bool,
}

/// The compensation of a started step, rebuilt from its start record
/// alone: how `terminate_with_rollback()` compensates a `Blocked` instance
/// without running the workflow code that no longer matches its history.
pub struct HistoryRollback(pub(crate) Box<dyn ErasedRollback>);

/// The inputs a step's start record stored (opaque to generated code).
pub struct StoredInputs<'a>(pub(crate) Option<&'a Payload>);

/// What a step's hidden type offers to rebuild its compensation from
/// history ([`StepNames::rollback_from_history`]).
pub type RebuildRollback = fn(StoredInputs<'_>) -> Result<HistoryRollback, String>;

/// The compensations of the started steps of `state`, rebuilt from their
/// start records with `table`, the `#[step]` functions the registered code
/// of `workflow` calls: a step found there by its recorded name (or the
/// name it was renamed from) gets its handler with its stored inputs; one
/// that is not, or whose inputs no longer decode, gets a stand-in that is
/// recorded as failed, naming it, for a person to undo by hand.
pub(crate) fn compensations_from_history(
    state: &crate::journal::InstanceState,
    table: &[StepNames],
    workflow: &str,
) -> Vec<Registered> {
    use crate::journal::{SlotKind, SlotState};
    let waits = state
        .slots
        .iter()
        .filter(|(_, r)| {
            r.kind == SlotKind::Event
                && r.has_rollback
                && matches!(r.state, SlotState::Received { .. })
        })
        .map(|(index, record)| {
            let handler = Box::new(Unbuildable(format!(
                "the compensation of wait {:?} is workflow code, which no longer replays; undo its effect by hand (by its idempotency key)",
                record.name
            )));
            Registered::erased(*index, &record.name, record.occurrence, record.generation, handler)
        });
    let steps = state
        .slots
        .iter()
        .filter(|(_, r)| r.kind == SlotKind::Step && r.has_rollback)
        .map(|(index, record)| {
            let name = record.name.as_str();
            let step = table
                .iter()
                .find(|t| t.name == name || t.renamed_from == Some(name));
            let handler: Box<dyn ErasedRollback> = match step.map(|t| t.rollback_from_history) {
                None => Box::new(Unbuildable(format!(
                    "the registered code of workflow {workflow:?} no longer calls a step named {name:?}; undo its effect by hand (by its idempotency key)"
                ))),
                Some(None) => Box::new(Unbuildable(format!(
                    "step {name:?} no longer has a rollback handler in the registered code; undo its effect by hand (by its idempotency key)"
                ))),
                Some(Some(rebuild)) => {
                    match rebuild(StoredInputs(record.input.as_ref())) {
                        Ok(rebuilt) => rebuilt.0,
                        Err(reason) => Box::new(Unbuildable(format!(
                            "the compensation of step {name:?} could not be rebuilt from history: {reason}"
                        ))),
                    }
                }
            };
            Registered::erased(*index, name, record.occurrence, record.generation, handler)
        });
    steps.chain(waits).collect()
}

/// What `#[step]` declares about a step function, carried by the hidden
/// type of the same name it generates (types and functions live in
/// different namespaces). A workflow reads it through `StepProbe`.
pub trait StepDefinition {
    /// The step's name and the name it had before, if renamed.
    const NAMES: StepNames;
}
