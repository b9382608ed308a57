//! What operators alert on, through the `metrics` facade: no exporter is
//! forced on an application (install one, e.g. `metrics-exporter-prometheus`,
//! or serve `/metrics` from `saga_cli`'s admin endpoint). Without a
//! recorder installed every call here is a no-op.
//!
//! Counted where a record is written (`Journal::write_cached`), so replay,
//! reads and other workers' records are never counted twice. Labels are
//! workflow, step and status names (literals of the code, so their number
//! is bounded), never instance ids. The README's "Metrics" table lists
//! every metric, its type and labels.

use crate::journal::{Change, InstanceState};
use crate::model::status::Status;

/// A step began: `saga_steps_started_total{workflow, step}`.
pub(crate) const STEPS_STARTED: &str = "saga_steps_started_total";
/// A step completed: `saga_steps_completed_total{workflow, step}`.
pub(crate) const STEPS_COMPLETED: &str = "saga_steps_completed_total";
/// A step gave up: `saga_steps_failed_total{workflow, step}`.
pub(crate) const STEPS_FAILED: &str = "saga_steps_failed_total";
/// An attempt failed and another is due: `saga_step_retries_total{workflow, step}`.
pub(crate) const STEP_RETRIES: &str = "saga_step_retries_total";
/// From a step's start to its completion or failure, in seconds (engine
/// clock): `saga_step_duration_seconds{workflow, step}`.
pub(crate) const STEP_DURATION: &str = "saga_step_duration_seconds";
/// A compensation ended: `saga_compensations_total{workflow, step, outcome}`,
/// `outcome` `completed` or `failed`.
pub(crate) const COMPENSATIONS: &str = "saga_compensations_total";
/// An instance ended: `saga_workflows_ended_total{workflow, status}`.
pub(crate) const WORKFLOWS_ENDED: &str = "saga_workflows_ended_total";
/// From an instance's creation to its end, in seconds (engine clock):
/// `saga_workflow_duration_seconds{workflow, status}`.
pub(crate) const WORKFLOW_DURATION: &str = "saga_workflow_duration_seconds";
/// Instances parked `Blocked`: `saga_instances_blocked_total{workflow}`.
pub(crate) const BLOCKED: &str = "saga_instances_blocked_total";
/// Drivers running in this process: `saga_drivers` (gauge).
pub(crate) const DRIVERS: &str = "saga_drivers";
/// A store flush, in seconds: `saga_flush_duration_seconds`.
pub(crate) const FLUSH_DURATION: &str = "saga_flush_duration_seconds";
/// The writers one flush made durable: `saga_flush_group_size`.
pub(crate) const FLUSH_GROUP: &str = "saga_flush_group_size";
/// Instances of gone workers claimed: `saga_postgres_claims_total`.
pub(crate) const CLAIMS: &str = "saga_postgres_claims_total";
/// This worker's lease ran out under it: `saga_postgres_fenced_total`.
pub(crate) const FENCED: &str = "saga_postgres_fenced_total";
/// The write connection was made again: `saga_postgres_reconnects_total`.
pub(crate) const RECONNECTS: &str = "saga_postgres_reconnects_total";

/// Counts what record `change`, just written at `at`, says; `state` is the
/// instance after it, `before` its status before.
pub(crate) fn written(state: &InstanceState, before: Status, change: &Change, at: u64) {
    let workflow = state.workflow.clone();
    let step = |slot: &u32| {
        state
            .slots
            .get(slot)
            .map(|s| (s.name.clone(), s.began_at))
            .unwrap_or_default()
    };
    match change {
        Change::StepStarted { name, .. } => {
            metrics::counter!(STEPS_STARTED, "workflow" => workflow, "step" => name.clone())
                .increment(1);
        }
        Change::StepCompleted { slot, .. } => {
            let (name, began) = step(slot);
            metrics::histogram!(STEP_DURATION, "workflow" => workflow.clone(), "step" => name.clone())
                .record(seconds(began, at));
            metrics::counter!(STEPS_COMPLETED, "workflow" => workflow, "step" => name).increment(1);
        }
        Change::StepFailed { slot, .. } => {
            let (name, began) = step(slot);
            metrics::histogram!(STEP_DURATION, "workflow" => workflow.clone(), "step" => name.clone())
                .record(seconds(began, at));
            metrics::counter!(STEPS_FAILED, "workflow" => workflow, "step" => name).increment(1);
        }
        Change::StepRetrying { slot, .. } => {
            let (name, _) = step(slot);
            metrics::counter!(STEP_RETRIES, "workflow" => workflow, "step" => name).increment(1);
        }
        Change::CompensationCompleted { slot } | Change::CompensationFailed { slot, .. } => {
            let (name, _) = step(slot);
            let outcome = match change {
                Change::CompensationCompleted { .. } => "completed",
                _ => "failed",
            };
            metrics::counter!(COMPENSATIONS, "workflow" => workflow, "step" => name, "outcome" => outcome)
                .increment(1);
        }
        Change::Blocked { .. } => {
            metrics::counter!(BLOCKED, "workflow" => workflow).increment(1);
        }
        _ => {}
    }
    if state.status.is_terminal() && !before.is_terminal() {
        let status = state.status.label();
        metrics::histogram!(WORKFLOW_DURATION, "workflow" => state.workflow.clone(), "status" => status)
            .record(seconds(state.created_at, at));
        metrics::counter!(WORKFLOWS_ENDED, "workflow" => state.workflow.clone(), "status" => status)
            .increment(1);
    }
}

/// A driver began (`1`) or let go (`-1`) of an instance here.
pub(crate) fn drivers(by: f64) {
    metrics::gauge!(DRIVERS).increment(by);
}

/// A flush made `group` writers durable in `took`.
pub(crate) fn flushed(took: std::time::Duration, group: usize) {
    metrics::histogram!(FLUSH_DURATION).record(took.as_secs_f64());
    metrics::histogram!(FLUSH_GROUP).record(group as f64);
}

/// This worker claimed `n` instances of gone workers.
pub(crate) fn claimed(n: usize) {
    if n > 0 {
        metrics::counter!(CLAIMS).increment(n as u64);
    }
}

/// This worker found its lease ran out.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn fenced() {
    metrics::counter!(FENCED).increment(1);
}

/// The store's write connection was made again.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn reconnected() {
    metrics::counter!(RECONNECTS).increment(1);
}

/// Seconds from `from` to `to`, milliseconds of the engine clock.
fn seconds(from: u64, to: u64) -> f64 {
    to.saturating_sub(from) as f64 / 1000.0
}
