//! The metrics a workflow run moves, as the README's table documents them,
//! read through a recorder installed for this test binary alone
//! (`metrics-util`'s debugging recorder: the library installs none).

#[path = "support/helpers.rs"]
mod helpers;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use saga_runtime::Engine;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;

use helpers::within;

static CHARGES: AtomicU32 = AtomicU32::new(0);

#[step(name = "reserve", rollback = release)]
async fn reserve(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(1)
}

#[rollback]
async fn release(ctx: RollbackContext<'_, u64>) -> Result<(), StepError> {
    let _ = ctx.key();
    Ok(())
}

/// Fails once (retried), then for good.
#[step(name = "charge", retries = 1, delay = "1 second")]
async fn charge(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    match CHARGES.fetch_add(1, Ordering::SeqCst) {
        0 => Err(StepError::retryable("busy")),
        _ => Err(StepError::fatal("declined")),
    }
}

#[workflow(name = "metered")]
async fn metered(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    reserve(&ctx).await?;
    charge(&ctx).await?;
    Ok(())
}

/// Counter and histogram values by metric name and labels (`name{k=v,..}`).
fn read(snapshotter: &Snapshotter) -> BTreeMap<String, f64> {
    let mut values = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        let value = match value {
            DebugValue::Counter(n) => n as f64,
            DebugValue::Gauge(g) => g.into_inner(),
            DebugValue::Histogram(samples) => samples.len() as f64,
        };
        values.insert(name, value);
    }
    values
}

#[tokio::test]
async fn a_run_moves_the_documented_counters() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");
    let engine = Engine::builder()
        .clock(TestClock::auto_advancing())
        .temporary()
        .unwrap();
    let run = engine.start(metered, "m-1", ()).await.unwrap();
    within("the run", run.result()).await.unwrap_err();
    engine.close().await;
    let values = read(&snapshotter);
    let get = |name: &str| {
        values
            .get(name)
            .copied()
            .unwrap_or_else(|| panic!("no {name} in {values:#?}"))
    };
    assert_eq!(
        get("saga_steps_started_total{step=reserve,workflow=metered}"),
        1.0
    );
    assert_eq!(
        get("saga_steps_completed_total{step=reserve,workflow=metered}"),
        1.0
    );
    assert_eq!(
        get("saga_steps_started_total{step=charge,workflow=metered}"),
        1.0
    );
    assert_eq!(
        get("saga_step_retries_total{step=charge,workflow=metered}"),
        1.0
    );
    assert_eq!(
        get("saga_steps_failed_total{step=charge,workflow=metered}"),
        1.0
    );
    // Step latencies: one sample per step that ended.
    assert_eq!(
        get("saga_step_duration_seconds{step=reserve,workflow=metered}"),
        1.0
    );
    assert_eq!(
        get("saga_step_duration_seconds{step=charge,workflow=metered}"),
        1.0
    );
    assert_eq!(
        get("saga_compensations_total{outcome=completed,step=reserve,workflow=metered}"),
        1.0
    );
    assert_eq!(
        get("saga_workflows_ended_total{status=errored,workflow=metered}"),
        1.0
    );
    assert_eq!(
        get("saga_workflow_duration_seconds{status=errored,workflow=metered}"),
        1.0
    );
    assert!(get("saga_flush_duration_seconds{}") >= 1.0);
    assert!(get("saga_flush_group_size{}") >= 1.0);
    // Every driver that began let go.
    assert_eq!(get("saga_drivers{}"), 0.0);
}
