//! `Engine::idle`: it returns only once everything a cause set off has
//! happened (no sleep, no polling in the test), it returns while what is
//! left waits on the outside (an event, the clock, a step the test
//! holds), and dropping it changes nothing.
//!
//! Each check reads state right after `idle` with no retry: an `idle` that
//! returned early fails it.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use tokio::sync::Semaphore;

use helpers::{quiet, within};

/// What the steps tell the test: how many ran, and a gate the test holds.
struct Probe {
    runs: AtomicU32,
    gate: Semaphore,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            runs: AtomicU32::new(0),
            gate: Semaphore::new(0),
        }
    }
}

#[step(name = "count", read_only)]
async fn count(probe: Service<Probe>) -> Result<u32, StepError> {
    Ok(probe.runs.fetch_add(1, Ordering::SeqCst) + 1)
}

#[step(name = "count-again", read_only)]
async fn count_again(probe: Service<Probe>) -> Result<u32, StepError> {
    Ok(probe.runs.fetch_add(1, Ordering::SeqCst) + 1)
}

/// Fails twice, then counts: two retry delays on the engine's clock.
#[step(name = "flaky", read_only, retries = 3, delay = "1 minute")]
async fn flaky(ctx: StepContext, probe: Service<Probe>) -> Result<u32, StepError> {
    if ctx.attempt() < 3 {
        return Err(StepError::retryable("not yet"));
    }
    Ok(probe.runs.fetch_add(1, Ordering::SeqCst) + 1)
}

/// Waits until the test lets it through.
#[step(name = "held", read_only)]
async fn held(probe: Service<Probe>) -> Result<(), StepError> {
    let _permit = probe.gate.acquire().await.map_err(StepError::fatal)?;
    Ok(())
}

/// Counts, sleeps a day, counts again.
#[workflow(name = "nap")]
async fn nap(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    count(&ctx).await?;
    ctx.sleep("a-day", "1 day").await?;
    Ok(count_again(&ctx).await?)
}

/// Twenty steps, each retried twice on its clock, as a child of its own.
#[workflow(name = "chain")]
async fn chain(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    let mut last = 0;
    for _ in 0..20 {
        last = flaky(&ctx).await?;
    }
    Ok(last)
}

/// Runs `chain` as a child.
#[workflow(name = "parent")]
async fn parent(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    Ok(ctx.child("the-chain", chain, ()).await?)
}

/// Waits for an approval, then counts.
#[workflow(name = "approval")]
async fn approval(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    let _: String = ctx.wait_for_event("approval", "approved", "7 days").await?;
    Ok(count(&ctx).await?)
}

/// Counts, waits on the test's gate, counts.
#[workflow(name = "gated")]
async fn gated(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    count(&ctx).await?;
    held(&ctx).await?;
    Ok(count_again(&ctx).await?)
}

async fn engine(clock: &TestClock, probe: &Arc<Probe>) -> Engine {
    helpers::fresh(
        Engine::builder()
            .clock(clock.clone())
            .register(chain)
            .provide_arc(probe.clone()),
    )
    .await
}

#[tokio::test]
async fn idle_returns_once_a_sleep_that_the_clock_ended_has_run_its_course() {
    let clock = TestClock::new();
    let probe = Arc::new(Probe::default());
    let engine = engine(&clock, &probe).await;
    let run = engine.start(nap, "nap-1", ()).await.unwrap();
    quiet(&engine).await;
    assert_eq!(probe.runs.load(Ordering::SeqCst), 1);
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    clock.advance(Duration::from_secs(24 * 60 * 60));
    quiet(&engine).await;
    assert_eq!(probe.runs.load(Ordering::SeqCst), 2);
    assert_eq!(run.status().await.unwrap(), Status::Complete);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_waits_for_a_child_and_every_retry_its_clock_lets_happen() {
    let clock = TestClock::auto_advancing_to_sleeps();
    let probe = Arc::new(Probe::default());
    let engine = engine(&clock, &probe).await;
    let run = engine.start(parent, "parent-1", ()).await.unwrap();
    if helpers::on_postgres() {
        // A child's end reaches its parent through the database's
        // notifications there, which `idle` does not see (its doc says so).
        within("the parent", run.result()).await.unwrap();
    }
    quiet(&engine).await;
    assert_eq!(run.status().await.unwrap(), Status::Complete);
    assert_eq!(probe.runs.load(Ordering::SeqCst), 20);
}

#[tokio::test]
async fn idle_returns_while_an_instance_waits_for_an_event_and_after_it_came() {
    let clock = TestClock::new();
    let probe = Arc::new(Probe::default());
    let engine = engine(&clock, &probe).await;
    let run = engine.start(approval, "approval-1", ()).await.unwrap();
    quiet(&engine).await;
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    engine
        .send_event("approval-1", "approved", &"yes")
        .await
        .unwrap();
    quiet(&engine).await;
    assert_eq!(run.status().await.unwrap(), Status::Complete);
    assert_eq!(probe.runs.load(Ordering::SeqCst), 1);
}

// A step body that waits on the test waits on the outside: `idle` returns,
// and once the test lets it through, waits for the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_returns_while_a_step_waits_on_the_test() {
    let clock = TestClock::new();
    let probe = Arc::new(Probe::default());
    let engine = engine(&clock, &probe).await;
    let run = engine.start(gated, "gated-1", ()).await.unwrap();
    quiet(&engine).await;
    assert_eq!(probe.runs.load(Ordering::SeqCst), 1);
    assert_eq!(run.status().await.unwrap(), Status::Running);
    probe.gate.add_permits(1);
    quiet(&engine).await;
    assert_eq!(probe.runs.load(Ordering::SeqCst), 2);
    assert_eq!(run.status().await.unwrap(), Status::Complete);
}

// Cancel safety: `idle` only looks, so a dropped one leaves nothing behind
// and the next one still waits for everything.
#[tokio::test]
async fn a_dropped_idle_changes_nothing() {
    let clock = TestClock::new();
    let probe = Arc::new(Probe::default());
    let engine = engine(&clock, &probe).await;
    let run = engine.start(nap, "nap-2", ()).await.unwrap();
    for _ in 0..3 {
        // Dropped at its first wait: the engine has a driver to run.
        let _ = tokio::time::timeout(Duration::ZERO, engine.idle()).await;
    }
    quiet(&engine).await;
    clock.advance(Duration::from_secs(24 * 60 * 60));
    let _ = tokio::time::timeout(Duration::ZERO, engine.idle()).await;
    quiet(&engine).await;
    assert_eq!(run.status().await.unwrap(), Status::Complete);
    assert_eq!(within("the result", run.result()).await.unwrap(), 2);
}
