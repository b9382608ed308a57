//! The index entry of an instance: what `list()` shows, derived from its
//! journal. It may lag the journal (it is written without waiting for a
//! flush) and is rebuilt on open wherever it does.

use serde::{Deserialize, Serialize};

use super::state::InstanceState;
use crate::error::failure::Failure;
use crate::model::status::Status;
use crate::store::IndexRow;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Summary {
    pub(crate) workflow: String,
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

    /// The store's index entry of this summary, `encoded`.
    pub(crate) fn row<'a>(&'a self, encoded: &'a [u8]) -> IndexRow<'a> {
        IndexRow {
            summary: encoded,
            workflow: &self.workflow,
            status: self.status.label(),
            active: self.status.resumes_on_open(),
        }
    }
}
