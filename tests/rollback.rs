//! Saga rollback, rule by rule, as the seeds define it.
//!
//! Every test records what the compensations were given (step, output,
//! cause, key, attempt) in a log outside the engine, and checks the
//! lifecycle events the engine stored.

#[path = "support/helpers.rs"]
mod helpers;

use std::fmt::Debug;
use std::future::{Future, pending};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use saga_runtime::prelude::*;
use saga_runtime::{BoxFuture, Error, EventKind, FailureKind, Instance, ListFilter, TestClock};
use tokio::sync::{Notify, mpsc};

/// Bounds every wait of a test, so a broken rule fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(30);

/// What one attempt of a compensation was given.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Call {
    step: &'static str,
    output: Option<String>,
    cause: String,
    key: String,
    attempt: u32,
}

type Calls = Arc<Mutex<Vec<Call>>>;

fn calls(log: &Calls) -> Vec<Call> {
    log.lock().unwrap().clone()
}

fn steps_compensated(log: &Calls) -> Vec<&'static str> {
    calls(log).into_iter().map(|c| c.step).collect()
}

async fn engine() -> Engine {
    helpers::fresh(Engine::builder().clock(TestClock::auto_advancing())).await
}

async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Polls `condition` every few real milliseconds, at most [`PATIENCE`].
async fn wait_until<F: Future<Output = bool>>(what: &str, condition: impl Fn() -> F) {
    bounded(what, async {
        while !condition().await {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
}

/// A compensation that records its call and succeeds.
fn logged<T>(log: &Calls, step: &'static str) -> RollbackRegistration<T>
where
    T: Debug + Send + 'static + for<'de> Deserialize<'de>,
{
    logged_then(log, step, StepConfig::default(), |_| Ok(()))
}

/// A compensation that records its call, then answers as `outcome` says
/// for that attempt.
fn logged_then<T>(
    log: &Calls,
    step: &'static str,
    config: StepConfig,
    outcome: impl Fn(u32) -> Result<(), StepError> + Send + Sync + 'static,
) -> RollbackRegistration<T>
where
    T: Debug + Send + 'static + for<'de> Deserialize<'de>,
{
    let log = log.clone();
    let outcome = Arc::new(outcome);
    RollbackRegistration::new(config, move |input: RollbackInput<T>| {
        let log = log.clone();
        let outcome = outcome.clone();
        Box::pin(async move {
            let ctx = input.context();
            log.lock().unwrap().push(Call {
                step,
                output: ctx.output().map(|o| format!("{o:?}")),
                cause: ctx.cause().to_string(),
                key: ctx.key().to_string(),
                attempt: ctx.attempt(),
            });
            outcome(ctx.attempt())
        }) as BoxFuture<Result<(), StepError>>
    })
}

async fn kinds(instance: &Instance) -> Vec<EventKind> {
    instance
        .history()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

/// The events from `RollbackStarted` on (empty if rollback never started).
fn rollback_tail(kinds: &[EventKind]) -> Vec<EventKind> {
    let start = kinds
        .iter()
        .position(|k| matches!(k, EventKind::RollbackStarted { .. }))
        .unwrap_or(kinds.len());
    kinds[start..].to_vec()
}

fn is_rollback_event(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::RollbackStarted { .. }
            | EventKind::RollbackStepStarted { .. }
            | EventKind::RollbackStepCompleted { .. }
            | EventKind::RollbackStepFailed { .. }
            | EventKind::RollbackCompleted
            | EventKind::RollbackFailed { .. }
    )
}

fn started(step: &str) -> EventKind {
    EventKind::RollbackStepStarted {
        step: step.into(),
        occurrence: 0,
    }
}

fn completed(step: &str) -> EventKind {
    EventKind::RollbackStepCompleted {
        step: step.into(),
        occurrence: 0,
    }
}

/// The failure the instance ended with; panics if it did not end `Errored`.
async fn failed_with(
    instance: &Instance,
) -> (saga_runtime::Failure, Option<saga_runtime::Failure>) {
    match bounded("the result", instance.result::<u64>()).await {
        Err(Error::WorkflowFailed {
            failure,
            rollback_failure,
            ..
        }) => (*failure, rollback_failure.map(|f| *f)),
        other => panic!("expected the instance to fail, got {other:?}"),
    }
}

// Rule: sequential steps are compensated in reverse start order, each given
// its stored output.
#[tokio::test]
async fn sequential_steps_are_compensated_in_reverse_start_order() {
    let engine = engine().await;
    let log = Calls::default();
    let l = log.clone();
    let wf = workflow_fn("sequential", move |ctx: WorkflowContext, (): ()| {
        let log = l.clone();
        async move {
            let reserve = StepConfig::default();
            let a: u64 = ctx
                .step_with_rollback(
                    "reserve",
                    reserve,
                    |_| async { Ok(1) },
                    logged(&log, "reserve"),
                )
                .await?;
            let b: u64 = ctx
                .step_with_rollback(
                    "charge",
                    reserve,
                    move |_| async move { Ok(a + 1) },
                    logged(&log, "charge"),
                )
                .await?;
            ctx.step_with_rollback(
                "ship",
                reserve,
                move |_| async move { Ok(b + 1) },
                logged(&log, "ship"),
            )
            .await?;
            Err::<u64, _>(WorkflowError::new("the carrier went bankrupt"))
        }
    });
    let run = engine.start(wf, "seq-1", ()).await.unwrap();
    let (failure, rollback_failure) = failed_with(&run).await;
    assert_eq!(failure.message(), "the carrier went bankrupt");
    assert_eq!(rollback_failure, None);
    assert_eq!(steps_compensated(&log), ["ship", "charge", "reserve"]);
    let outputs: Vec<_> = calls(&log).into_iter().map(|c| c.output).collect();
    assert_eq!(
        outputs,
        [Some("3".to_string()), Some("2".into()), Some("1".into())]
    );
    let tail = rollback_tail(&kinds(&run).await);
    let completions: Vec<_> = tail
        .iter()
        .filter(|k| matches!(k, EventKind::RollbackStepCompleted { .. }))
        .cloned()
        .collect();
    assert_eq!(
        completions,
        [completed("ship"), completed("charge"), completed("reserve")]
    );
    assert_eq!(run.status().await.unwrap(), Status::Errored);
}

// Rule: with parallel steps the order is reverse *start* (call) order, not
// reverse completion order: `join!(a, b)` where b finishes first still
// compensates b, then a.
#[tokio::test]
async fn parallel_steps_are_compensated_in_reverse_call_order_not_completion_order() {
    let engine = engine().await;
    let log = Calls::default();
    let release_a = Arc::new(Notify::new());
    let (l, r) = (log.clone(), release_a.clone());
    let wf = workflow_fn("parallel", move |ctx: WorkflowContext, (): ()| {
        let (log, release_a) = (l.clone(), r.clone());
        async move {
            let a = ctx.step_with_rollback(
                "a",
                StepConfig::default(),
                move |_| {
                    let release_a = release_a.clone();
                    async move {
                        release_a.notified().await;
                        Ok(10u64)
                    }
                },
                logged(&log, "a"),
            );
            let b = ctx.step_with_rollback(
                "b",
                StepConfig::default(),
                |_| async { Ok(20u64) },
                logged(&log, "b"),
            );
            let (a, b) = tokio::join!(a, b);
            let _ = (a?, b?);
            Err::<u64, _>(WorkflowError::new(
                "both legs booked, then the trip was cancelled",
            ))
        }
    });
    let mut events = engine.subscribe();
    let run = engine.start(wf, "par-1", ()).await.unwrap();
    // Let `a` finish only once `b`'s completion is durable.
    bounded("b to complete", async {
        loop {
            let event = events.recv().await.unwrap();
            if event.instance == "par-1"
                && matches!(&event.kind, EventKind::StepCompleted { step, .. } if step == "b")
            {
                break;
            }
        }
    })
    .await;
    release_a.notify_one();
    failed_with(&run).await;

    let history = kinds(&run).await;
    let completed_at = |name: &str| {
        history
            .iter()
            .position(|k| matches!(k, EventKind::StepCompleted { step, .. } if step == name))
            .unwrap()
    };
    assert!(
        completed_at("b") < completed_at("a"),
        "the test needs b to complete first: {history:?}"
    );
    assert_eq!(steps_compensated(&log), ["b", "a"]);
    let outputs: Vec<_> = calls(&log).into_iter().map(|c| c.output).collect();
    assert_eq!(outputs, [Some("20".to_string()), Some("10".into())]);
}

// Rule: a failed step with a handler is eligible; its handler gets no
// output, completed ones get theirs.
#[tokio::test]
async fn a_failed_step_is_compensated_with_no_output() {
    let engine = engine().await;
    let log = Calls::default();
    let l = log.clone();
    let wf = workflow_fn("failed-step", move |ctx: WorkflowContext, (): ()| {
        let log = l.clone();
        async move {
            ctx.step_with_rollback(
                "debit",
                StepConfig::default(),
                |_| async { Ok(7u64) },
                logged(&log, "debit"),
            )
            .await?;
            ctx.step_with_rollback(
                "credit",
                StepConfig::default(),
                |_| async { Err::<u64, _>(StepError::fatal("account closed")) },
                logged(&log, "credit"),
            )
            .await?;
            Ok::<u64, WorkflowError>(0)
        }
    });
    let run = engine.start(wf, "failed-1", ()).await.unwrap();
    let (failure, _) = failed_with(&run).await;
    assert_eq!(
        failure.kind(),
        &FailureKind::Step {
            step: "credit".into()
        }
    );
    assert!(failure.message().contains("account closed"), "{failure}");
    let got = calls(&log);
    assert_eq!(
        got.iter()
            .map(|c| (c.step, c.output.clone()))
            .collect::<Vec<_>>(),
        [("credit", None), ("debit", Some("7".to_string()))]
    );
}

// Rule: a step error the workflow catches does not start rollback.
#[tokio::test]
async fn a_caught_step_error_does_not_start_rollback() {
    let engine = engine().await;
    let log = Calls::default();
    let l = log.clone();
    let wf = workflow_fn("caught", move |ctx: WorkflowContext, (): ()| {
        let log = l.clone();
        async move {
            let paid: u64 = ctx
                .step_with_rollback(
                    "charge",
                    StepConfig::default(),
                    |_| async { Ok(5) },
                    logged(&log, "charge"),
                )
                .await?;
            let coupon = ctx
                .step_with_rollback(
                    "apply-coupon",
                    StepConfig::default(),
                    |_| async { Err::<u64, _>(StepError::fatal("coupon expired")) },
                    logged(&log, "apply-coupon"),
                )
                .await
                .unwrap_or(0);
            Ok::<u64, WorkflowError>(paid + coupon)
        }
    });
    let run = engine.start(wf, "caught-1", ()).await.unwrap();
    assert_eq!(bounded("the result", run.result()).await.unwrap(), 5);
    assert_eq!(run.status().await.unwrap(), Status::Complete);
    assert!(calls(&log).is_empty(), "{:?}", calls(&log));
    let history = kinds(&run).await;
    assert!(
        history
            .iter()
            .any(|k| matches!(k, EventKind::StepFailed { step, .. } if step == "apply-coupon"))
    );
    assert!(!history.iter().any(is_rollback_event), "{history:?}");
    assert_eq!(history.last(), Some(&EventKind::InstanceCompleted));
}

// Rule: a step whose error was caught is still compensated (with no output)
// when the workflow later fails for another reason.
#[tokio::test]
async fn a_caught_failed_step_is_compensated_when_the_workflow_fails_later() {
    let engine = engine().await;
    let log = Calls::default();
    let l = log.clone();
    let wf = workflow_fn("caught-then-fail", move |ctx: WorkflowContext, (): ()| {
        let log = l.clone();
        async move {
            ctx.step_with_rollback(
                "charge",
                StepConfig::default(),
                |_| async { Ok(5u64) },
                logged(&log, "charge"),
            )
            .await?;
            // The payment provider may have captured the charge before the
            // step failed: its compensation must still run.
            let _caught = ctx
                .step_with_rollback(
                    "capture",
                    StepConfig::default(),
                    |_| async { Err::<u64, _>(StepError::fatal("gateway timeout")) },
                    logged(&log, "capture"),
                )
                .await;
            ctx.step_with_rollback(
                "reserve",
                StepConfig::default(),
                |_| async { Ok(9u64) },
                logged(&log, "reserve"),
            )
            .await?;
            Err::<u64, _>(WorkflowError::new("fraud check rejected the order"))
        }
    });
    let run = engine.start(wf, "caught-2", ()).await.unwrap();
    let (failure, _) = failed_with(&run).await;
    assert_eq!(failure.message(), "fraud check rejected the order");
    let got: Vec<_> = calls(&log)
        .into_iter()
        .map(|c| (c.step, c.output))
        .collect();
    assert_eq!(
        got,
        [
            ("reserve", Some("9".to_string())),
            ("capture", None),
            ("charge", Some("5".to_string())),
        ]
    );
}

// Rule: rollback starts only when the workflow is about to end `Errored`:
// a workflow that returns Ok compensates nothing.
#[tokio::test]
async fn a_successful_workflow_runs_no_compensation() {
    let engine = engine().await;
    let log = Calls::default();
    let l = log.clone();
    let wf = workflow_fn("ok", move |ctx: WorkflowContext, (): ()| {
        let log = l.clone();
        async move {
            let n: u64 = ctx
                .step_with_rollback(
                    "one",
                    StepConfig::default(),
                    |_| async { Ok(1) },
                    logged(&log, "one"),
                )
                .await?;
            Ok::<u64, WorkflowError>(n)
        }
    });
    let run = engine.start(wf, "ok-1", ()).await.unwrap();
    assert_eq!(bounded("the result", run.result()).await.unwrap(), 1);
    assert!(calls(&log).is_empty());
    assert!(!kinds(&run).await.iter().any(is_rollback_event));
}

// Rule: a failing workflow with no compensation registered ends `Errored`
// without any rollback event.
#[tokio::test]
async fn a_failure_without_handlers_ends_errored_without_rollback_events() {
    let engine = engine().await;
    let wf = workflow_fn("no-handlers", |ctx: WorkflowContext, (): ()| async move {
        ctx.step("one", StepConfig::default(), |_| async { Ok(1u64) })
            .await?;
        Err::<u64, _>(WorkflowError::new("nothing to undo"))
    });
    let run = engine.start(wf, "plain-1", ()).await.unwrap();
    let (failure, rollback_failure) = failed_with(&run).await;
    assert_eq!(failure.message(), "nothing to undo");
    assert_eq!(rollback_failure, None);
    let history = kinds(&run).await;
    assert!(!history.iter().any(is_rollback_event), "{history:?}");
    assert_eq!(
        history.last(),
        Some(&EventKind::InstanceErrored {
            error: "nothing to undo".into()
        })
    );
    assert_eq!(run.info().await.unwrap().rollback_failure, None);
}

// Rule: a panicking workflow body is a failure like a returned error: the
// started steps are compensated.
#[tokio::test]
async fn a_panicking_workflow_is_rolled_back() {
    let engine = engine().await;
    let log = Calls::default();
    let l = log.clone();
    let wf = workflow_fn("panics", move |ctx: WorkflowContext, (): ()| {
        let log = l.clone();
        async move {
            let n: u64 = ctx
                .step_with_rollback(
                    "one",
                    StepConfig::default(),
                    |_| async { Ok(1) },
                    logged(&log, "one"),
                )
                .await?;
            if n == 1 {
                panic!("invariant broken: n = {n}");
            }
            Ok::<u64, WorkflowError>(n)
        }
    });
    let run = engine.start(wf, "panic-1", ()).await.unwrap();
    let (failure, _) = failed_with(&run).await;
    assert_eq!(failure.kind(), &FailureKind::Panic);
    assert!(
        failure.message().contains("invariant broken: n = 1"),
        "{failure}"
    );
    let got = calls(&log);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].step, "one");
    assert_eq!(got[0].cause, failure.message());
    assert_eq!(run.status().await.unwrap(), Status::Errored);
}

// Rule: a compensation that exhausts its own retries (its own delay and
// backoff, on the engine's clock) is recorded as failed; the compensations
// of earlier-started steps do not run; the instance's error stays the
// original one, the rollback failure recorded beside it.
#[tokio::test]
async fn a_compensation_that_gives_up_stops_the_rest_and_keeps_the_original_error() {
    let clock = TestClock::auto_advancing();
    let engine = helpers::fresh(Engine::builder().clock(clock.clone())).await;
    let log = Calls::default();
    let attempt_times: Arc<Mutex<Vec<SystemTime>>> = Arc::default();
    let (l, times, c) = (log.clone(), attempt_times.clone(), clock.clone());
    let wf = workflow_fn("gives-up", move |ctx: WorkflowContext, (): ()| {
        let (log, times, clock) = (l.clone(), times.clone(), c.clone());
        async move {
            ctx.step_with_rollback(
                "first",
                StepConfig::default(),
                |_| async { Ok(1u64) },
                logged(&log, "first"),
            )
            .await?;
            let refund = StepConfig::default()
                .retries(3)
                .delay(Duration::from_secs(10))
                .backoff(Backoff::Exponential);
            ctx.step_with_rollback(
                "second",
                StepConfig::default(),
                |_| async { Ok(2u64) },
                logged_then(&log, "second", refund, move |_| {
                    times.lock().unwrap().push(saga_runtime::Clock::now(&clock));
                    Err(StepError::retryable("refund service down"))
                }),
            )
            .await?;
            ctx.step_with_rollback(
                "third",
                StepConfig::default(),
                |_| async { Ok(3u64) },
                logged(&log, "third"),
            )
            .await?;
            Err::<u64, _>(WorkflowError::new("the original error"))
        }
    });
    let run = engine.start(wf, "gives-up-1", ()).await.unwrap();
    let (failure, rollback_failure) = failed_with(&run).await;

    assert_eq!(failure.message(), "the original error");
    assert_eq!(failure.kind(), &FailureKind::Workflow);
    let rollback_failure = rollback_failure.expect("the rollback failure is recorded");
    assert_eq!(
        rollback_failure.kind(),
        &FailureKind::Rollback {
            step: "second".into()
        }
    );
    assert!(
        rollback_failure.message().contains("refund service down"),
        "{rollback_failure}"
    );

    // 1 attempt + 3 retries, then nothing of "first".
    assert_eq!(
        calls(&log)
            .iter()
            .map(|c| (c.step, c.attempt))
            .collect::<Vec<_>>(),
        [
            ("third", 1),
            ("second", 1),
            ("second", 2),
            ("second", 3),
            ("second", 4)
        ]
    );
    let times = attempt_times.lock().unwrap().clone();
    let delays: Vec<_> = times
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).unwrap().as_secs())
        .collect();
    assert_eq!(delays, [10, 20, 40], "exponential from 10 s");

    let info = run.info().await.unwrap();
    assert_eq!(info.status, Status::Errored);
    assert_eq!(info.failure.as_ref(), Some(&failure));
    assert_eq!(info.rollback_failure.as_ref(), Some(&rollback_failure));

    let tail = rollback_tail(&kinds(&run).await);
    assert_eq!(
        tail,
        [
            EventKind::RollbackStarted {
                cause: "the original error".into()
            },
            started("third"),
            completed("third"),
            started("second"),
            EventKind::RollbackStepFailed {
                step: "second".into(),
                occurrence: 0,
                error: "refund service down".into(),
            },
            EventKind::RollbackFailed {
                step: "second".into(),
                error: rollback_failure.message().into(),
            },
            EventKind::InstanceErrored {
                error: "the original error".into()
            },
        ]
    );
}

