//! Durable steps: outputs stored once, keys deterministic, retries and
//! backoff on the injectable clock, panics and timeouts as failed attempts.
//!
//! The workflows are written with `#[workflow]` and `#[step]`, as users
//! write them, except in `a_panicking_step_is_a_failed_attempt`, which
//! keeps the hand-written API (`workflow_fn` and a `ctx.step` closure)
//! covered: its step is a closure whose future panics.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use saga_runtime::Error;
use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;

/// What the steps of one test saw, shared with them as a service.
struct Probe {
    /// The test's clock, to tell when each attempt ran.
    clock: TestClock,
    /// The key and attempt number of each attempt, in order.
    keys: Mutex<Vec<(String, u32)>>,
    /// How many attempts ran.
    attempts: AtomicU32,
    /// When each attempt ran, on the test's clock.
    times: Mutex<Vec<SystemTime>>,
}

impl Probe {
    /// Counts an attempt and records when it ran.
    fn attempted(&self) {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.times
            .lock()
            .unwrap()
            .push(saga_runtime::time::Clock::now(&self.clock));
    }
}

/// An engine on `clock`, with a fresh [`Probe`] as a service.
async fn engine_with(clock: TestClock) -> (Engine, Arc<Probe>) {
    let probe = Arc::new(Probe {
        clock: clock.clone(),
        keys: Mutex::default(),
        attempts: AtomicU32::new(0),
        times: Mutex::default(),
    });
    let engine = helpers::fresh(Engine::builder().clock(clock).provide_arc(probe.clone())).await;
    (engine, probe)
}

/// Adds one.
#[step(name = "one", read_only)]
async fn add_one(n: u64) -> Result<u64, StepError> {
    Ok(n + 1)
}

/// Doubles.
#[step(name = "two", read_only)]
async fn double(a: u64) -> Result<u64, StepError> {
    Ok(a * 2)
}

/// `(n + 1) * 2`, in two steps.
#[workflow(name = "sum")]
async fn sum(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let a = add_one(&ctx, n).await?;
    let b = double(&ctx, a).await?;
    Ok(b)
}

#[tokio::test]
async fn a_workflow_of_steps_completes_with_its_output() {
    let engine = helpers::fresh(Engine::builder()).await;
    let run = engine.start(sum, "sum-1", 4).await.unwrap();
    assert_eq!(run.result().await.unwrap(), 10);
    assert_eq!(run.status().await.unwrap(), Status::Complete);
    let kinds: Vec<_> = run
        .history()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(matches!(
        kinds.first(),
        Some(EventKind::InstanceCreated { .. })
    ));
    assert_eq!(kinds.last(), Some(&EventKind::InstanceCompleted));
}

/// Records its key and attempt number; fails its first two attempts.
#[step(name = "charge")]
async fn charge(step: StepContext, probe: Service<Probe>) -> Result<(), StepError> {
    probe
        .keys
        .lock()
        .unwrap()
        .push((step.key().to_string(), step.attempt()));
    if step.attempt() < 3 {
        Err(StepError::retryable("flaky"))
    } else {
        Ok(())
    }
}

/// Charges twice: occurrences 0 and 1 of "charge".
#[workflow(name = "keys")]
async fn keys(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    for _ in 0..2 {
        charge(&ctx).await?;
    }
    Ok(())
}

#[tokio::test]
async fn keys_are_deterministic_and_the_same_on_every_attempt() {
    let clock = TestClock::auto_advancing();
    let (engine, probe) = engine_with(clock).await;
    engine
        .start(keys, "t-1", ())
        .await
        .unwrap()
        .result()
        .await
        .unwrap();
    let seen = probe.keys.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            ("t-1:charge".to_string(), 1),
            ("t-1:charge".to_string(), 2),
            ("t-1:charge".to_string(), 3),
            ("t-1:charge#1".to_string(), 1),
            ("t-1:charge#1".to_string(), 2),
            ("t-1:charge#1".to_string(), 3),
        ]
    );
}

