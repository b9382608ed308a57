//! Rollback asked from outside: terminate with rollback (during a step, a
//! wait, or a pause) and `retry_rollback` after compensations gave up.

use super::*;

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