// Rule: a fatal error from a compensation skips its remaining retries.
#[tokio::test]
async fn a_fatal_compensation_error_skips_its_retries() {
    let engine = engine().await;
    let log = Calls::default();
    let l = log.clone();
    let wf = workflow_fn("fatal-refund", move |ctx: WorkflowContext, (): ()| {
        let log = l.clone();
        async move {
            ctx.step_with_rollback(
                "first",
                StepConfig::default(),
                |_| async { Ok(1u64) },
                logged(&log, "first"),
            )
            .await?;
            ctx.step_with_rollback(
                "second",
                StepConfig::default(),
                |_| async { Ok(2u64) },
                logged_then(&log, "second", StepConfig::default().retries(5), |_| {
                    Err(StepError::fatal("refund refused"))
                }),
            )
            .await?;
            Err::<u64, _>(WorkflowError::new("boom"))
        }
    });
    let run = engine.start(wf, "fatal-rb-1", ()).await.unwrap();
    let (failure, rollback_failure) = failed_with(&run).await;
    assert_eq!(failure.message(), "boom");
    assert!(rollback_failure.is_some());
    assert_eq!(
        calls(&log)
            .iter()
            .map(|c| (c.step, c.attempt))
            .collect::<Vec<_>>(),
        [("second", 1)]
    );
}