/// A card declined: fails for good on its first attempt.
#[step(name = "pay", read_only)]
async fn pay(probe: Service<Probe>) -> Result<(), StepError> {
    probe.attempted();
    Err(StepError::fatal("card declined"))
}

#[workflow(name = "fatal")]
async fn fatal(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    pay(&ctx).await?;
    Ok(())
}

#[tokio::test]
async fn fatal_errors_skip_retries_and_fail_the_workflow() {
    let (engine, probe) = engine_with(TestClock::auto_advancing()).await;
    let err = engine
        .start(fatal, "f-1", ())
        .await
        .unwrap()
        .result()
        .await
        .unwrap_err();
    assert_eq!(probe.attempts.load(Ordering::SeqCst), 1);
    match err {
        Error::WorkflowFailed { failure, .. } => {
            assert!(failure.message().contains("card declined"), "{failure}");
            assert_eq!(
                failure.kind(),
                &saga_runtime::FailureKind::Step { step: "pay".into() }
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_panicking_step_is_a_failed_attempt() {
    // Hand-written on purpose: a panic in the future of a `ctx.step` closure.
    let (engine, _) = engine_with(TestClock::auto_advancing()).await;
    let attempts = Arc::new(AtomicU32::new(0));
    let a = attempts.clone();
    let wf = workflow_fn("panics", move |ctx: WorkflowContext, (): ()| {
        let a = a.clone();
        async move {
            let v = ctx
                .step("boom", StepConfig::default().retries(2), move |_| {
                    let n = a.fetch_add(1, Ordering::SeqCst);
                    async move {
                        if n < 2 {
                            panic!("kaboom {n}");
                        }
                        Ok(n)
                    }
                })
                .await?;
            Ok::<_, WorkflowError>(v)
        }
    });
    let run = engine.start(wf, "p-1", ()).await.unwrap();
    assert_eq!(run.result().await.unwrap(), 2);
    let retries = run
        .history().await
        .unwrap()
        .into_iter()
        .filter(|e| matches!(&e.kind, EventKind::StepRetrying { error, .. } if error.contains("panicked: kaboom")))
        .count();
    assert_eq!(retries, 2);
}

/// Always down, retried 3 times with constant backoff from 1 second.
#[step(
    name = "flaky",
    read_only,
    retries = 3,
    delay = "1 second",
    backoff = "constant"
)]
async fn flaky_constant(probe: Service<Probe>) -> Result<(), StepError> {
    probe.attempted();
    Err(StepError::retryable("down"))
}

/// Always down, retried 3 times with linear backoff from 1 second.
#[step(
    name = "flaky",
    read_only,
    retries = 3,
    delay = "1 second",
    backoff = "linear"
)]
async fn flaky_linear(probe: Service<Probe>) -> Result<(), StepError> {
    probe.attempted();
    Err(StepError::retryable("down"))
}

/// Always down, retried 3 times with exponential backoff from 1 second.
#[step(
    name = "flaky",
    read_only,
    retries = 3,
    delay = "1 second",
    backoff = "exponential"
)]
async fn flaky_exponential(probe: Service<Probe>) -> Result<(), StepError> {
    probe.attempted();
    Err(StepError::retryable("down"))
}

#[workflow(name = "backoff")]
async fn backoff_constant(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    flaky_constant(&ctx).await?;
    Ok(())
}

#[workflow(name = "backoff")]
async fn backoff_linear(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    flaky_linear(&ctx).await?;
    Ok(())
}

#[workflow(name = "backoff")]
async fn backoff_exponential(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    flaky_exponential(&ctx).await?;
    Ok(())
}

