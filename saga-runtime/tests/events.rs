//! Waiting for events: an event is stored durably when sent and delivered
//! to the wait for its type, whether it came before or after the workflow
//! got there, even across a process restart; a timeout is an error the
//! workflow may catch; bad sends get typed errors and store nothing.
//!
//! The workflows are written as users write them, with `#[workflow]` and
//! `#[step]`: nothing here needs the hand-written API.

#[path = "support/child.rs"]
mod child;

#[path = "support/helpers.rs"]
mod helpers;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use saga_runtime::{Error, Instance, Sent};

use child::{DataDir, child_dir, report};

use helpers::{engine_on, kinds, wait_until, within};

const HOUR: u64 = 60 * 60;

fn start_of_time() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_893_456_000)
}

/// Polls until the instance's history has an event that `pred` accepts.
async fn until_history(run: &(impl AsRef<Instance> + ?Sized), pred: impl Fn(&EventKind) -> bool) {
    let run: &Instance = run.as_ref();
    wait_until("a history event", || async {
        kinds(run).await.iter().any(&pred)
    })
    .await;
}

fn wait_started(kind: &EventKind) -> bool {
    matches!(kind, EventKind::EventWaitStarted { .. })
}

/// Waits (7 days at most) for one "approval" and returns it.
#[workflow(name = "approval")]
async fn approval(ctx: WorkflowContext, (): ()) -> Result<String, WorkflowError> {
    let decision: String = ctx
        .wait_for_event("wait-approval", "approval", "7 days")
        .await?;
    Ok(decision)
}

/// Sleeps an hour before it waits for an "approval".
#[workflow(name = "approval-after-nap")]
async fn approval_after_a_nap(ctx: WorkflowContext, (): ()) -> Result<String, WorkflowError> {
    ctx.sleep("nap", "1 hour").await?;
    let decision: String = ctx
        .wait_for_event("wait-approval", "approval", "7 days")
        .await?;
    Ok(decision)
}

/// Shouts the decision it is given.
#[step(name = "after", read_only)]
async fn shout(decision: String) -> Result<String, StepError> {
    Ok(decision.to_uppercase())
}

/// Waits an hour for an "approval"; on a timeout it goes on with a note
/// of what timed out. Either way it shouts what it got.
#[workflow(name = "patient")]
async fn patient(ctx: WorkflowContext, (): ()) -> Result<String, WorkflowError> {
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
    Ok(shout(&ctx, decision).await?)
}

/// Naps an hour, then takes three "vote" events, one wait each.
#[workflow(name = "two-votes")]
async fn two_votes(ctx: WorkflowContext, (): ()) -> Result<Vec<u32>, WorkflowError> {
    ctx.sleep("nap", "1 hour").await?;
    let first: u32 = ctx.wait_for_event("first-vote", "vote", "1 day").await?;
    let second: u32 = ctx.wait_for_event("second-vote", "vote", "1 day").await?;
    let third: u32 = ctx.wait_for_event("third-vote", "vote", "1 day").await?;
    Ok(vec![first, second, third])
}

/// Takes two "hook" events, whatever their payloads.
#[workflow(name = "two-hooks")]
async fn two_hooks(ctx: WorkflowContext, (): ()) -> Result<Vec<serde_json::Value>, WorkflowError> {
    let first: serde_json::Value = ctx.wait_for_event("first", "hook", "1 day").await?;
    let second: serde_json::Value = ctx.wait_for_event("second", "hook", "1 day").await?;
    Ok(vec![first, second])
}

/// Naps an hour, then returns its input.
#[workflow(name = "echo-map")]
async fn echo_map(
    ctx: WorkflowContext,
    input: serde_json::Value,
) -> Result<serde_json::Value, WorkflowError> {
    ctx.sleep("nap", "1 hour").await?;
    Ok(input)
}