// Rule: every handler gets the cause, and its own key
// `"{instance}:rollback:{step}"` (`#n` from the second occurrence on), the
// same on every attempt.
#[tokio::test]
async fn compensations_get_the_cause_and_their_own_stable_key() {
    let engine = engine().await;
    let log = Calls::default();
    let l = log.clone();
    let wf = workflow_fn("keys", move |ctx: WorkflowContext, (): ()| {
        let log = l.clone();
        async move {
            for n in 0..3u64 {
                let retry_once = StepConfig::default()
                    .retries(2)
                    .delay(Duration::from_secs(1));
                ctx.step_with_rollback(
                    "charge",
                    StepConfig::default(),
                    move |_| async move { Ok(n) },
                    logged_then(&log, "charge", retry_once, |attempt| {
                        if attempt == 1 {
                            Err(StepError::retryable("flaky"))
                        } else {
                            Ok(())
                        }
                    }),
                )
                .await?;
            }
            ctx.step("check", StepConfig::default(), |_| async {
                Err::<(), _>(StepError::fatal("limit exceeded"))
            })
            .await?;
            Ok::<u64, WorkflowError>(0)
        }
    });
    let run = engine.start(wf, "keys-1", ()).await.unwrap();
    let (failure, _) = failed_with(&run).await;
    let got = calls(&log);
    let expected: Vec<_> = [
        ("keys-1:rollback:charge#2", "2"),
        ("keys-1:rollback:charge#1", "1"),
        ("keys-1:rollback:charge", "0"),
    ]
    .into_iter()
    .flat_map(|(key, output)| {
        (1..=2).map(move |attempt| (key.to_string(), Some(output.to_string()), attempt))
    })
    .collect();
    assert_eq!(
        got.iter()
            .map(|c| (c.key.clone(), c.output.clone(), c.attempt))
            .collect::<Vec<_>>(),
        expected
    );
    assert!(failure.message().contains("limit exceeded"), "{failure}");
    for call in &got {
        assert_eq!(call.cause, failure.message());
    }
    // The occurrence is in the events too.
    let occurrences: Vec<_> = kinds(&run)
        .await
        .into_iter()
        .filter_map(|k| match k {
            EventKind::RollbackStepCompleted { occurrence, .. } => Some(occurrence),
            _ => None,
        })
        .collect();
    assert_eq!(occurrences, [2, 1, 0]);
}

