//! Saga rollback, rule by rule, as the seeds define it.
//!
//! The workflows are written with `#[workflow]`, `#[step]` and
//! `#[rollback]`, as users write them. Every compensation records what it
//! was given (step, output, cause, key, attempt) in the test's [`Probe`], a
//! service the engine provides, and each test checks the lifecycle events
//! the engine stored.
//!
//! A workflow marked `rollback = "concurrent"` compensates in reverse
//! happens-before order; its tests (at the end) prove the overlap with a
//! barrier that opens only when both compensations run at once.
//!
//! One test stays on the hand-written API on purpose:
//! `sequential_steps_are_compensated_in_reverse_start_order` runs inline
//! steps (`ctx.step_with_rollback` in a `workflow_fn`) whose compensations
//! are built with `RollbackRegistration::new`, so that API keeps a test of
//! the basic rule.

#[path = "support/helpers.rs"]
mod helpers;

use std::fmt::Debug;
use std::future::pending;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use saga_runtime::prelude::*;
use saga_runtime::{BoxFuture, Error, EventKind, FailureKind, Instance, ListFilter, TestClock};
use tokio::sync::{Notify, mpsc};

use helpers::{kinds, wait_until, within};

/// What one attempt of a compensation was given.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Call {
    step: &'static str,
    output: Option<String>,
    cause: String,
    key: String,
    attempt: u32,
}

/// What a test's steps and compensations share with the test, provided to
/// its engine as a service: the log of compensation calls, and the
/// counters and gates of the tests that need them.
struct Probe {
    /// Every attempt of a compensation, in order.
    calls: Mutex<Vec<Call>>,
    /// Runs of the step bodies a test counts.
    runs: AtomicU32,
    /// Tells the test that a step body (or a compensation) began.
    began: mpsc::UnboundedSender<&'static str>,
    /// Holds a step body or a compensation until the test lets it go.
    release: Notify,
    /// Compensations that ran to their end after being let go.
    finished: AtomicU32,
    /// While set, the refund API is down.
    refund_down: AtomicBool,
    /// The engine's clock, and the times a compensation's attempts read on it.
    clock: TestClock,
    attempt_times: Mutex<Vec<SystemTime>>,
}

impl Probe {
    /// Records one attempt of `step`'s compensation; its attempt number.
    fn log<T: Debug>(&self, step: &'static str, ctx: &RollbackContext<'_, T>) -> u32 {
        self.calls.lock().unwrap().push(Call {
            step,
            output: ctx.output().map(|o| format!("{o:?}")),
            cause: ctx.cause().to_string(),
            key: ctx.key().to_string(),
            attempt: ctx.attempt(),
        });
        ctx.attempt()
    }
}

fn calls(probe: &Probe) -> Vec<Call> {
    probe.calls.lock().unwrap().clone()
}

fn steps_compensated(probe: &Probe) -> Vec<&'static str> {
    calls(probe).into_iter().map(|c| c.step).collect()
}

/// A test's engine, its probe (provided to the engine), and the receiving
/// end of the probe's `began`.
struct World {
    engine: Engine,
    probe: Arc<Probe>,
    began: mpsc::UnboundedReceiver<&'static str>,
}

async fn world() -> World {
    world_on(TestClock::auto_advancing()).await
}

async fn world_on(clock: TestClock) -> World {
    let (began_tx, began) = mpsc::unbounded_channel();
    let probe = Arc::new(Probe {
        calls: Mutex::default(),
        runs: AtomicU32::new(0),
        began: began_tx,
        release: Notify::new(),
        finished: AtomicU32::new(0),
        refund_down: AtomicBool::new(false),
        clock: clock.clone(),
        attempt_times: Mutex::default(),
    });
    let engine = helpers::fresh(Engine::builder().clock(clock).provide_arc(probe.clone())).await;
    World {
        engine,
        probe,
        began,
    }
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
    instance: &(impl AsRef<Instance> + ?Sized),
) -> (saga_runtime::Failure, Option<saga_runtime::Failure>) {
    let instance: &Instance = instance.as_ref();
    match within("the result", instance.result::<u64>()).await {
        Err(Error::WorkflowFailed {
            failure,
            rollback_failure,
            ..
        }) => (*failure, rollback_failure.map(|f| *f)),
        other => panic!("expected the instance to fail, got {other:?}"),
    }
}

// The compensations that record their call and succeed, one per step name.

#[rollback]
async fn undo_a(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("a", &ctx);
    Ok(())
}

#[rollback]
async fn undo_b(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("b", &ctx);
    Ok(())
}

#[rollback]
async fn undo_c(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("c", &ctx);
    Ok(())
}

#[rollback]
async fn undo_debit(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("debit", &ctx);
    Ok(())
}

#[rollback]
async fn undo_credit(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("credit", &ctx);
    Ok(())
}

#[rollback]
async fn undo_charge(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("charge", &ctx);
    Ok(())
}

#[rollback]
async fn undo_apply_coupon(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("apply-coupon", &ctx);
    Ok(())
}

#[rollback]
async fn undo_capture(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("capture", &ctx);
    Ok(())
}

#[rollback]
async fn undo_reserve(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("reserve", &ctx);
    Ok(())
}

#[rollback]
async fn undo_one(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("one", &ctx);
    Ok(())
}

#[rollback]
async fn undo_first(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("first", &ctx);
    Ok(())
}

#[rollback]
async fn undo_second(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("second", &ctx);
    Ok(())
}

#[rollback]
async fn undo_third(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("third", &ctx);
    Ok(())
}

