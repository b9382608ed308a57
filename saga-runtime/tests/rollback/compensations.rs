//! What a compensation is given (its step's output and key, the cause, its
//! own stable key), how its retries and failures end the rollback, and
//! the events and status the engine shows meanwhile.

use super::*;

#[step(name = "first", rollback = undo_first)]
pub(super) async fn first(key: IdempotencyKey) -> Result<u64, StepError> {
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
    let now = saga_runtime::time::Clock::now(&probe.clock);
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