/// Runs `workflow`, whose step always fails, on an auto-advancing clock
/// until it fails; the gaps between the step's attempts, in seconds.
async fn gaps_between_attempts(
    workflow: impl Workflow<Input = (), Output = ()> + Copy,
) -> Vec<u64> {
    let (engine, probe) = engine_with(TestClock::auto_advancing()).await;
    let err = engine
        .start(workflow, "b-1", ())
        .await
        .unwrap()
        .result()
        .await;
    assert!(err.is_err());
    let times = probe.times.lock().unwrap().clone();
    times
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).unwrap().as_secs())
        .collect()
}

#[tokio::test]
async fn backoff_delays_are_as_configured_on_the_test_clock() {
    for (backoff, gaps, expected) in [
        (
            Backoff::Constant,
            gaps_between_attempts(backoff_constant).await,
            [1, 1, 1],
        ),
        (
            Backoff::Linear,
            gaps_between_attempts(backoff_linear).await,
            [1, 2, 3],
        ),
        (
            Backoff::Exponential,
            gaps_between_attempts(backoff_exponential).await,
            [1, 2, 4],
        ),
    ] {
        assert_eq!(gaps, expected, "{backoff:?}");
    }
}

/// Never returns; one attempt of 30 seconds at most.
#[step(name = "hang", read_only, retries = 0, timeout = "30 seconds")]
async fn hang() -> Result<(), StepError> {
    std::future::pending::<()>().await;
    Ok(())
}

#[workflow(name = "slow")]
async fn hangs(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    hang(&ctx).await?;
    Ok(())
}

#[tokio::test]
async fn an_attempt_that_takes_too_long_times_out_on_the_clock() {
    let clock = TestClock::new();
    let (engine, _) = engine_with(clock.clone()).await;
    let run = engine.start(hangs, "s-1", ()).await.unwrap();
    // Once the attempt runs (its timeout set on the clock), let 30
    // seconds pass.
    helpers::quiet(&engine).await;
    assert!(
        helpers::kinds(&run)
            .await
            .iter()
            .any(|kind| matches!(kind, EventKind::StepStarted { .. }))
    );
    clock.advance(Duration::from_secs(31));
    let err = run.result().await.unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
}

/// Fails, with no retry.
#[step(name = "maybe", read_only, retries = 0)]
async fn maybe() -> Result<u32, StepError> {
    Err(StepError::retryable("nope"))
}

/// Catches the error of "maybe" and says whether there was one.
#[workflow(name = "caught")]
async fn caught(ctx: WorkflowContext, (): ()) -> Result<bool, WorkflowError> {
    let r = maybe(&ctx).await;
    Ok(r.is_err())
}

#[tokio::test]
async fn a_caught_step_error_does_not_fail_the_workflow() {
    let (engine, _) = engine_with(TestClock::auto_advancing()).await;
    assert!(
        engine
            .start(caught, "c-1", ())
            .await
            .unwrap()
            .result()
            .await
            .unwrap()
    );
}

mod joined {
    use super::*;

    #[step(name = "slow", read_only)]
    pub(super) async fn slow() -> Result<u64, StepError> {
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        Ok(1)
    }

    #[step(name = "fast", read_only)]
    pub(super) async fn fast() -> Result<u64, StepError> {
        Ok(2)
    }

    #[workflow(name = "joined")]
    pub(super) async fn joined(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
        let (a, b) = tokio::join!(slow(&ctx), fast(&ctx));
        Ok(a? + b?)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_records_steps_started_together_in_call_order() {
    let engine = helpers::fresh(Engine::builder()).await;
    for i in 0..20 {
        let run = engine
            .start(joined::joined, &format!("joined-{i}"), ())
            .await
            .unwrap();
        assert_eq!(run.result().await.unwrap(), 3);
        let started: Vec<String> = run
            .history()
            .await
            .unwrap()
            .into_iter()
            .filter_map(|e| match e.kind {
                saga_runtime::inspect::EventKind::StepStarted { step, .. } => Some(step),
                _ => None,
            })
            .collect();
        assert_eq!(
            started,
            ["slow", "fast"],
            "run {i}: in call order, not completion order"
        );
    }
}
