//! Waiting for events: an event is stored durably when sent and delivered
//! to the wait for its type, whether it came before or after the workflow
//! got there, even across a process restart; a timeout is an error the
//! workflow may catch; bad sends get typed errors and store nothing.

#[path = "support/child.rs"]
mod child;

#[path = "support/helpers.rs"]
mod helpers;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use saga_runtime::prelude::*;
use saga_runtime::{Error, EventKind, Instance, TestClock};

use child::{DataDir, child_dir, report};

use helpers::{engine_on, kinds, settle, within};

const HOUR: u64 = 60 * 60;

fn start_of_time() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_893_456_000)
}

/// Polls until the instance's history has an event that `pred` accepts.
async fn until_history(run: &Instance, pred: impl Fn(&EventKind) -> bool) {
    within("a history event", async {
        while !kinds(run).await.iter().any(&pred) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
}

fn wait_started(kind: &EventKind) -> bool {
    matches!(kind, EventKind::EventWaitStarted { .. })
}

/// Waits (7 days at most) for one "approval" and returns it.
fn approval() -> impl Workflow<Input = (), Output = String> + Copy {
    workflow_fn("approval", |ctx: WorkflowContext, (): ()| async move {
        let decision: String = ctx
            .wait_for_event("wait-approval", "approval", "7 days")
            .await?;
        Ok::<_, WorkflowError>(decision)
    })
}

/// Sleeps an hour before it waits for an "approval".
fn approval_after_a_nap() -> impl Workflow<Input = (), Output = String> + Copy {
    workflow_fn(
        "approval-after-nap",
        |ctx: WorkflowContext, (): ()| async move {
            ctx.sleep("nap", "1 hour").await?;
            let decision: String = ctx
                .wait_for_event("wait-approval", "approval", "7 days")
                .await?;
            Ok::<_, WorkflowError>(decision)
        },
    )
}

#[tokio::test]
async fn an_event_sent_before_the_wait_is_kept_and_delivered() {
    let clock = TestClock::new();
    let engine = engine_on(&clock);
    let run = engine
        .start(approval_after_a_nap(), "early-1", ())
        .await
        .unwrap();
    within("the nap", clock.wait_for_sleepers(1)).await;
    engine
        .send_event("early-1", "approval", "yes, early")
        .await
        .unwrap();
    // An event of another type does not satisfy the wait.
    engine
        .send_event("early-1", "rejection", "ignore me")
        .await
        .unwrap();
    clock.advance(Duration::from_secs(HOUR));
    assert_eq!(
        within("the result", run.result()).await.unwrap(),
        "yes, early"
    );
    let kinds = kinds(&run).await;
    let received = kinds
        .iter()
        .position(
            |k| matches!(k, EventKind::EventReceived { event_type } if event_type == "approval"),
        )
        .unwrap();
    let waited = kinds.iter().position(wait_started).unwrap();
    assert!(received < waited, "the event came first: {kinds:?}");
}

#[tokio::test]
async fn an_event_sent_during_the_wait_is_delivered_and_the_status_is_waiting() {
    let clock = TestClock::new();
    let engine = engine_on(&clock);
    let run = engine.start(approval(), "late-1", ()).await.unwrap();
    until_history(&run, wait_started).await;
    settle().await;
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    engine
        .send_event("late-1", "approval", "yes, late")
        .await
        .unwrap();
    assert_eq!(
        within("the result", run.result()).await.unwrap(),
        "yes, late"
    );
    assert!(
        kinds(&run).await.iter().any(
            |k| matches!(k, EventKind::EventDelivered { name, .. } if name == "wait-approval")
        )
    );
}

#[tokio::test]
async fn a_timeout_is_an_error_the_workflow_may_catch_and_go_on() {
    let clock = TestClock::new();
    let engine = engine_on(&clock);
    let wf = workflow_fn("patient", |ctx: WorkflowContext, (): ()| async move {
        let decision = match ctx
            .wait_for_event::<String>("wait-approval", "approval", "1 hour")
            .await
        {
            Ok(decision) => decision,
            Err(WaitError::Timeout { name, event_type }) => {
                format!("{name}/{event_type} timed out")
            }
            Err(other) => return Err(other.into()),
        };
        let shout = ctx
            .step("after", StepConfig::default(), move |_| {
                let decision = decision.clone();
                async move { Ok(decision.to_uppercase()) }
            })
            .await?;
        Ok::<_, WorkflowError>(shout)
    });
    let run = engine.start(wf, "patient-1", ()).await.unwrap();
    until_history(&run, wait_started).await;
    within("the wait's deadline", clock.wait_for_sleepers(1)).await;
    clock.advance(Duration::from_secs(HOUR - 1));
    settle().await;
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        within("the result", run.result()).await.unwrap(),
        "WAIT-APPROVAL/APPROVAL TIMED OUT"
    );
    assert!(
        kinds(&run)
            .await
            .iter()
            .any(|k| matches!(k, EventKind::EventWaitTimedOut { .. }))
    );
}

#[tokio::test]
async fn an_uncaught_timeout_fails_the_workflow() {
    let clock = TestClock::new();
    let engine = engine_on(&clock);
    let run = engine.start(approval(), "impatient-1", ()).await.unwrap();
    within("the wait's deadline", clock.wait_for_sleepers(1)).await;
    clock.advance(Duration::from_secs(7 * 24 * HOUR));
    match within("the result", run.result()).await {
        Err(Error::WorkflowFailed { failure, .. }) => {
            assert!(failure.message().contains("timed out"), "{failure}")
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn two_events_of_one_type_go_to_two_waits_in_order() {
    let clock = TestClock::new();
    let engine = engine_on(&clock);
    let wf = workflow_fn("two-votes", |ctx: WorkflowContext, (): ()| async move {
        ctx.sleep("nap", "1 hour").await?;
        let first: u32 = ctx.wait_for_event("first-vote", "vote", "1 day").await?;
        let second: u32 = ctx.wait_for_event("second-vote", "vote", "1 day").await?;
        let third: u32 = ctx.wait_for_event("third-vote", "vote", "1 day").await?;
        Ok::<_, WorkflowError>(vec![first, second, third])
    });
    let run = engine.start(wf, "votes-1", ()).await.unwrap();
    within("the nap", clock.wait_for_sleepers(1)).await;
    engine.send_event("votes-1", "vote", &1u32).await.unwrap();
    engine.send_event("votes-1", "vote", &2u32).await.unwrap();
    clock.advance(Duration::from_secs(HOUR));
    // The third is sent once the third wait runs.
    until_history(
        &run,
        |k| matches!(k, EventKind::EventWaitStarted { name, .. } if name == "third-vote"),
    )
    .await;
    engine.send_event("votes-1", "vote", &3u32).await.unwrap();
    assert_eq!(
        within("the result", run.result()).await.unwrap(),
        vec![1, 2, 3]
    );
}

#[tokio::test]
async fn events_for_unknown_or_finished_instances_are_typed_errors() {
    let clock = TestClock::new();
    let engine = engine_on(&clock);
    match engine.send_event("nobody", "approval", "hello").await {
        Err(Error::UnknownInstance { id }) => assert_eq!(id, "nobody"),
        other => panic!("expected UnknownInstance, got {other:?}"),
    }
    match engine.send_event("not an id!", "approval", "hello").await {
        Err(Error::InvalidInstanceId { .. }) => {}
        other => panic!("expected InvalidInstanceId, got {other:?}"),
    }
    let run = engine.start(approval(), "done-1", ()).await.unwrap();
    engine.send_event("done-1", "approval", "ok").await.unwrap();
    within("the result", run.result()).await.unwrap();
    match engine.send_event("done-1", "approval", "too late").await {
        Err(Error::InvalidState { status, .. }) => assert_eq!(status, Status::Complete),
        other => panic!("expected InvalidState, got {other:?}"),
    }
    let received = kinds(&run)
        .await
        .iter()
        .filter(|k| matches!(k, EventKind::EventReceived { .. }))
        .count();
    assert_eq!(received, 1, "the refused event left no trace");
}

#[tokio::test]
async fn a_payload_over_the_limit_is_refused_before_anything_is_stored() {
    let clock = TestClock::new();
    let engine = Engine::builder()
        .clock(clock.clone())
        .max_payload_bytes(64)
        .temporary()
        .unwrap();
    let run = engine.start(approval(), "big-1", ()).await.unwrap();
    until_history(&run, wait_started).await;
    let huge = "x".repeat(1000);
    match engine.send_event("big-1", "approval", &huge).await {
        Err(Error::PayloadTooLarge { size, limit, what }) => {
            assert!(size > 1000 && limit == 64, "{size} {limit}");
            assert!(
                what.contains("approval") && what.contains("big-1"),
                "{what}"
            );
        }
        other => panic!("expected PayloadTooLarge, got {other:?}"),
    }
    settle().await;
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    assert!(
        !kinds(&run)
            .await
            .iter()
            .any(|k| matches!(k, EventKind::EventReceived { .. })),
        "nothing was stored"
    );
    engine
        .send_event("big-1", "approval", "small")
        .await
        .unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), "small");
}

#[tokio::test]
async fn an_event_sent_while_no_process_runs_the_instance_is_delivered_after_restart() {
    const TEST: &str =
        "an_event_sent_while_no_process_runs_the_instance_is_delivered_after_restart";
    if let Some(dir) = child_dir() {
        // The child: start the wait, report, and wait to be killed.
        let clock = TestClock::starting_at(start_of_time());
        let engine = Engine::builder().clock(clock.clone()).open(&dir).unwrap();
        let run = engine.start(approval(), "across-1", ()).await.unwrap();
        until_history(&run, wait_started).await;
        report("waiting");
        std::future::pending::<()>().await;
    }
    let dir = DataDir::new("event-across");
    let mut child = child::spawn(TEST, dir.path());
    child.wait_for("waiting");
    child.kill();

    // A process without the workflow stores the event; nothing runs it.
    let clock = TestClock::starting_at(start_of_time() + Duration::from_secs(HOUR));
    let engine = Engine::builder()
        .clock(clock.clone())
        .open(dir.path())
        .unwrap();
    engine
        .send_event("across-1", "approval", "sent while down")
        .await
        .unwrap();
    let info = engine
        .instance("across-1")
        .await
        .unwrap()
        .info()
        .await
        .unwrap();
    assert_eq!(info.status, Status::Waiting);
    assert!(!info.workflow_registered);
    engine.close().await;

    // The next process runs the workflow: the wait takes the stored event.
    let engine = Engine::builder()
        .clock(clock.clone())
        .register(approval())
        .open(dir.path())
        .unwrap();
    let run = engine.instance("across-1").await.unwrap();
    assert_eq!(
        within("the result", run.result::<String>()).await.unwrap(),
        "sent while down"
    );
    let waits = kinds(&run).await.into_iter().filter(wait_started).count();
    assert_eq!(waits, 1, "the wait was resumed, not started again");
}
