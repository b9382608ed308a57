//! Which steps a rollback compensates, and in what order: reverse start
//! order, failed and in-flight steps included, nothing when the workflow
//! succeeds or catches the error.
//!
//! One test stays on the hand-written API on purpose:
//! `sequential_steps_are_compensated_in_reverse_start_order` runs inline
//! steps (`ctx.step_with_rollback` in a `workflow_fn`) whose compensations
//! are built with `RollbackRegistration::new`, so that API keeps a test of
//! the basic rule.

use super::compensations::first;
use super::concurrent::{Overlap, book, overlap_world, pay_refused};
use super::*;

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