// Rule: the lifecycle events come in order, stored in history and sent to
// subscribers (after they are durable), the instance's end last.
#[tokio::test]
async fn lifecycle_events_are_stored_and_streamed_in_order() {
    let engine = engine().await;
    let log = Calls::default();
    let l = log.clone();
    let wf = workflow_fn("events", move |ctx: WorkflowContext, (): ()| {
        let log = l.clone();
        async move {
            ctx.step_with_rollback(
                "a",
                StepConfig::default(),
                |_| async { Ok(1u64) },
                logged(&log, "a"),
            )
            .await?;
            ctx.step("no-undo", StepConfig::default(), |_| async { Ok(2u64) })
                .await?;
            ctx.step_with_rollback(
                "b",
                StepConfig::default(),
                |_| async { Ok(3u64) },
                logged(&log, "b"),
            )
            .await?;
            Err::<u64, _>(WorkflowError::new("stop"))
        }
    });
    let mut subscription = engine.subscribe();
    let run = engine.start(wf, "events-1", ()).await.unwrap();
    let streamed = bounded("the streamed end", async {
        let mut seen = Vec::new();
        loop {
            let event = subscription.recv().await.unwrap();
            if event.instance != "events-1" {
                continue;
            }
            let last = event.kind.is_terminal();
            seen.push(event);
            if last {
                return seen;
            }
        }
    })
    .await;
    failed_with(&run).await;

    let expected = [
        EventKind::RollbackStarted {
            cause: "stop".into(),
        },
        started("b"),
        completed("b"),
        started("a"),
        completed("a"),
        EventKind::RollbackCompleted,
        EventKind::InstanceErrored {
            error: "stop".into(),
        },
    ];
    let history = run.history().await.unwrap();
    let history_kinds: Vec<_> = history.iter().map(|e| e.kind.clone()).collect();
    assert_eq!(rollback_tail(&history_kinds), expected);
    // The stream is the stored history, event for event, in order.
    assert_eq!(streamed, history);
    let seqs: Vec<_> = streamed.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..streamed.len() as u64).collect::<Vec<_>>());
}