#[tokio::test]
async fn an_event_sent_before_the_wait_is_kept_and_delivered() {
    let clock = TestClock::new();
    let engine = engine_on(&clock).await;
    let run = engine
        .start(approval_after_a_nap, "early-1", ())
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
    let engine = engine_on(&clock).await;
    let run = engine.start(approval, "late-1", ()).await.unwrap();
    until_history(&run, wait_started).await;
    helpers::quiet(&engine).await;
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
    let engine = engine_on(&clock).await;
    let run = engine.start(patient, "patient-1", ()).await.unwrap();
    until_history(&run, wait_started).await;
    within("the wait's deadline", clock.wait_for_sleepers(1)).await;
    clock.advance(Duration::from_secs(HOUR - 1));
    // The clock wakes what is due inside `advance`: it still holds the deadline.
    assert_eq!(clock.sleepers(), 1, "the deadline is not due");
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
    let engine = engine_on(&clock).await;
    let run = engine.start(approval, "impatient-1", ()).await.unwrap();
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
    let engine = engine_on(&clock).await;
    let run = engine.start(two_votes, "votes-1", ()).await.unwrap();
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
    let engine = engine_on(&clock).await;
    match engine.send_event("nobody", "approval", "hello").await {
        Err(Error::UnknownInstance { id }) => assert_eq!(id, "nobody"),
        other => panic!("expected UnknownInstance, got {other:?}"),
    }
    match engine.send_event("not an id!", "approval", "hello").await {
        Err(Error::InvalidInstanceId { .. }) => {}
        other => panic!("expected InvalidInstanceId, got {other:?}"),
    }
    let run = engine.start(approval, "done-1", ()).await.unwrap();
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
    let engine = helpers::fresh(Engine::builder().clock(clock.clone()).max_payload_bytes(64)).await;
    let run = engine.start(approval, "big-1", ()).await.unwrap();
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
    helpers::quiet(&engine).await;
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
        let run = engine.start(approval, "across-1", ()).await.unwrap();
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
        .register(approval)
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

/// Two fields, serialized in this order.
#[derive(Serialize, Deserialize)]
struct AB {
    a: u32,
    b: u32,
}

/// The same two fields, serialized the other way round.
#[derive(Serialize, Deserialize)]
struct BA {
    b: u32,
    a: u32,
}

#[tokio::test]
async fn an_event_id_sent_twice_is_stored_once_and_reported_a_duplicate() {
    let clock = TestClock::new();
    let engine = engine_on(&clock).await;
    let run = engine.start(two_hooks, "hooks-1", ()).await.unwrap();
    let send = |id: &'static str| engine.event("hooks-1", "hook").id(id);
    assert_eq!(
        send("evt_1").send(&AB { a: 1, b: 2 }).await.unwrap(),
        Sent::Delivered
    );
    // The same payload with its keys in another order is the same event.
    assert_eq!(
        send("evt_1").send(&BA { b: 2, a: 1 }).await.unwrap(),
        Sent::Duplicate
    );
    match send("evt_1").send(&AB { a: 1, b: 3 }).await {
        Err(Error::EventIdConflict { id, event_id }) => {
            assert_eq!((id.as_str(), event_id.as_str()), ("hooks-1", "evt_1"));
        }
        other => panic!("expected EventIdConflict, got {other:?}"),
    }
    assert!(matches!(
        engine
            .event("hooks-1", "other")
            .id("evt_1")
            .send(&AB { a: 1, b: 2 })
            .await,
        Err(Error::EventIdConflict { .. })
    ));
    assert_eq!(
        send("evt_2").send(&AB { a: 5, b: 6 }).await.unwrap(),
        Sent::Delivered
    );
    let values = within("the result", run.result()).await.unwrap();
    assert_eq!(
        values,
        [
            serde_json::json!({"a": 1, "b": 2}),
            serde_json::json!({"a": 5, "b": 6})
        ]
    );
    let received = kinds(&run)
        .await
        .iter()
        .filter(|k| matches!(k, EventKind::EventReceived { .. }))
        .count();
    assert_eq!(received, 2, "the duplicate was not stored");
    // After the end, a late retry of the same webhook is still a duplicate.
    assert_eq!(
        send("evt_2").send(&AB { a: 5, b: 6 }).await.unwrap(),
        Sent::Duplicate
    );
}

#[tokio::test]
async fn event_ids_are_remembered_across_a_reopen() {
    let dir = std::env::temp_dir().join(format!("saga-event-ids-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    {
        let engine = Engine::open(&dir).unwrap();
        engine.start(approval, "remember-1", ()).await.unwrap();
        let sent = engine
            .event("remember-1", "approval")
            .id("e-1")
            .send("yes")
            .await;
        assert_eq!(sent.unwrap(), Sent::Delivered);
        engine.close().await;
    }
    let engine = Engine::open(&dir).unwrap();
    let sent = engine
        .event("remember-1", "approval")
        .id("e-1")
        .send("yes")
        .await;
    assert_eq!(sent.unwrap(), Sent::Duplicate);
    engine.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn start_with_event_creates_the_instance_and_its_wait_sees_the_event() {
    let clock = TestClock::new();
    let engine = engine_on(&clock).await;
    // No instance yet: a plain send is refused, start-with-event is the answer.
    assert!(matches!(
        engine.send_event("webhook-1", "approval", "early").await,
        Err(Error::UnknownInstance { .. })
    ));
    let (run, sent) = engine
        .event("webhook-1", "approval")
        .id("evt_9")
        .send_with_start(approval, (), "approved")
        .await
        .unwrap();
    assert_eq!(sent, Sent::Delivered);
    assert_eq!(
        within("the result", run.result()).await.unwrap(),
        "approved"
    );
    // The event was stored with the instance, before its driver ran.
    let history = kinds(&run).await;
    assert!(
        matches!(history[0], EventKind::InstanceCreated { .. }),
        "{history:?}"
    );
    assert!(
        matches!(history[1], EventKind::EventReceived { .. }),
        "{history:?}"
    );
    // Again, as a retried webhook would: the same instance, a duplicate.
    let (again, sent) = engine
        .event("webhook-1", "approval")
        .id("evt_9")
        .send_with_start(approval, (), "approved")
        .await
        .unwrap();
    assert_eq!(sent, Sent::Duplicate);
    assert_eq!(again.result().await.unwrap(), "approved");

    // An instance that exists already just gets the event.
    let run = engine.start(approval, "webhook-2", ()).await.unwrap();
    let (_, sent) = engine
        .event("webhook-2", "approval")
        .send_with_start(approval, (), "late")
        .await
        .unwrap();
    assert_eq!(sent, Sent::Delivered);
    assert_eq!(within("the result", run.result()).await.unwrap(), "late");
}

#[tokio::test]
async fn start_with_an_existing_id_and_another_input_is_a_typed_error() {
    let clock = TestClock::new();
    let engine = engine_on(&clock).await;
    let input = serde_json::to_value(AB { a: 1, b: 2 }).unwrap();
    engine.start(echo_map, "echo-1", input).await.unwrap();
    // The same value, its keys in another order: the existing instance.
    let same = serde_json::to_value(BA { b: 2, a: 1 }).unwrap();
    engine.start(echo_map, "echo-1", same).await.unwrap();
    let other = serde_json::to_value(AB { a: 1, b: 9 }).unwrap();
    match engine.start(echo_map, "echo-1", other).await {
        Err(Error::InputMismatch { id }) => assert_eq!(id, "echo-1"),
        other => panic!("expected InputMismatch, got {:?}", other.map(|_| ())),
    }
    // Nor may start-with-event change the input.
    let other = serde_json::json!({"a": 3});
    assert!(matches!(
        engine
            .event("echo-1", "ping")
            .send_with_start(echo_map, other, "x")
            .await,
        Err(Error::InputMismatch { .. })
    ));
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Decision {
    approved: bool,
}

/// Waits for a typed "decision" (a day at most).
#[workflow(name = "decide")]
async fn decide(ctx: WorkflowContext, (): ()) -> Result<bool, WorkflowError> {
    let decision: Decision = ctx
        .wait_for_event("wait-decision", "decision", "1 day")
        .await?;
    Ok(decision.approved)
}

/// The same wait, failing on an event that does not decode.
#[workflow(name = "decide-strictly")]
async fn decide_strictly(ctx: WorkflowContext, (): ()) -> Result<bool, WorkflowError> {
    let decision: Decision = ctx
        .wait_for_event("wait-decision", "decision", "1 day")
        .fail_on_undecodable()
        .await?;
    Ok(decision.approved)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_that_does_not_decode_is_set_aside_and_the_wait_goes_on() {
    let clock = TestClock::new();
    let engine = engine_on(&clock).await;
    let mut events = engine.subscribe();
    let run = engine.start(decide, "decide-1", ()).await.unwrap();
    until_history(&run, wait_started).await;
    let bad = serde_json::json!({"approved": "yes"});
    engine
        .send_event("decide-1", "decision", &bad)
        .await
        .unwrap();
    until_history(&run, |k| matches!(k, EventKind::EventRejected { .. })).await;
    helpers::quiet(&engine).await;
    // Still waiting, with nothing pending: the event was set aside, and
    // said why.
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    let inspected = run.inspect().await.unwrap();
    assert!(inspected.pending_events.is_empty(), "{inspected:?}");
    assert_eq!(inspected.rejected_events.len(), 1);
    let rejected = &inspected.rejected_events[0];
    assert_eq!(
        (rejected.wait.as_str(), rejected.event_type.as_str()),
        ("wait-decision", "decision")
    );
    assert!(
        rejected.error.contains("invalid type"),
        "{}",
        rejected.error
    );
    let history = run.history().await.unwrap();
    let line = history
        .iter()
        .find(|e| matches!(e.kind, EventKind::EventRejected { .. }))
        .unwrap()
        .to_string();
    assert!(
        line.contains("wait \"wait-decision\" rejected event \"decision\""),
        "{line}"
    );
    // Subscribers see it too.
    let mut seen = false;
    while !seen {
        let event = within("the rejection's event", events.recv())
            .await
            .unwrap();
        seen =
            event.instance == "decide-1" && matches!(event.kind, EventKind::EventRejected { .. });
    }
    // A good one is taken.
    engine
        .send_event("decide-1", "decision", &Decision { approved: true })
        .await
        .unwrap();
    assert!(within("the result", run.result()).await.unwrap());
    assert_eq!(run.inspect().await.unwrap().rejected_events.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_leaves_the_waits_timeout_as_it_was() {
    let clock = TestClock::new();
    let engine = engine_on(&clock).await;
    let run = engine.start(decide, "decide-2", ()).await.unwrap();
    until_history(&run, wait_started).await;
    within("the wait's deadline", clock.wait_for_sleepers(1)).await;
    engine
        .send_event("decide-2", "decision", &7u64)
        .await
        .unwrap();
    until_history(&run, |k| matches!(k, EventKind::EventRejected { .. })).await;
    clock.advance(Duration::from_secs(24 * HOUR));
    let ended = within("the timeout", run.result()).await;
    assert!(
        matches!(&ended, Err(Error::WorkflowFailed { failure, .. }) if failure.message().contains("timed out")),
        "{ended:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_fails_on_undecodable_events_fails_the_workflow() {
    let clock = TestClock::new();
    let engine = engine_on(&clock).await;
    let run = engine.start(decide_strictly, "decide-3", ()).await.unwrap();
    until_history(&run, wait_started).await;
    let bad = serde_json::json!({"approved": "yes"});
    engine
        .send_event("decide-3", "decision", &bad)
        .await
        .unwrap();
    let ended = within("the failure", run.result()).await;
    assert!(
        matches!(&ended, Err(Error::WorkflowFailed { failure, .. }) if failure.message().contains("does not decode")),
        "{ended:?}"
    );
    assert!(run.inspect().await.unwrap().rejected_events.is_empty());
}

/// A payload type whose `Deserialize` panics on "boom".
#[derive(Debug)]
struct Fragile;

impl<'de> Deserialize<'de> for Fragile {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        assert_ne!(text, "boom", "the payload type panics");
        Ok(Fragile)
    }
}

#[workflow(name = "fragile")]
async fn fragile(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    let _: Fragile = ctx.wait_for_event("wait-fragile", "poke", "1 day").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_type_that_panics_while_decoding_sets_the_event_aside() {
    let clock = TestClock::new();
    let engine = engine_on(&clock).await;
    let run = engine.start(fragile, "fragile-1", ()).await.unwrap();
    until_history(&run, wait_started).await;
    engine
        .send_event("fragile-1", "poke", "boom")
        .await
        .unwrap();
    until_history(&run, |k| matches!(k, EventKind::EventRejected { .. })).await;
    let rejected = run.inspect().await.unwrap().rejected_events;
    assert!(rejected[0].error.contains("panicked"), "{rejected:?}");
    // The instance goes on: a payload that decodes is taken.
    engine
        .send_event("fragile-1", "poke", "fine")
        .await
        .unwrap();
    within("the result", run.result()).await.unwrap();
}
