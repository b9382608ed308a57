//! What each record this process writes counts for in the metrics
//! (`crate::metrics`): counted here, where a record is written, and never
//! where one is folded, so replay, reads and other workers' records are
//! not counted again.

use super::change::Change;
use super::state::InstanceState;
use crate::metrics;
use crate::model::status::Status;

/// Counts what record `change`, just written at `at`, says; `state` is the
/// instance after it, `before` its status before.
pub(crate) fn written(state: &InstanceState, before: Status, change: &Change, at: u64) {
    let workflow = state.workflow.as_str();
    let step = |slot: &u32| {
        state
            .slots
            .get(slot)
            .map(|s| (s.name.as_str(), s.began_at))
            .unwrap_or_default()
    };
    match change {
        Change::StepStarted { name, .. } => metrics::step_started(workflow, name),
        Change::StepCompleted { slot, .. } | Change::StepFailed { slot, .. } => {
            let (name, began) = step(slot);
            let completed = matches!(change, Change::StepCompleted { .. });
            metrics::step_ended(workflow, name, completed, seconds(began, at));
        }
        Change::StepRetrying { slot, .. } => metrics::step_retried(workflow, step(slot).0),
        Change::CompensationCompleted { slot } | Change::CompensationFailed { slot, .. } => {
            let completed = matches!(change, Change::CompensationCompleted { .. });
            metrics::compensation_ended(workflow, step(slot).0, completed);
        }
        Change::Blocked { .. } => metrics::blocked(workflow),
        _ => {}
    }
    if state.status.is_terminal() && !before.is_terminal() {
        let took = seconds(state.created_at, at);
        metrics::instance_ended(workflow, state.status.label(), took);
    }
}

/// Seconds from `from` to `to`, milliseconds of the engine clock.
fn seconds(from: u64, to: u64) -> f64 {
    to.saturating_sub(from) as f64 / 1000.0
}
