//! Durable steps: outputs stored once, keys deterministic, retries and
//! backoff on the injectable clock, panics and timeouts as failed attempts.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saga_runtime::prelude::*;
use saga_runtime::{Error, EventKind, TestClock};

async fn engine_with(clock: TestClock) -> Engine {
    helpers::fresh(Engine::builder().clock(clock)).await
}

#[tokio::test]
async fn a_workflow_of_steps_completes_with_its_output() {
    let engine = helpers::fresh(Engine::builder()).await;
    let wf = workflow_fn("sum", |ctx: WorkflowContext, n: u64| async move {
        let a = ctx
            .step(
                "one",
                StepConfig::default(),
                move |_| async move { Ok(n + 1) },
            )
            .await?;
        let b = ctx
            .step(
                "two",
                StepConfig::default(),
                move |_| async move { Ok(a * 2) },
            )
            .await?;
        Ok::<_, WorkflowError>(b)
    });
    let run = engine.start(wf, "sum-1", 4).await.unwrap();
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

#[tokio::test]
async fn keys_are_deterministic_and_the_same_on_every_attempt() {
    let clock = TestClock::auto_advancing();
    let engine = engine_with(clock).await;
    let seen: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
    let seen2 = seen.clone();
    let wf = workflow_fn("keys", move |ctx: WorkflowContext, (): ()| {
        let seen = seen2.clone();
        async move {
            for _ in 0..2 {
                let seen = seen.clone();
                ctx.step_with_context("charge", StepConfig::default(), move |step| {
                    let seen = seen.clone();
                    async move {
                        seen.lock()
                            .unwrap()
                            .push((step.key().to_string(), step.attempt()));
                        if step.attempt() < 3 {
                            Err(StepError::retryable("flaky"))
                        } else {
                            Ok(())
                        }
                    }
                })
                .await?;
            }
            Ok::<_, WorkflowError>(())
        }
    });
    engine
        .start(wf, "t-1", ())
        .await
        .unwrap()
        .result()
        .await
        .unwrap();
    let seen = seen.lock().unwrap().clone();
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

#[tokio::test]
async fn fatal_errors_skip_retries_and_fail_the_workflow() {
    let engine = engine_with(TestClock::auto_advancing()).await;
    let attempts = Arc::new(AtomicU32::new(0));
    let a = attempts.clone();
    let wf = workflow_fn("fatal", move |ctx: WorkflowContext, (): ()| {
        let a = a.clone();
        async move {
            ctx.step("pay", StepConfig::default(), move |_| {
                a.fetch_add(1, Ordering::SeqCst);
                async { Err::<(), _>(StepError::fatal("card declined")) }
            })
            .await?;
            Ok::<_, WorkflowError>(())
        }
    });
    let err = engine
        .start(wf, "f-1", ())
        .await
        .unwrap()
        .result()
        .await
        .unwrap_err();
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
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
    let engine = engine_with(TestClock::auto_advancing()).await;
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

#[tokio::test]
async fn backoff_delays_are_as_configured_on_the_test_clock() {
    for (backoff, expected) in [
        (Backoff::Constant, [1, 1, 1]),
        (Backoff::Linear, [1, 2, 3]),
        (Backoff::Exponential, [1, 2, 4]),
    ] {
        let clock = TestClock::auto_advancing();
        let engine = engine_with(clock.clone()).await;
        let times: Arc<Mutex<Vec<std::time::SystemTime>>> = Arc::default();
        let t = times.clone();
        let c = clock.clone();
        let wf = workflow_fn("backoff", move |ctx: WorkflowContext, (): ()| {
            let t = t.clone();
            let c = c.clone();
            async move {
                let config = StepConfig::default()
                    .retries(3)
                    .delay(Duration::from_secs(1))
                    .backoff(backoff);
                ctx.step("flaky", config, move |_| {
                    t.lock().unwrap().push(saga_runtime::Clock::now(&c));
                    async { Err::<(), _>(StepError::retryable("down")) }
                })
                .await?;
                Ok::<_, WorkflowError>(())
            }
        });
        let err = engine.start(wf, "b-1", ()).await.unwrap().result().await;
        assert!(err.is_err());
        let times = times.lock().unwrap().clone();
        let gaps: Vec<u64> = times
            .windows(2)
            .map(|w| w[1].duration_since(w[0]).unwrap().as_secs())
            .collect();
        assert_eq!(gaps, expected, "{backoff:?}");
    }
}

#[tokio::test]
async fn an_attempt_that_takes_too_long_times_out_on_the_clock() {
    let clock = TestClock::new();
    let engine = engine_with(clock.clone()).await;
    let wf = workflow_fn("slow", |ctx: WorkflowContext, (): ()| async move {
        let config = StepConfig::default()
            .retries(0)
            .timeout(Duration::from_secs(30));
        ctx.step("hang", config, |_| async {
            std::future::pending::<()>().await;
            Ok(())
        })
        .await?;
        Ok::<_, WorkflowError>(())
    });
    let run = engine.start(wf, "s-1", ()).await.unwrap();
    // Wait until the attempt is running, then let 30 seconds pass.
    while !run
        .history()
        .await
        .unwrap()
        .iter()
        .any(|e| matches!(e.kind, EventKind::StepStarted { .. }))
    {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    clock.advance(Duration::from_secs(31));
    let err = run.result().await.unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
}

#[tokio::test]
async fn a_caught_step_error_does_not_fail_the_workflow() {
    let engine = engine_with(TestClock::auto_advancing()).await;
    let wf = workflow_fn("caught", |ctx: WorkflowContext, (): ()| async move {
        let r = ctx
            .step("maybe", StepConfig::default().retries(0), |_| async {
                Err::<u32, _>(StepError::retryable("nope"))
            })
            .await;
        Ok::<_, WorkflowError>(r.is_err())
    });
    assert!(
        engine
            .start(wf, "c-1", ())
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
                saga_runtime::EventKind::StepStarted { step, .. } => Some(step),
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
