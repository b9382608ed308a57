//! What operators alert on, through the `metrics` facade: no exporter is
//! forced on an application (install one, e.g. `metrics-exporter-prometheus`,
//! or serve `/metrics` from `saga_cli`'s admin endpoint). Without a
//! recorder installed every call here is a no-op.
//!
//! A leaf module: the journal says what each record it writes counts for
//! (`journal::metered`), so replay, reads and other workers' records are
//! never counted twice. Labels are
//! workflow, step and status names (literals of the code, so their number
//! is bounded), never instance ids. The README's "Metrics" table lists
//! every metric, its type and labels.

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
/// Instances in the store by status, when counted:
/// `saga_instances{status}` (gauge; `Engine::instance_counts`).
pub(crate) const INSTANCES: &str = "saga_instances";
/// Instances waiting for a slot of a queue, when counted:
/// `saga_queue_waiting{queue}` (gauge).
pub(crate) const QUEUE_WAITING: &str = "saga_queue_waiting";
/// Instances of a queue that left its wait and have not ended, when
/// counted: `saga_queue_started{queue}` (gauge).
pub(crate) const QUEUE_STARTED: &str = "saga_queue_started";
/// A store flush, in seconds: `saga_flush_duration_seconds`.
pub(crate) const FLUSH_DURATION: &str = "saga_flush_duration_seconds";
/// The writers one flush made durable: `saga_flush_group_size`.
pub(crate) const FLUSH_GROUP: &str = "saga_flush_group_size";
/// Instances of gone workers claimed: `saga_postgres_claims_total`.
pub(crate) const CLAIMS: &str = "saga_postgres_claims_total";
/// This worker's lease ran out under it: `saga_postgres_fenced_total`.
pub(crate) const FENCED: &str = "saga_postgres_fenced_total";
/// A write connection was made again: `saga_postgres_reconnects_total`.
pub(crate) const RECONNECTS: &str = "saga_postgres_reconnects_total";

/// Step `step` of `workflow` began.
pub(crate) fn step_started(workflow: &str, step: &str) {
    metrics::counter!(STEPS_STARTED, "workflow" => workflow.to_owned(), "step" => step.to_owned())
        .increment(1);
}

/// Step `step` of `workflow` completed (or, `completed` false, gave up)
/// `seconds` after it began.
pub(crate) fn step_ended(workflow: &str, step: &str, completed: bool, seconds: f64) {
    let (workflow, step) = (workflow.to_owned(), step.to_owned());
    metrics::histogram!(STEP_DURATION, "workflow" => workflow.clone(), "step" => step.clone())
        .record(seconds);
    let name = if completed {
        STEPS_COMPLETED
    } else {
        STEPS_FAILED
    };
    metrics::counter!(name, "workflow" => workflow, "step" => step).increment(1);
}

/// An attempt of step `step` of `workflow` failed and another is due.
pub(crate) fn step_retried(workflow: &str, step: &str) {
    metrics::counter!(STEP_RETRIES, "workflow" => workflow.to_owned(), "step" => step.to_owned())
        .increment(1);
}

/// The compensation of step `step` of `workflow` ended.
pub(crate) fn compensation_ended(workflow: &str, step: &str, completed: bool) {
    let outcome = if completed { "completed" } else { "failed" };
    metrics::counter!(
        COMPENSATIONS,
        "workflow" => workflow.to_owned(),
        "step" => step.to_owned(),
        "outcome" => outcome
    )
    .increment(1);
}

/// An instance of `workflow` was parked `Blocked`.
pub(crate) fn blocked(workflow: &str) {
    metrics::counter!(BLOCKED, "workflow" => workflow.to_owned()).increment(1);
}

/// An instance of `workflow` ended `status`, `seconds` after its creation.
pub(crate) fn instance_ended(workflow: &str, status: &'static str, seconds: f64) {
    metrics::histogram!(WORKFLOW_DURATION, "workflow" => workflow.to_owned(), "status" => status)
        .record(seconds);
    metrics::counter!(WORKFLOWS_ENDED, "workflow" => workflow.to_owned(), "status" => status)
        .increment(1);
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

/// One of the store's write connections was made again.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn reconnected() {
    metrics::counter!(RECONNECTS).increment(1);
}

/// The store-wide counts of `Engine::instance_counts`, as gauges: each
/// status's label and count, and each queue's waiting and started.
pub(crate) fn instance_counts<'a>(
    statuses: impl Iterator<Item = (&'static str, u64)>,
    queues: impl Iterator<Item = (&'a str, u64, u64)>,
) {
    for (status, n) in statuses {
        metrics::gauge!(INSTANCES, "status" => status).set(n as f64);
    }
    for (queue, waiting, started) in queues {
        metrics::gauge!(QUEUE_WAITING, "queue" => queue.to_owned()).set(waiting as f64);
        metrics::gauge!(QUEUE_STARTED, "queue" => queue.to_owned()).set(started as f64);
    }
}
