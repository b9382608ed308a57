//! The index entry of an instance: what `list()` shows, derived from its
//! journal. It may lag the journal (it is written without waiting for a
//! flush) and is rebuilt on open wherever it does.

use serde::{Deserialize, Serialize};

use super::facts::Facts;
use super::state::{InstanceState, SlotState};
use crate::codec::encode_record;
use crate::error::failure::Failure;
use crate::model::status::Status;
use crate::store::{IndexFacts, IndexRow, QueueFacts};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Summary {
    pub(crate) workflow: String,
    /// `Compensated` is written as `Complete`, the status the release
    /// before knows; the facts say which (`Facts::status`).
    #[serde(serialize_with = "status_as_before")]
    pub(crate) status: Status,
    pub(crate) created_at: u64,
    pub(crate) updated_at: u64,
    pub(crate) finished_at: Option<u64>,
    pub(crate) failure: Option<Failure>,
    pub(crate) rollback_failure: Option<Failure>,
    /// The journal record this summary reflects.
    pub(crate) last_seq: u64,
}

impl Summary {
    pub(crate) fn of(state: &InstanceState, last_seq: u64) -> Summary {
        Summary {
            workflow: state.workflow.clone(),
            status: state.status,
            created_at: state.created_at,
            updated_at: state.updated_at,
            finished_at: state.finished_at,
            failure: state.failure.clone(),
            rollback_failure: state.rollback.as_ref().and_then(|p| p.failure.clone()),
            last_seq,
        }
    }
}

/// A status as the release before reads it.
fn status_as_before<S: serde::Serializer>(status: &Status, to: S) -> Result<S::Ok, S::Error> {
    match status {
        Status::Compensated => Status::Complete.serialize(to),
        status => status.serialize(to),
    }
}

/// When an instance that only waits is due, for the store's timer index
/// (`IndexRow::wake`): the earliest of its sleeps' wake times and its
/// event waits' deadlines (`true`: a deadline), or 0 (due now) when an
/// event one of its waits waits for came. `None` when no time wakes it:
/// it does not run, or a wait of it waits for a child (the child's end
/// wakes it; start-up resumes it, as it resumes whatever has no timer).
pub(crate) fn next_wake(state: &InstanceState) -> Option<(u64, bool)> {
    let child = state
        .slots
        .values()
        .any(|slot| matches!(slot.state, SlotState::ChildRunning { .. }));
    // Only an instance all of whose branches wait: one that is `Running`
    // with a branch asleep has a step to resume at start-up, which skips
    // the instances whose timer is filed (`Store::active_entries_by`).
    if state.status != Status::Waiting || child {
        return None;
    }
    waits_until(state)
}

/// When the waits of an instance are over, whatever its status (see
/// [`next_wake`]): a paused one's too.
pub(crate) fn waits_until(state: &InstanceState) -> Option<(u64, bool)> {
    let mut wake: Option<(u64, bool)> = None;
    for slot in state.slots.values() {
        let at = match &slot.state {
            SlotState::Sleeping { wake_at } => (*wake_at, false),
            SlotState::Waiting {
                event_type,
                deadline,
            } => {
                if state.pending.values().any(|e| &e.event_type == event_type) {
                    return Some((0, false));
                }
                if *deadline == u64::MAX {
                    continue;
                }
                (*deadline, true)
            }
            _ => continue,
        };
        if wake.is_none_or(|w| at < w) {
            wake = Some(at);
        }
    }
    wake
}

/// An instance's whole index entry, encoded: its summary and its facts.
pub(crate) struct Indexed {
    wake: Option<(u64, bool)>,
    summary: Summary,
    encoded: Vec<u8>,
    facts: Facts,
    facts_encoded: Vec<u8>,
}

impl Indexed {
    /// The entry of `state`, folded from its records up to `last_seq`.
    pub(crate) fn of(state: &InstanceState, last_seq: u64) -> Indexed {
        let mut indexed = Indexed::new(Summary::of(state, last_seq), Facts::of(state));
        indexed.wake = next_wake(state);
        indexed
    }

    pub(crate) fn new(summary: Summary, facts: Facts) -> Indexed {
        Indexed {
            wake: None,
            encoded: encode_record(&summary),
            facts_encoded: encode_record(&facts),
            summary,
            facts,
        }
    }

    /// The store's index entry.
    pub(crate) fn row(&self) -> IndexRow<'_> {
        let summary = &self.summary;
        IndexRow {
            summary: &self.encoded,
            workflow: &summary.workflow,
            status: summary.status.label(),
            active: summary.status.resumes_on_open(),
            wake: self.wake,
            facts: Some(IndexFacts {
                encoded: &self.facts_encoded,
                created_at: summary.created_at,
                finished_at: summary.finished_at,
                parent: self.facts.parent.as_deref(),
                tags: &self.facts.tags,
                rollback_failed: summary.rollback_failure.is_some(),
                failed_compensation: self.facts.failed_compensation,
                queue: self.facts.queue.as_ref().map(|spot| QueueFacts {
                    queue: &spot.queue,
                    key: spot.key.as_deref(),
                    priority: spot.priority,
                    taken: spot.taken,
                }),
            }),
        }
    }
}
