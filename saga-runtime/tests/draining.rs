//! Draining before a shutdown: `close_within` lets steps in flight record
//! their outcome, starts no new step, and what it stopped resumes on the
//! next open.

#[path = "support/child.rs"]
mod child;
#[path = "support/helpers.rs"]
mod helpers;

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use tokio::sync::Semaphore;

use child::DataDir;
use helpers::within;

/// What the steps report to the test, and the gate the slow one waits at.
struct Probe {
    slow_started: Semaphore,
    gate: Semaphore,
    slow_keys: Mutex<Vec<String>>,
    next_runs: AtomicU32,
}

impl Probe {
    fn new() -> std::sync::Arc<Probe> {
        std::sync::Arc::new(Probe {
            slow_started: Semaphore::new(0),
            gate: Semaphore::new(0),
            slow_keys: Mutex::default(),
            next_runs: AtomicU32::new(0),
        })
    }

    fn slow_keys(&self) -> Vec<String> {
        self.slow_keys.lock().unwrap().clone()
    }
}

#[step(name = "slow")]
async fn slow(key: IdempotencyKey, probe: Service<Probe>) -> Result<u64, StepError> {
    probe.slow_keys.lock().unwrap().push(key.to_string());
    probe.slow_started.add_permits(1);
    probe.gate.acquire().await.unwrap().forget();
    Ok(1)
}

#[step(name = "next")]
async fn next(key: IdempotencyKey, probe: Service<Probe>, n: u64) -> Result<u64, StepError> {
    let _ = key;
    probe.next_runs.fetch_add(1, Ordering::SeqCst);
    Ok(n + 1)
}

#[workflow(name = "drained")]
async fn drained(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    let n = slow(&ctx).await?;
    Ok(next(&ctx, n).await?)
}

fn open(dir: &DataDir, probe: &std::sync::Arc<Probe>) -> Engine {
    Engine::builder()
        .clock(TestClock::new())
        .provide_arc(probe.clone())
        .register(drained)
        .open(dir.path())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_in_flight_is_recorded_and_the_next_does_not_start() {
    let dir = DataDir::new("drain-finishes");
    let probe = Probe::new();
    let engine = open(&dir, &probe);
    drop(engine.start(drained, "drain-1", ()).await.unwrap());
    within("the slow step", probe.slow_started.acquire())
        .await
        .unwrap()
        .forget();

    let closing = tokio::spawn(engine.close_within(Duration::from_secs(30)));
    tokio::time::sleep(Duration::from_millis(5)).await;
    probe.gate.add_permits(1);
    assert!(
        within("the drain", closing).await.unwrap(),
        "drained in time"
    );
    assert_eq!(
        probe.next_runs.load(Ordering::SeqCst),
        0,
        "next never started"
    );

    let engine = open(&dir, &probe);
    let run = engine.instance("drain-1").await.unwrap();
    assert_eq!(within("the result", run.result::<u64>()).await.unwrap(), 2);
    assert_eq!(
        probe.slow_keys().len(),
        1,
        "the recorded step did not run again"
    );
    assert_eq!(probe.next_runs.load(Ordering::SeqCst), 1);
    let history = run.history().await.unwrap();
    assert!(
        !history.iter().any(|e| matches!(e.kind, EventKind::Paused)),
        "a drain records no pause"
    );
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_past_the_deadline_is_stopped_and_runs_again_with_its_key() {
    let dir = DataDir::new("drain-deadline");
    let probe = Probe::new();
    let engine = open(&dir, &probe);
    drop(engine.start(drained, "drain-2", ()).await.unwrap());
    within("the slow step", probe.slow_started.acquire())
        .await
        .unwrap()
        .forget();

    let drained_in_time = engine.close_within(Duration::from_millis(20)).await;
    assert!(!drained_in_time, "the slow step outlived the deadline");

    probe.gate.add_permits(1);
    let engine = open(&dir, &probe);
    let run = engine.instance("drain-2").await.unwrap();
    assert_eq!(within("the result", run.result::<u64>()).await.unwrap(), 2);
    let keys = probe.slow_keys();
    assert_eq!(keys.len(), 2, "stopped, then run again: {keys:?}");
    assert_eq!(keys[0], keys[1], "with the same idempotency key");
    assert_eq!(probe.next_runs.load(Ordering::SeqCst), 1);
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_while_draining_runs_on_the_next_open() {
    let dir = DataDir::new("drain-start");
    let probe = Probe::new();
    let engine = open(&dir, &probe);
    drop(engine.start(drained, "drain-3", ()).await.unwrap());
    within("the slow step", probe.slow_started.acquire())
        .await
        .unwrap()
        .forget();
    let closing = tokio::spawn({
        let engine = engine.clone();
        async move { engine.close_within(Duration::from_secs(30)).await }
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    // Stored, not run: the engine is draining.
    drop(engine.start(drained, "drain-4", ()).await.unwrap());
    assert_eq!(probe.slow_keys().len(), 1);
    probe.gate.add_permits(1);
    drop(engine);
    assert!(within("the drain", closing).await.unwrap());

    probe.gate.add_permits(1);
    let engine = open(&dir, &probe);
    for id in ["drain-3", "drain-4"] {
        let run = engine.instance(id).await.unwrap();
        assert_eq!(
            within("the result", run.result::<u64>()).await.unwrap(),
            2,
            "{id}"
        );
    }
    assert_eq!(
        probe.slow_keys().len(),
        2,
        "each instance's slow step ran once"
    );
    engine.close().await;
}