/// A step body that tells the test it began, then never finishes.
fn blocks_forever(
    began: mpsc::UnboundedSender<&'static str>,
    name: &'static str,
    runs: Arc<AtomicU32>,
) -> impl FnMut(IdempotencyKey) -> BoxFuture<Result<u64, StepError>> + Send + 'static {
    move |_| {
        runs.fetch_add(1, Ordering::SeqCst);
        let _ = began.send(name);
        Box::pin(pending())
    }
}

// Rule: `terminate_with_rollback()` on an instance blocked in a step
// compensates its started steps in reverse order (the blocked one with no
// output) and ends it `Terminated`.
#[tokio::test]
async fn terminate_with_rollback_during_a_step_compensates_and_terminates() {
    let engine = engine().await;
    let log = Calls::default();
    let runs = Arc::new(AtomicU32::new(0));
    let (began_tx, mut began) = mpsc::unbounded_channel();
    let (l, r) = (log.clone(), runs.clone());
    let wf = workflow_fn("terminate-step", move |ctx: WorkflowContext, (): ()| {
        let (log, runs, began_tx) = (l.clone(), r.clone(), began_tx.clone());
        async move {
            ctx.step_with_rollback(
                "book-flight",
                StepConfig::default(),
                |_| async { Ok(1u64) },
                logged(&log, "book-flight"),
            )
            .await?;
            ctx.step_with_rollback(
                "book-hotel",
                StepConfig::default(),
                |_| async { Ok(2u64) },
                logged(&log, "book-hotel"),
            )
            .await?;
            ctx.step_with_rollback(
                "book-car",
                StepConfig::default(),
                blocks_forever(began_tx, "book-car", runs),
                logged(&log, "book-car"),
            )
            .await?;
            Ok::<u64, WorkflowError>(0)
        }
    });
    let run = engine.start(wf, "term-1", ()).await.unwrap();
    assert_eq!(bounded("the step", began.recv()).await, Some("book-car"));
    bounded("terminate", run.terminate_with_rollback())
        .await
        .unwrap();

    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    match bounded("the result", run.result()).await {
        Err(Error::Terminated {
            rollback_failure: None,
            ..
        }) => {}
        other => panic!("expected Terminated, got {other:?}"),
    }
    let got: Vec<_> = calls(&log)
        .into_iter()
        .map(|c| (c.step, c.output, c.cause))
        .collect();
    let cause = "terminated by user".to_string();
    assert_eq!(
        got,
        [
            ("book-car", None, cause.clone()),
            ("book-hotel", Some("2".into()), cause.clone()),
            ("book-flight", Some("1".into()), cause.clone()),
        ]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let history = kinds(&run).await;
    assert_eq!(history.last(), Some(&EventKind::InstanceTerminated));
    assert!(history.contains(&EventKind::RollbackCompleted));
    assert!(
        !history
            .iter()
            .any(|k| matches!(k, EventKind::StepCompleted { step, .. } if step == "book-car"))
    );
}

// Rule: `terminate_with_rollback()` on an instance waiting for an event
// compensates the steps it started.
#[tokio::test]
async fn terminate_with_rollback_during_an_event_wait_compensates_and_terminates() {
    // A clock that stands still: the wait must not time out on its own.
    let engine = helpers::fresh(Engine::builder().clock(TestClock::new())).await;
    let log = Calls::default();
    let l = log.clone();
    let wf = workflow_fn("terminate-wait", move |ctx: WorkflowContext, (): ()| {
        let log = l.clone();
        async move {
            ctx.step_with_rollback(
                "hold-seat",
                StepConfig::default(),
                |_| async { Ok(1u64) },
                logged(&log, "hold-seat"),
            )
            .await?;
            ctx.step_with_rollback(
                "hold-meal",
                StepConfig::default(),
                |_| async { Ok(2u64) },
                logged(&log, "hold-meal"),
            )
            .await?;
            let approved: bool = ctx
                .wait_for_event("wait-approval", "approval", "7 days")
                .await?;
            Ok::<u64, WorkflowError>(u64::from(approved))
        }
    });
    let run = engine.start(wf, "term-2", ()).await.unwrap();
    wait_until("the event wait", || async {
        run.status().await.unwrap() == Status::Waiting
            && kinds(&run)
                .await
                .iter()
                .any(|k| matches!(k, EventKind::EventWaitStarted { .. }))
    })
    .await;
    bounded("terminate", run.terminate_with_rollback())
        .await
        .unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    assert!(matches!(
        bounded("the result", run.result()).await,
        Err(Error::Terminated { .. })
    ));
    assert_eq!(steps_compensated(&log), ["hold-meal", "hold-seat"]);
    let tail = rollback_tail(&kinds(&run).await);
    assert_eq!(
        tail.first(),
        Some(&EventKind::RollbackStarted {
            cause: "terminated by user".into()
        })
    );
    assert_eq!(
        &tail[tail.len() - 2..],
        [EventKind::RollbackCompleted, EventKind::InstanceTerminated]
    );
}

// Rule: a step still in flight when the workflow fails is eligible (it
// started), gets no output, and never runs again.
#[tokio::test]
async fn a_step_in_flight_when_the_workflow_fails_is_compensated_and_never_rerun() {
    let engine = engine().await;
    let log = Calls::default();
    let runs = Arc::new(AtomicU32::new(0));
    let (began_tx, mut began) = mpsc::unbounded_channel();
    let (l, r) = (log.clone(), runs.clone());
    let wf = workflow_fn("in-flight", move |ctx: WorkflowContext, (): ()| {
        let (log, runs, began_tx) = (l.clone(), r.clone(), began_tx.clone());
        async move {
            let slow = ctx.step_with_rollback(
                "slow",
                StepConfig::default(),
                blocks_forever(began_tx.clone(), "slow", runs),
                logged(&log, "slow"),
            );
            let fails = ctx.step_with_rollback(
                "fails",
                StepConfig::default(),
                move |_| {
                    let began_tx = began_tx.clone();
                    async move {
                        let _ = began_tx.send("fails");
                        Err::<u64, _>(StepError::fatal("out of stock"))
                    }
                },
                logged(&log, "fails"),
            );
            let (a, b) = tokio::try_join!(slow, fails)?;
            Ok::<u64, WorkflowError>(a + b)
        }
    });
    let run = engine.start(wf, "flight-1", ()).await.unwrap();
    let (failure, _) = failed_with(&run).await;
    assert!(failure.message().contains("out of stock"), "{failure}");
    let got: Vec<_> = calls(&log)
        .into_iter()
        .map(|c| (c.step, c.output))
        .collect();
    assert_eq!(got, [("fails", None), ("slow", None)]);
    // "fails" began, so did "slow" (or it was started and stopped before its
    // first attempt); it never runs again.
    let mut seen = Vec::new();
    while let Ok(name) = began.try_recv() {
        seen.push(name);
    }
    assert!(seen.contains(&"fails"), "{seen:?}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(runs.load(Ordering::SeqCst) <= 1);
    let history = kinds(&run).await;
    assert!(
        !history.iter().any(|k| matches!(
            k,
            EventKind::StepCompleted { step, .. } | EventKind::StepFailed { step, .. } if step == "slow"
        )),
        "{history:?}"
    );
}

// Rule: a step called (started) and not yet running when the workflow
// fails is eligible too: its compensation runs with no output.
#[tokio::test]
async fn a_step_called_just_before_the_failure_is_compensated() {
    let engine = engine().await;
    let log = Calls::default();
    let runs = Arc::new(AtomicU32::new(0));
    let (began_tx, _began) = mpsc::unbounded_channel();
    let (l, r) = (log.clone(), runs.clone());
    let wf = workflow_fn("called-only", move |ctx: WorkflowContext, (): ()| {
        let (log, runs, began_tx) = (l.clone(), r.clone(), began_tx.clone());
        async move {
            ctx.step_with_rollback(
                "first",
                StepConfig::default(),
                |_| async { Ok(1u64) },
                logged(&log, "first"),
            )
            .await?;
            let _started = ctx.step_with_rollback(
                "second",
                StepConfig::default(),
                blocks_forever(began_tx, "second", runs),
                logged(&log, "second"),
            );
            Err::<u64, _>(WorkflowError::new("gave up right after calling it"))
        }
    });
    let run = engine.start(wf, "called-1", ()).await.unwrap();
    failed_with(&run).await;
    let got: Vec<_> = calls(&log)
        .into_iter()
        .map(|c| (c.step, c.output))
        .collect();
    assert_eq!(got, [("second", None), ("first", Some("1".into()))]);
    assert!(runs.load(Ordering::SeqCst) <= 1);
}

// Rule: the instance shows `RollingBack` while a compensation runs.
#[tokio::test]
async fn the_status_is_rolling_back_while_a_compensation_runs() {
    let engine = engine().await;
    let (entered_tx, mut entered) = mpsc::unbounded_channel::<()>();
    let release = Arc::new(Notify::new());
    let finished = Arc::new(AtomicU32::new(0));
    let (r, f) = (release.clone(), finished.clone());
    let wf = workflow_fn("slow-undo", move |ctx: WorkflowContext, (): ()| {
        let (release, finished, entered_tx) = (r.clone(), f.clone(), entered_tx.clone());
        async move {
            let undo = RollbackRegistration::new(
                StepConfig::default(),
                move |_input: RollbackInput<u64>| {
                    let (release, finished, entered_tx) =
                        (release.clone(), finished.clone(), entered_tx.clone());
                    Box::pin(async move {
                        let _ = entered_tx.send(());
                        release.notified().await;
                        finished.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    }) as BoxFuture<Result<(), StepError>>
                },
            );
            ctx.step_with_rollback(
                "reserve",
                StepConfig::default(),
                |_| async { Ok(1u64) },
                undo,
            )
            .await?;
            Err::<u64, _>(WorkflowError::new("boom"))
        }
    });
    let run = engine.start(wf, "rolling-1", ()).await.unwrap();
    bounded("the compensation to start", entered.recv())
        .await
        .unwrap();
    assert_eq!(run.status().await.unwrap(), Status::RollingBack);
    let listed = engine
        .list(&ListFilter::all().status(Status::RollingBack))
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        ["rolling-1"]
    );
    // The compensation's start is durable (and streamed) before it runs.
    assert!(kinds(&run).await.contains(&started("reserve")));
    assert_eq!(finished.load(Ordering::SeqCst), 0);
    // Terminating an instance that is rolling back is refused.
    assert!(matches!(
        run.terminate().await,
        Err(Error::InvalidState {
            status: Status::RollingBack,
            ..
        })
    ));

    release.notify_one();
    let (failure, _) = failed_with(&run).await;
    assert_eq!(failure.message(), "boom");
    assert_eq!(finished.load(Ordering::SeqCst), 1);
    assert_eq!(run.status().await.unwrap(), Status::Errored);
}

// Rule: `terminate_with_rollback()` on a paused instance (no code running)
// rebuilds the compensations by replaying the workflow from history, runs
// them in reverse order, and runs no forward step again.
#[tokio::test]
async fn terminate_with_rollback_of_a_paused_instance_replays_to_compensate() {
    let engine = engine().await;
    let log = Calls::default();
    let forward_runs = Arc::new(AtomicU32::new(0));
    let release_b = Arc::new(Notify::new());
    let (entered_tx, mut entered) = mpsc::unbounded_channel::<()>();
    let (l, f, r) = (log.clone(), forward_runs.clone(), release_b.clone());
    let wf = workflow_fn("paused", move |ctx: WorkflowContext, (): ()| {
        let (log, runs, release_b, entered_tx) =
            (l.clone(), f.clone(), r.clone(), entered_tx.clone());
        async move {
            let counted = |value: u64| {
                let runs = runs.clone();
                move |_| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    async move { Ok(value) }
                }
            };
            ctx.step_with_rollback("a", StepConfig::default(), counted(1), logged(&log, "a"))
                .await?;
            let runs_b = runs.clone();
            ctx.step_with_rollback(
                "b",
                StepConfig::default(),
                move |_| {
                    runs_b.fetch_add(1, Ordering::SeqCst);
                    let (release_b, entered_tx) = (release_b.clone(), entered_tx.clone());
                    async move {
                        let _ = entered_tx.send(());
                        release_b.notified().await;
                        Ok(2u64)
                    }
                },
                logged(&log, "b"),
            )
            .await?;
            ctx.step_with_rollback("c", StepConfig::default(), counted(3), logged(&log, "c"))
                .await?;
            Ok::<u64, WorkflowError>(0)
        }
    });
    let run = engine.start(wf, "paused-1", ()).await.unwrap();
    bounded("step b", entered.recv()).await.unwrap();
    run.pause().await.unwrap();
    release_b.notify_one();
    // It stops at its next step boundary, before "c" starts.
    wait_until("the pause", || async {
        kinds(&run)
            .await
            .iter()
            .any(|k| matches!(k, EventKind::StepCompleted { step, .. } if step == "b"))
            && engine.list(&ListFilter::all()).await.unwrap()[0].status == Status::Paused
    })
    .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(run.status().await.unwrap(), Status::Paused);

    bounded("terminate", run.terminate_with_rollback())
        .await
        .unwrap();
    bounded("the end", async {
        while !run.status().await.unwrap().is_terminal() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    let got: Vec<_> = calls(&log)
        .into_iter()
        .map(|c| (c.step, c.output))
        .collect();
    assert_eq!(
        got,
        [("b", Some("2".to_string())), ("a", Some("1".to_string()))]
    );
    assert_eq!(
        forward_runs.load(Ordering::SeqCst),
        2,
        "a and b ran once each, c never"
    );
    assert_eq!(
        kinds(&run).await.last(),
        Some(&EventKind::InstanceTerminated)
    );
}

#[tokio::test]
async fn retry_rollback_runs_the_compensations_that_gave_up_with_the_same_keys() {
    let engine = engine().await;
    // The refund API is down until the test fixes it.
    let down = Arc::new(Mutex::new(true));
    let keys = Arc::new(Mutex::new(Vec::new()));
    let (refund_down, refund_keys) = (down.clone(), keys.clone());
    let wf = workflow_fn("retry-rollback", move |ctx: WorkflowContext, (): ()| {
        let (down, keys) = (refund_down.clone(), refund_keys.clone());
        async move {
            let refund = RollbackRegistration::new(
                StepConfig::default().retries(0),
                move |input: RollbackInput<u64>| {
                    let (down, keys) = (down.clone(), keys.clone());
                    Box::pin(async move {
                        keys.lock().unwrap().push(input.context().key().to_string());
                        if *down.lock().unwrap() {
                            return Err(StepError::fatal("the refund API is down"));
                        }
                        Ok(())
                    }) as BoxFuture<Result<(), StepError>>
                },
            );
            ctx.step_with_rollback(
                "charge",
                StepConfig::default(),
                |_key| async { Ok(5u64) },
                refund,
            )
            .await?;
            Err::<(), _>(WorkflowError::new("out of stock"))
        }
    });
    let run = engine.start(wf, "retry-1", ()).await.unwrap();
    match bounded("the failure", run.result()).await {
        Err(Error::WorkflowFailed {
            failure,
            rollback_failure: Some(_),
            ..
        }) => assert!(failure.message().contains("out of stock")),
        other => panic!("expected a failed rollback, got {other:?}"),
    }

    *down.lock().unwrap() = false;
    bounded("the retry", run.retry_rollback()).await.unwrap();
    match bounded("the result", run.result()).await {
        Err(Error::WorkflowFailed {
            failure,
            rollback_failure: None,
            ..
        }) => assert!(
            failure.message().contains("out of stock"),
            "the original error stays"
        ),
        other => panic!("expected the rollback to have completed, got {other:?}"),
    }
    assert_eq!(
        *keys.lock().unwrap(),
        ["retry-1:rollback:charge", "retry-1:rollback:charge"],
        "the same key on the retry"
    );
    let kinds = kinds(&run).await;
    assert!(kinds.contains(&EventKind::RollbackRetried), "{kinds:?}");
    assert_eq!(
        kinds.last(),
        Some(&EventKind::InstanceErrored {
            error: "out of stock".into()
        })
    );

    let again = run.retry_rollback().await;
    assert!(
        matches!(again, Err(Error::InvalidState { .. })),
        "{again:?}"
    );
}

/// A control call that starts a driver right after `result()` saw the end
/// (its driver may not have let go yet) still gets the instance driven.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_rollback_right_after_the_end_is_driven() {
    let engine = engine().await;
    let down = Arc::new(Mutex::new(true));
    let refund_down = down.clone();
    let wf = workflow_fn("retry-at-once", move |ctx: WorkflowContext, (): ()| {
        let down = refund_down.clone();
        async move {
            let refund = RollbackRegistration::new(
                StepConfig::default().retries(0),
                move |_input: RollbackInput<u64>| {
                    let down = down.clone();
                    Box::pin(async move {
                        if *down.lock().unwrap() {
                            return Err(StepError::fatal("the refund API is down"));
                        }
                        Ok(())
                    }) as BoxFuture<Result<(), StepError>>
                },
            );
            ctx.step_with_rollback(
                "charge",
                StepConfig::default(),
                |_| async { Ok(5u64) },
                refund,
            )
            .await?;
            Err::<(), _>(WorkflowError::new("out of stock"))
        }
    });
    for i in 0..20 {
        *down.lock().unwrap() = true;
        let run = engine
            .start(wf.clone(), &format!("at-once-{i}"), ())
            .await
            .unwrap();
        let failed = bounded("the failure", run.result()).await;
        assert!(
            matches!(
                &failed,
                Err(Error::WorkflowFailed {
                    rollback_failure: Some(_),
                    ..
                })
            ),
            "{failed:?}"
        );
        *down.lock().unwrap() = false;
        bounded("the retry", run.retry_rollback()).await.unwrap();
        let ended = bounded("the retried rollback", run.result()).await;
        assert!(
            matches!(
                &ended,
                Err(Error::WorkflowFailed {
                    rollback_failure: None,
                    ..
                })
            ),
            "at-once-{i}: {ended:?}"
        );
    }
}