#[rollback]
async fn undo_book_flight(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("book-flight", &ctx);
    Ok(())
}

#[rollback]
async fn undo_book_hotel(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("book-hotel", &ctx);
    Ok(())
}

#[rollback]
async fn undo_book_car(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("book-car", &ctx);
    Ok(())
}

#[rollback]
async fn undo_hold_seat(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("hold-seat", &ctx);
    Ok(())
}

#[rollback]
async fn undo_hold_meal(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("hold-meal", &ctx);
    Ok(())
}

#[rollback]
async fn undo_slow(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("slow", &ctx);
    Ok(())
}

#[rollback]
async fn undo_fails(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("fails", &ctx);
    Ok(())
}

/// A hand-written compensation that records its call and succeeds.
fn logged<T>(probe: &Arc<Probe>, step: &'static str) -> RollbackRegistration<T>
where
    T: Debug + Send + 'static + for<'de> Deserialize<'de>,
{
    let probe = probe.clone();
    RollbackRegistration::new(StepConfig::default(), move |input: RollbackInput<T>| {
        let probe = probe.clone();
        Box::pin(async move {
            probe.log(step, &input.context());
            Ok(())
        }) as BoxFuture<Result<(), StepError>>
    })
}

// Rule: sequential steps are compensated in reverse start order, each given
// its stored output. (Hand-written on purpose: inline steps and
// `RollbackRegistration` compensations.)
#[tokio::test]
async fn sequential_steps_are_compensated_in_reverse_start_order() {
    let World { engine, probe, .. } = world().await;
    let p = probe.clone();
    let wf = workflow_fn("sequential", move |ctx: WorkflowContext, (): ()| {
        let probe = p.clone();
        async move {
            let reserve = StepConfig::default();
            let a: u64 = ctx
                .step_with_rollback(
                    "reserve",
                    reserve,
                    |_| async { Ok(1) },
                    logged(&probe, "reserve"),
                )
                .await?;
            let b: u64 = ctx
                .step_with_rollback(
                    "charge",
                    reserve,
                    move |_| async move { Ok(a + 1) },
                    logged(&probe, "charge"),
                )
                .await?;
            ctx.step_with_rollback(
                "ship",
                reserve,
                move |_| async move { Ok(b + 1) },
                logged(&probe, "ship"),
            )
            .await?;
            Err::<u64, _>(WorkflowError::new("the carrier went bankrupt"))
        }
    });
    let run = engine.start(wf, "seq-1", ()).await.unwrap();
    let (failure, rollback_failure) = failed_with(&run).await;
    assert_eq!(failure.message(), "the carrier went bankrupt");
    assert_eq!(rollback_failure, None);
    assert_eq!(steps_compensated(&probe), ["ship", "charge", "reserve"]);
    let outputs: Vec<_> = calls(&probe).into_iter().map(|c| c.output).collect();
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

/// Finishes only when the test lets it go.
#[step(name = "a", rollback = undo_a)]
async fn a_after_b(key: IdempotencyKey, probe: Service<Probe>) -> Result<u64, StepError> {
    let _ = key;
    probe.release.notified().await;
    Ok(10)
}

#[step(name = "b", rollback = undo_b)]
async fn b_first(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(20)
}

#[workflow(name = "parallel")]
async fn parallel(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    let a = a_after_b(&ctx);
    let b = b_first(&ctx);
    let (a, b) = tokio::join!(a, b);
    let _ = (a?, b?);
    Err(WorkflowError::new(
        "both legs booked, then the trip was cancelled",
    ))
}

// Rule: with parallel steps the order is reverse *start* (call) order, not
// reverse completion order: `join!(a, b)` where b finishes first still
// compensates b, then a.
#[tokio::test]
async fn parallel_steps_are_compensated_in_reverse_call_order_not_completion_order() {
    let World { engine, probe, .. } = world().await;
    let mut events = engine.subscribe();
    let run = engine.start(parallel, "par-1", ()).await.unwrap();
    // Let `a` finish only once `b`'s completion is durable.
    within("b to complete", async {
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
    probe.release.notify_one();
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
    assert_eq!(steps_compensated(&probe), ["b", "a"]);
    let outputs: Vec<_> = calls(&probe).into_iter().map(|c| c.output).collect();
    assert_eq!(outputs, [Some("20".to_string()), Some("10".into())]);
}

#[step(name = "debit", rollback = undo_debit)]
async fn debit(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(7)
}

#[step(name = "credit", rollback = undo_credit)]
async fn credit_refused(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Err(StepError::fatal("account closed"))
}

#[workflow(name = "failed-step")]
async fn failed_step(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    debit(&ctx).await?;
    credit_refused(&ctx).await?;
    Ok(0)
}

// Rule: a failed step with a handler is eligible; its handler gets no
// output, completed ones get theirs.
#[tokio::test]
async fn a_failed_step_is_compensated_with_no_output() {
    let World { engine, probe, .. } = world().await;
    let run = engine.start(failed_step, "failed-1", ()).await.unwrap();
    let (failure, _) = failed_with(&run).await;
    assert_eq!(
        failure.kind(),
        &FailureKind::Step {
            step: "credit".into()
        }
    );
    assert!(failure.message().contains("account closed"), "{failure}");
    let got = calls(&probe);
    assert_eq!(
        got.iter()
            .map(|c| (c.step, c.output.clone()))
            .collect::<Vec<_>>(),
        [("credit", None), ("debit", Some("7".to_string()))]
    );
}

#[step(name = "charge", rollback = undo_charge)]
async fn charge(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(5)
}

#[step(name = "apply-coupon", rollback = undo_apply_coupon)]
async fn apply_coupon(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Err(StepError::fatal("coupon expired"))
}

#[workflow(name = "caught")]
async fn caught(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    let paid = charge(&ctx).await?;
    let coupon = apply_coupon(&ctx).await.unwrap_or(0);
    Ok(paid + coupon)
}

// Rule: a step error the workflow catches does not start rollback.
#[tokio::test]
async fn a_caught_step_error_does_not_start_rollback() {
    let World { engine, probe, .. } = world().await;
    let run = engine.start(caught, "caught-1", ()).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 5);
    assert_eq!(run.status().await.unwrap(), Status::Complete);
    assert!(calls(&probe).is_empty(), "{:?}", calls(&probe));
    let history = kinds(&run).await;
    assert!(
        history
            .iter()
            .any(|k| matches!(k, EventKind::StepFailed { step, .. } if step == "apply-coupon"))
    );
    assert!(!history.iter().any(is_rollback_event), "{history:?}");
    assert_eq!(history.last(), Some(&EventKind::InstanceCompleted));
}

#[step(name = "capture", rollback = undo_capture)]
async fn capture(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Err(StepError::fatal("gateway timeout"))
}

#[step(name = "reserve", rollback = undo_reserve)]
async fn reserve(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(9)
}

#[workflow(name = "caught-then-fail")]
async fn caught_then_fail(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    charge(&ctx).await?;
    // The payment provider may have captured the charge before the step
    // failed: its compensation must still run.
    let _caught = capture(&ctx).await;
    reserve(&ctx).await?;
    Err(WorkflowError::new("fraud check rejected the order"))
}

// Rule: a step whose error was caught is still compensated (with no output)
// when the workflow later fails for another reason.
#[tokio::test]
async fn a_caught_failed_step_is_compensated_when_the_workflow_fails_later() {
    let World { engine, probe, .. } = world().await;
    let run = engine
        .start(caught_then_fail, "caught-2", ())
        .await
        .unwrap();
    let (failure, _) = failed_with(&run).await;
    assert_eq!(failure.message(), "fraud check rejected the order");
    let got: Vec<_> = calls(&probe)
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

#[step(name = "one", rollback = undo_one)]
async fn one(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(1)
}

#[workflow(name = "ok")]
async fn succeeds(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    let n = one(&ctx).await?;
    Ok(n)
}

// Rule: rollback starts only when the workflow is about to end `Errored`:
// a workflow that returns Ok compensates nothing.
#[tokio::test]
async fn a_successful_workflow_runs_no_compensation() {
    let World { engine, probe, .. } = world().await;
    let run = engine.start(succeeds, "ok-1", ()).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 1);
    assert!(calls(&probe).is_empty());
    assert!(!kinds(&run).await.iter().any(is_rollback_event));
}

#[step(name = "one")]
async fn one_without_undo(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(1)
}

#[workflow(name = "no-handlers")]
async fn no_handlers(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    one_without_undo(&ctx).await?;
    Err(WorkflowError::new("nothing to undo"))
}

// Rule: a failing workflow with no compensation registered ends `Errored`
// without any rollback event.
#[tokio::test]
async fn a_failure_without_handlers_ends_errored_without_rollback_events() {
    let World { engine, .. } = world().await;
    let run = engine.start(no_handlers, "plain-1", ()).await.unwrap();
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

#[workflow(name = "panics")]
async fn panics(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    let n = one(&ctx).await?;
    if n == 1 {
        panic!("invariant broken: n = {n}");
    }
    Ok(n)
}

// Rule: a panicking workflow body is a failure like a returned error: the
// started steps are compensated.
#[tokio::test]
async fn a_panicking_workflow_is_rolled_back() {
    let World { engine, probe, .. } = world().await;
    let run = engine.start(panics, "panic-1", ()).await.unwrap();
    let (failure, _) = failed_with(&run).await;
    assert_eq!(failure.kind(), &FailureKind::Panic);
    assert!(
        failure.message().contains("invariant broken: n = 1"),
        "{failure}"
    );
    let got = calls(&probe);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].step, "one");
    assert_eq!(got[0].cause, failure.message());
    assert_eq!(run.status().await.unwrap(), Status::Errored);
}

#[step(name = "first", rollback = undo_first)]
async fn first(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(1)
}

#[step(name = "second", rollback = refund_service_down)]
async fn second_refund_down(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(2)
}

/// Records its call and the engine's time, then fails: the refund service
/// is down.
#[rollback(retries = 3, delay = "10 seconds", backoff = "exponential")]
async fn refund_service_down(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("second", &ctx);
    let now = saga_runtime::Clock::now(&probe.clock);
    probe.attempt_times.lock().unwrap().push(now);
    Err(StepError::retryable("refund service down"))
}

#[step(name = "third", rollback = undo_third)]
async fn third(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(3)
}

#[workflow(name = "gives-up")]
async fn gives_up(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    first(&ctx).await?;
    second_refund_down(&ctx).await?;
    third(&ctx).await?;
    Err(WorkflowError::new("the original error"))
}

// Rule: a compensation that exhausts its own retries (its own delay and
// backoff, on the engine's clock) is recorded as failed; the compensations
// of earlier-started steps do not run; the instance's error stays the
// original one, the rollback failure recorded beside it.
#[tokio::test]
async fn a_compensation_that_gives_up_stops_the_rest_and_keeps_the_original_error() {
    let World { engine, probe, .. } = world().await;
    let run = engine.start(gives_up, "gives-up-1", ()).await.unwrap();
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
        calls(&probe)
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
    let times = probe.attempt_times.lock().unwrap().clone();
    let delays: Vec<_> = times
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).unwrap().as_secs())
        .collect();
    assert_eq!(delays, [10, 20, 40], "exponential from 10 s");

    let info = run.info().await.unwrap();
    assert_eq!(info.status, Status::Errored);
    assert_eq!(info.failure.as_ref(), Some(&failure));
    assert_eq!(info.rollback_failure.as_ref(), Some(&rollback_failure));
    // `inspect` counts each compensation's attempts, the failed last one too.
    let attempts: Vec<(String, u32)> = run
        .inspect()
        .await
        .unwrap()
        .compensations
        .into_iter()
        .map(|c| (c.step, c.attempts))
        .collect();
    assert_eq!(
        attempts,
        [("third".to_owned(), 1), ("second".to_owned(), 4)]
    );

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

#[step(name = "second", rollback = refund_refused)]
async fn second_refund_refused(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(2)
}

/// Records its call, then fails for good.
#[rollback(retries = 5)]
async fn refund_refused(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("second", &ctx);
    Err(StepError::fatal("refund refused"))
}

#[workflow(name = "fatal-refund")]
async fn fatal_refund(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    first(&ctx).await?;
    second_refund_refused(&ctx).await?;
    Err(WorkflowError::new("boom"))
}

// Rule: a fatal error from a compensation skips its remaining retries.
#[tokio::test]
async fn a_fatal_compensation_error_skips_its_retries() {
    let World { engine, probe, .. } = world().await;
    let run = engine.start(fatal_refund, "fatal-rb-1", ()).await.unwrap();
    let (failure, rollback_failure) = failed_with(&run).await;
    assert_eq!(failure.message(), "boom");
    assert!(rollback_failure.is_some());
    assert_eq!(
        calls(&probe)
            .iter()
            .map(|c| (c.step, c.attempt))
            .collect::<Vec<_>>(),
        [("second", 1)]
    );
}

#[step(name = "charge", rollback = refund_flaky)]
async fn charge_n(key: IdempotencyKey, n: u64) -> Result<u64, StepError> {
    let _ = key;
    Ok(n)
}

/// Records its call; its first attempt fails, the retry succeeds.
#[rollback(retries = 2, delay = "1 second")]
async fn refund_flaky(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    if probe.log("charge", &ctx) == 1 {
        Err(StepError::retryable("flaky"))
    } else {
        Ok(())
    }
}

#[step(name = "check")]
async fn check_limit(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Err(StepError::fatal("limit exceeded"))
}

#[workflow(name = "keys")]
async fn charged_thrice(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    for n in 0..3u64 {
        charge_n(&ctx, n).await?;
    }
    check_limit(&ctx).await?;
    Ok(0)
}

// Rule: every handler gets the cause, and its own key
// `"{instance}:rollback:{step}"` (`#n` from the second occurrence on), the
// same on every attempt.
#[tokio::test]
async fn compensations_get_the_cause_and_their_own_stable_key() {
    let World { engine, probe, .. } = world().await;
    let run = engine.start(charged_thrice, "keys-1", ()).await.unwrap();
    let (failure, _) = failed_with(&run).await;
    let got = calls(&probe);
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

#[step(name = "a", rollback = undo_a)]
async fn a_one(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(1)
}

#[step(name = "no-undo")]
async fn no_undo(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(2)
}

#[step(name = "b", rollback = undo_b)]
async fn b_three(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(3)
}

#[workflow(name = "events")]
async fn lifecycle(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    a_one(&ctx).await?;
    no_undo(&ctx).await?;
    b_three(&ctx).await?;
    Err(WorkflowError::new("stop"))
}

// Rule: the lifecycle events come in order, stored in history and sent to
// subscribers (after they are durable), the instance's end last.
#[tokio::test]
async fn lifecycle_events_are_stored_and_streamed_in_order() {
    let World { engine, .. } = world().await;
    let mut subscription = engine.subscribe();
    let run = engine.start(lifecycle, "events-1", ()).await.unwrap();
    let streamed = within("the streamed end", async {
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

#[step(name = "book-flight", rollback = undo_book_flight)]
async fn book_flight(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(1)
}

#[step(name = "book-hotel", rollback = undo_book_hotel)]
async fn book_hotel(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(2)
}

/// Counts its run, tells the test it began, then never finishes.
#[step(name = "book-car", rollback = undo_book_car)]
async fn book_car(key: IdempotencyKey, probe: Service<Probe>) -> Result<u64, StepError> {
    let _ = key;
    probe.runs.fetch_add(1, Ordering::SeqCst);
    let _ = probe.began.send("book-car");
    pending().await
}

#[workflow(name = "terminate-step")]
async fn terminate_step(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    book_flight(&ctx).await?;
    book_hotel(&ctx).await?;
    book_car(&ctx).await?;
    Ok(0)
}

// Rule: `terminate_with_rollback()` on an instance blocked in a step
// compensates its started steps in reverse order (the blocked one with no
// output) and ends it `Terminated`.
#[tokio::test]
async fn terminate_with_rollback_during_a_step_compensates_and_terminates() {
    let World {
        engine,
        probe,
        mut began,
    } = world().await;
    let run = engine.start(terminate_step, "term-1", ()).await.unwrap();
    assert_eq!(within("the step", began.recv()).await, Some("book-car"));
    within("terminate", run.terminate_with_rollback())
        .await
        .unwrap();

    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    match within("the result", run.result()).await {
        Err(Error::Terminated {
            rollback_failure: None,
            ..
        }) => {}
        other => panic!("expected Terminated, got {other:?}"),
    }
    let got: Vec<_> = calls(&probe)
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
    assert_eq!(probe.runs.load(Ordering::SeqCst), 1);
    let history = kinds(&run).await;
    assert_eq!(history.last(), Some(&EventKind::InstanceTerminated));
    assert!(history.contains(&EventKind::RollbackCompleted));
    assert!(
        !history
            .iter()
            .any(|k| matches!(k, EventKind::StepCompleted { step, .. } if step == "book-car"))
    );
}

#[step(name = "hold-seat", rollback = undo_hold_seat)]
async fn hold_seat(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(1)
}

#[step(name = "hold-meal", rollback = undo_hold_meal)]
async fn hold_meal(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(2)
}

#[workflow(name = "terminate-wait")]
async fn terminate_wait(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    hold_seat(&ctx).await?;
    hold_meal(&ctx).await?;
    let approved: bool = ctx
        .wait_for_event("wait-approval", "approval", "7 days")
        .await?;
    Ok(u64::from(approved))
}

// Rule: `terminate_with_rollback()` on an instance waiting for an event
// compensates the steps it started.
#[tokio::test]
async fn terminate_with_rollback_during_an_event_wait_compensates_and_terminates() {
    // A clock that stands still: the wait must not time out on its own.
    let World { engine, probe, .. } = world_on(TestClock::new()).await;
    let run = engine.start(terminate_wait, "term-2", ()).await.unwrap();
    wait_until("the event wait", || async {
        run.status().await.unwrap() == Status::Waiting
            && kinds(&run)
                .await
                .iter()
                .any(|k| matches!(k, EventKind::EventWaitStarted { .. }))
    })
    .await;
    within("terminate", run.terminate_with_rollback())
        .await
        .unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    assert!(matches!(
        within("the result", run.result()).await,
        Err(Error::Terminated { .. })
    ));
    assert_eq!(steps_compensated(&probe), ["hold-meal", "hold-seat"]);
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

/// Counts its run, tells the test it began, then never finishes.
#[step(name = "slow", rollback = undo_slow)]
async fn slow(key: IdempotencyKey, probe: Service<Probe>) -> Result<u64, StepError> {
    let _ = key;
    probe.runs.fetch_add(1, Ordering::SeqCst);
    let _ = probe.began.send("slow");
    pending().await
}

/// Tells the test it began, then fails for good.
#[step(name = "fails", rollback = undo_fails)]
async fn fails(key: IdempotencyKey, probe: Service<Probe>) -> Result<u64, StepError> {
    let _ = key;
    let _ = probe.began.send("fails");
    Err(StepError::fatal("out of stock"))
}

#[workflow(name = "in-flight")]
async fn in_flight(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    let slow_leg = slow(&ctx);
    let failing_leg = fails(&ctx);
    let (a, b) = tokio::try_join!(slow_leg, failing_leg)?;
    Ok(a + b)
}

// Rule: a step still in flight when the workflow fails is eligible (it
// started), gets no output, and never runs again.
#[tokio::test]
async fn a_step_in_flight_when_the_workflow_fails_is_compensated_and_never_rerun() {
    let World {
        engine,
        probe,
        mut began,
    } = world().await;
    let run = engine.start(in_flight, "flight-1", ()).await.unwrap();
    let (failure, _) = failed_with(&run).await;
    assert!(failure.message().contains("out of stock"), "{failure}");
    let got: Vec<_> = calls(&probe)
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
    // No clock wait can show a run that never comes: the harness's pause.
    helpers::quiet(&engine).await;
    assert!(probe.runs.load(Ordering::SeqCst) <= 1);
    let history = kinds(&run).await;
    assert!(
        !history.iter().any(|k| matches!(
            k,
            EventKind::StepCompleted { step, .. } | EventKind::StepFailed { step, .. } if step == "slow"
        )),
        "{history:?}"
    );
}

/// Counts its run, tells the test it began, then never finishes.
#[step(name = "second", rollback = undo_second)]
async fn second_never_finishes(
    key: IdempotencyKey,
    probe: Service<Probe>,
) -> Result<u64, StepError> {
    let _ = key;
    probe.runs.fetch_add(1, Ordering::SeqCst);
    let _ = probe.began.send("second");
    pending().await
}

#[workflow(name = "called-only")]
async fn called_only(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    first(&ctx).await?;
    let _started = second_never_finishes(&ctx);
    Err(WorkflowError::new("gave up right after calling it"))
}

// Rule: a step called (started) and not yet running when the workflow
// fails is eligible too: its compensation runs with no output.
#[tokio::test]
async fn a_step_called_just_before_the_failure_is_compensated() {
    let World { engine, probe, .. } = world().await;
    let run = engine.start(called_only, "called-1", ()).await.unwrap();
    failed_with(&run).await;
    let got: Vec<_> = calls(&probe)
        .into_iter()
        .map(|c| (c.step, c.output))
        .collect();
    assert_eq!(got, [("second", None), ("first", Some("1".into()))]);
    assert!(probe.runs.load(Ordering::SeqCst) <= 1);
}

#[step(name = "reserve", rollback = release_slowly)]
async fn reserve_one(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(1)
}

/// Records its call, tells the test it began, and ends only when the test
/// lets it go.
#[rollback]
async fn release_slowly(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("reserve", &ctx);
    let _ = probe.began.send("reserve");
    probe.release.notified().await;
    probe.finished.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[workflow(name = "slow-undo")]
async fn slow_undo(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    reserve_one(&ctx).await?;
    Err(WorkflowError::new("boom"))
}

// Rule: the instance shows `RollingBack` while a compensation runs.
#[tokio::test]
async fn the_status_is_rolling_back_while_a_compensation_runs() {
    let World {
        engine,
        probe,
        mut began,
    } = world().await;
    let run = engine.start(slow_undo, "rolling-1", ()).await.unwrap();
    within("the compensation to start", began.recv())
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
    assert_eq!(probe.finished.load(Ordering::SeqCst), 0);
    // Terminating an instance that is rolling back is refused.
    assert!(matches!(
        run.terminate().await,
        Err(Error::InvalidState {
            status: Status::RollingBack,
            ..
        })
    ));

    probe.release.notify_one();
    let (failure, _) = failed_with(&run).await;
    assert_eq!(failure.message(), "boom");
    assert_eq!(probe.finished.load(Ordering::SeqCst), 1);
    assert_eq!(run.status().await.unwrap(), Status::Errored);
}

#[step(name = "a", rollback = undo_a)]
async fn a_counted(key: IdempotencyKey, probe: Service<Probe>) -> Result<u64, StepError> {
    let _ = key;
    probe.runs.fetch_add(1, Ordering::SeqCst);
    Ok(1)
}

/// Counts its run, tells the test it began, and ends only when the test
/// lets it go.
#[step(name = "b", rollback = undo_b)]
async fn b_held(key: IdempotencyKey, probe: Service<Probe>) -> Result<u64, StepError> {
    let _ = key;
    probe.runs.fetch_add(1, Ordering::SeqCst);
    let _ = probe.began.send("b");
    probe.release.notified().await;
    Ok(2)
}

#[step(name = "c", rollback = undo_c)]
async fn c_counted(key: IdempotencyKey, probe: Service<Probe>) -> Result<u64, StepError> {
    let _ = key;
    probe.runs.fetch_add(1, Ordering::SeqCst);
    Ok(3)
}

#[workflow(name = "paused")]
async fn paused(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    a_counted(&ctx).await?;
    b_held(&ctx).await?;
    c_counted(&ctx).await?;
    Ok(0)
}

// Rule: `terminate_with_rollback()` on a paused instance (no code running)
// rebuilds the compensations by replaying the workflow from history, runs
// them in reverse order, and runs no forward step again.
#[tokio::test]
async fn terminate_with_rollback_of_a_paused_instance_replays_to_compensate() {
    let World {
        engine,
        probe,
        mut began,
    } = world().await;
    let run = engine.start(paused, "paused-1", ()).await.unwrap();
    within("step b", began.recv()).await.unwrap();
    run.pause().await.unwrap();
    probe.release.notify_one();
    // It stops at its next step boundary, before "c" starts.
    wait_until("the pause", || async {
        kinds(&run)
            .await
            .iter()
            .any(|k| matches!(k, EventKind::StepCompleted { step, .. } if step == "b"))
            && engine.list(&ListFilter::all()).await.unwrap()[0].status == Status::Paused
    })
    .await;
    helpers::quiet(&engine).await;
    assert_eq!(run.status().await.unwrap(), Status::Paused);

    within("terminate", run.terminate_with_rollback())
        .await
        .unwrap();
    wait_until("the end", || async {
        run.status().await.unwrap().is_terminal()
    })
    .await;
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    let got: Vec<_> = calls(&probe)
        .into_iter()
        .map(|c| (c.step, c.output))
        .collect();
    assert_eq!(
        got,
        [("b", Some("2".to_string())), ("a", Some("1".to_string()))]
    );
    assert_eq!(
        probe.runs.load(Ordering::SeqCst),
        2,
        "a and b ran once each, c never"
    );
    assert_eq!(
        kinds(&run).await.last(),
        Some(&EventKind::InstanceTerminated)
    );
}

#[step(name = "charge", rollback = refund_unless_down)]
async fn charge_refunded_when_up(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key;
    Ok(5)
}

/// Records its call, then fails for good while the refund API is down.
#[rollback(retries = 0)]
async fn refund_unless_down(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("charge", &ctx);
    if probe.refund_down.load(Ordering::SeqCst) {
        return Err(StepError::fatal("the refund API is down"));
    }
    Ok(())
}

#[workflow(name = "retry-rollback")]
async fn out_of_stock(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    charge_refunded_when_up(&ctx).await?;
    Err(WorkflowError::new("out of stock"))
}

#[tokio::test]
async fn retry_rollback_runs_the_compensations_that_gave_up_with_the_same_keys() {
    let World { engine, probe, .. } = world().await;
    // The refund API is down until the test fixes it.
    probe.refund_down.store(true, Ordering::SeqCst);
    let run = engine.start(out_of_stock, "retry-1", ()).await.unwrap();
    match within("the failure", run.result()).await {
        Err(Error::WorkflowFailed {
            failure,
            rollback_failure: Some(_),
            ..
        }) => assert!(failure.message().contains("out of stock")),
        other => panic!("expected a failed rollback, got {other:?}"),
    }

    probe.refund_down.store(false, Ordering::SeqCst);
    within("the retry", run.retry_rollback()).await.unwrap();
    match within("the result", run.result()).await {
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
        calls(&probe).into_iter().map(|c| c.key).collect::<Vec<_>>(),
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

#[workflow(name = "retry-at-once")]
async fn out_of_stock_again(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    charge_refunded_when_up(&ctx).await?;
    Err(WorkflowError::new("out of stock"))
}

/// A control call that starts a driver right after `result()` saw the end
/// (its driver may not have let go yet) still gets the instance driven.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_rollback_right_after_the_end_is_driven() {
    let World { engine, probe, .. } = world().await;
    for i in 0..20 {
        probe.refund_down.store(true, Ordering::SeqCst);
        let run = engine
            .start(out_of_stock_again, &format!("at-once-{i}"), ())
            .await
            .unwrap();
        let failed = within("the failure", run.result()).await;
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
        probe.refund_down.store(false, Ordering::SeqCst);
        within("the retry", run.retry_rollback()).await.unwrap();
        let ended = within("the retried rollback", run.result()).await;
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

/// What the concurrent rollback tests' steps share: the order their
/// compensations began and ended in, a barrier the overlapping ones meet
/// at (it opens only if both run at once), and a gate.
struct Overlap {
    log: Mutex<Vec<String>>,
    barrier: tokio::sync::Barrier,
    gate: Notify,
}

impl Overlap {
    fn write(&self, line: String) {
        self.log.lock().unwrap().push(line);
    }

    fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

#[step(name = "book", rollback = unbook)]
async fn book(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Ok(())
}

#[rollback]
async fn unbook(ctx: RollbackContext<'_, ()>, o: Service<Overlap>) -> Result<(), StepError> {
    o.write(format!("undo book ({})", ctx.key()));
    Ok(())
}

#[step(name = "flight", rollback = unfly)]
async fn flight(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Ok(())
}

#[rollback]
async fn unfly(ctx: RollbackContext<'_, ()>, o: Service<Overlap>) -> Result<(), StepError> {
    o.write("undo flight begins".into());
    // Opens only when the hotel's compensation is here too.
    o.barrier.wait().await;
    o.write(format!("undo flight ends ({})", ctx.key()));
    Ok(())
}

#[step(name = "hotel", rollback = unstay)]
async fn hotel(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Ok(())
}

#[rollback]
async fn unstay(ctx: RollbackContext<'_, ()>, o: Service<Overlap>) -> Result<(), StepError> {
    o.write("undo hotel begins".into());
    o.barrier.wait().await;
    o.write(format!("undo hotel ends ({})", ctx.key()));
    Ok(())
}

#[step(name = "pay", rollback = unpay)]
async fn pay_refused(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Err(StepError::fatal("card declined"))
}

#[rollback]
async fn unpay(ctx: RollbackContext<'_, ()>, o: Service<Overlap>) -> Result<(), StepError> {
    o.write(format!("undo pay ({})", ctx.key()));
    Ok(())
}

/// `book`; then `flight` and `hotel` together; then `pay`, refused.
#[workflow(name = "concurrent-trip", rollback = "concurrent")]
async fn concurrent_trip(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    book(&ctx).await?;
    let (f, h) = tokio::join!(flight(&ctx), hotel(&ctx));
    f?;
    h?;
    pay_refused(&ctx).await?;
    Ok(())
}

async fn overlap_world(overlap: &Arc<Overlap>) -> Engine {
    helpers::fresh(
        Engine::builder()
            .clock(TestClock::auto_advancing())
            .provide_arc(overlap.clone()),
    )
    .await
}

#[tokio::test]
async fn a_concurrent_rollback_runs_overlapping_compensations_at_once_in_reverse_happens_before_order()
 {
    let overlap = Arc::new(Overlap {
        log: Mutex::default(),
        barrier: tokio::sync::Barrier::new(2),
        gate: Notify::new(),
    });
    let engine = overlap_world(&overlap).await;
    let run = engine.start(concurrent_trip, "ct-1", ()).await.unwrap();
    within("the rollback", run.result()).await.unwrap_err();
    let lines = overlap.lines();
    // `pay` began after both ended: undone first. `flight` and `hotel`
    // overlapped: both began before either ended (the barrier needs both).
    // `book` ended before both began: undone last.
    assert_eq!(lines[0], "undo pay (ct-1:rollback:pay)");
    let mut middle: Vec<&str> = lines[1..3].iter().map(String::as_str).collect();
    middle.sort();
    assert_eq!(middle, ["undo flight begins", "undo hotel begins"]);
    let mut ends: Vec<&str> = lines[3..5].iter().map(String::as_str).collect();
    ends.sort();
    assert_eq!(
        ends,
        [
            "undo flight ends (ct-1:rollback:flight)",
            "undo hotel ends (ct-1:rollback:hotel)"
        ]
    );
    assert_eq!(lines[5], "undo book (ct-1:rollback:book)");
    assert_eq!(lines.len(), 6);
    let tail = rollback_tail(&kinds(&run).await);
    assert!(tail.contains(&EventKind::RollbackCompleted), "{tail:?}");
}

#[step(name = "flight", rollback = unfly_refused)]
async fn flight_then_refund_fails(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Ok(())
}

#[rollback(retries = 0)]
async fn unfly_refused(ctx: RollbackContext<'_, ()>, o: Service<Overlap>) -> Result<(), StepError> {
    let _ = ctx.key();
    o.write("undo flight gives up".into());
    Err(StepError::fatal("the airline refuses the refund"))
}

#[step(name = "hotel", rollback = unstay_slowly)]
async fn hotel_slow_undo(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Ok(())
}

#[rollback]
async fn unstay_slowly(ctx: RollbackContext<'_, ()>, o: Service<Overlap>) -> Result<(), StepError> {
    let _ = ctx.key();
    o.write("undo hotel begins".into());
    // Let go once the flight's compensation gave up.
    o.gate.notified().await;
    o.write("undo hotel ends".into());
    Ok(())
}

#[workflow(name = "concurrent-give-up", rollback = "concurrent")]
async fn concurrent_give_up(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    book(&ctx).await?;
    let (f, h) = tokio::join!(flight_then_refund_fails(&ctx), hotel_slow_undo(&ctx));
    f?;
    h?;
    pay_refused(&ctx).await?;
    Ok(())
}

#[tokio::test]
async fn in_a_concurrent_rollback_a_compensation_that_gives_up_stops_those_not_begun_and_the_rest_finish()
 {
    let overlap = Arc::new(Overlap {
        log: Mutex::default(),
        barrier: tokio::sync::Barrier::new(2),
        gate: Notify::new(),
    });
    let engine = overlap_world(&overlap).await;
    let run = engine.start(concurrent_give_up, "cg-1", ()).await.unwrap();
    helpers::wait_until("the flight's compensation gave up", || async {
        overlap.lines().iter().any(|l| l == "undo flight gives up")
            && overlap.lines().iter().any(|l| l == "undo hotel begins")
    })
    .await;
    overlap.gate.notify_waiters();
    let error = within("the rollback", run.result()).await.unwrap_err();
    let Error::WorkflowFailed {
        rollback_failure: Some(gave_up),
        ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert!(gave_up.message().contains("\"flight\""), "{gave_up}");
    let lines = overlap.lines();
    // The hotel's compensation, under way, finished and was recorded; the
    // booking's, not begun, never ran.
    assert!(lines.contains(&"undo hotel ends".to_owned()), "{lines:?}");
    assert!(
        !lines.iter().any(|l| l.starts_with("undo book")),
        "{lines:?}"
    );
    let tail = rollback_tail(&kinds(&run).await);
    assert!(tail.contains(&completed("hotel")), "{tail:?}");
    assert!(!tail.contains(&started("book")), "{tail:?}");
}

/// The approval a wait receives.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Approval {
    by: String,
}

#[rollback]
async fn tell_approver(
    ctx: RollbackContext<'_, Approval>,
    o: Service<Overlap>,
) -> Result<(), StepError> {
    let by = ctx.output().map_or("nobody", |a| a.by.as_str());
    o.write(format!("tell {by} ({})", ctx.key()));
    Ok(())
}

/// `book`, an approval whose compensation tells the approver, a second
/// wait that times out (it has nothing to undo), then `pay`, refused.
#[workflow(name = "approved-trip")]
async fn approved_trip(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    book(&ctx).await?;
    let approval: Approval = ctx
        .wait_for_event("approval", "approved", "1 day")
        .on_rollback::<tell_approver>()
        .await?;
    let late: Result<Approval, WaitError> = ctx
        .wait_for_event("second-approval", "approved-again", "1 hour")
        .on_rollback::<tell_approver>()
        .await;
    assert!(late.is_err(), "nobody sends the second approval");
    let _ = approval;
    pay_refused(&ctx).await?;
    Ok(())
}

#[tokio::test]
async fn a_wait_that_received_its_event_is_compensated_with_the_event_at_its_place() {
    let overlap = Arc::new(Overlap {
        log: Mutex::default(),
        barrier: tokio::sync::Barrier::new(2),
        gate: Notify::new(),
    });
    let engine = overlap_world(&overlap).await;
    let (run, _) = engine
        .event("at-1", "approved")
        .send_with_start(approved_trip, (), &Approval { by: "ada".into() })
        .await
        .unwrap();
    within("the rollback", run.result()).await.unwrap_err();
    // Reverse start order: pay, the approval (the timed-out wait has
    // nothing to undo), then the booking.
    assert_eq!(
        overlap.lines(),
        [
            "undo pay (at-1:rollback:pay)",
            "tell ada (at-1:rollback:approval)",
            "undo book (at-1:rollback:book)",
        ]
    );
    let tail = rollback_tail(&kinds(&run).await);
    assert!(tail.contains(&completed("approval")), "{tail:?}");
    assert!(!tail.contains(&started("second-approval")), "{tail:?}");
}

/// The keys a compensation was given: its step's and its own.
#[derive(Default)]
struct Keys(Mutex<Vec<String>>);

#[step(name = "book-room", rollback = cancel_room)]
async fn book_room(key: IdempotencyKey, keys: Service<Keys>) -> Result<u32, StepError> {
    keys.0.lock().unwrap().push(key.to_string());
    // The hotel booked the room, and its reply was lost.
    Err(StepError::fatal("the hotel did not answer"))
}

#[rollback]
async fn cancel_room(ctx: RollbackContext<'_, u32>, keys: Service<Keys>) -> Result<(), StepError> {
    keys.0
        .lock()
        .unwrap()
        .push(format!("{} {}", ctx.step_key(), ctx.key()));
    Ok(())
}

#[workflow(name = "book-a-room")]
async fn book_a_room(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    book_room(&ctx).await?;
    Ok(())
}

#[tokio::test]
async fn a_compensation_knows_the_key_its_step_was_given() {
    let keys = Arc::new(Keys::default());
    let engine = Engine::builder()
        .provide_arc(keys.clone())
        .temporary()
        .unwrap();
    engine.register(book_a_room).unwrap();
    let run = engine.start(book_a_room, "room-1", ()).await.unwrap();
    assert!(run.result().await.is_err());
    // Its output is None, yet it can ask the hotel what it did under the
    // step's key.
    assert_eq!(
        *keys.0.lock().unwrap(),
        [
            "room-1:book-room",
            "room-1:book-room room-1:rollback:book-room"
        ]
    );
}
