//! Bad input: oversized payloads and step inputs, step inputs JSON cannot
//! hold, invalid and duplicate ids, unknown
//! instances, zero and enormous durations, events for finished instances.
//! Each is refused with a typed error before anything is stored, or runs
//! without a panic or an overflow.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[path = "support/helpers.rs"]
mod helpers;

use saga_runtime::inspect::InspectedSlot;
use saga_runtime::inspect::{EventKind, ListFilter};
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use saga_runtime::{Error, FailureKind, Instance};

use helpers::{until_status, within};

const LIMIT: usize = 1024;

fn engine() -> Engine {
    Engine::builder()
        .clock(TestClock::auto_advancing())
        .max_payload_bytes(LIMIT)
        .temporary()
        .expect("temporary engine")
}

fn echo() -> impl Workflow<Input = Vec<u8>, Output = usize> + Copy {
    workflow_fn("echo", |ctx: WorkflowContext, input: Vec<u8>| async move {
        let len = input.len();
        let len = ctx
            .step("measure", StepConfig::default(), move |_key| async move {
                Ok(len)
            })
            .await?;
        Ok::<_, WorkflowError>(len)
    })
}

#[tokio::test]
async fn an_oversized_input_is_refused_before_anything_is_stored() {
    let engine = engine();
    let error = engine
        .start(echo(), "big-input", vec![7; LIMIT * 2])
        .await
        .expect_err("over the limit");
    assert!(
        matches!(&error, Error::PayloadTooLarge { what, limit: LIMIT, .. } if what.contains("big-input")),
        "{error:?}"
    );
    assert!(matches!(
        engine.instance("big-input").await,
        Err(Error::UnknownInstance { .. })
    ));
    assert!(engine.list(&ListFilter::all()).await.unwrap().is_empty());
    // Just under the limit is fine.
    let run = engine.start(echo(), "small", vec![7; 100]).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 100);
}

#[tokio::test]
async fn an_oversized_step_output_fails_the_step_for_good_naming_it() {
    let engine = engine();
    let attempts = Arc::new(AtomicU32::new(0));
    let counted = attempts.clone();
    let wf = workflow_fn("big-output", move |ctx: WorkflowContext, (): ()| {
        let counted = counted.clone();
        async move {
            let bytes: Vec<u8> = ctx
                .step("produce", StepConfig::default().retries(5), move |_key| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async move { Ok(vec![1u8; LIMIT * 4]) }
                })
                .await?;
            Ok::<_, WorkflowError>(bytes.len())
        }
    });
    let run = engine.start(wf, "big-output-1", ()).await.unwrap();
    let error = within("the result", run.result())
        .await
        .expect_err("the step failed");
    match &error {
        Error::WorkflowFailed { failure, .. } => {
            assert_eq!(
                failure.kind(),
                &FailureKind::Step {
                    step: "produce".into()
                }
            );
            assert!(failure.message().contains("\"produce\""), "{error}");
            assert!(failure.message().contains("over the limit"), "{error}");
        }
        other => panic!("expected WorkflowFailed, got {other:?}"),
    }
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        1,
        "no retry can make it smaller"
    );
    let history = run.history().await.unwrap();
    assert!(
        !history
            .iter()
            .any(|e| matches!(e.kind, EventKind::StepCompleted { .. }))
    );
    assert!(history.iter().any(|e| matches!(
        &e.kind,
        EventKind::StepFailed { step, attempts: 1, .. } if step == "produce"
    )));
}

/// How often `store_blob` ran, and its compensation.
static BLOB_RUNS: AtomicU32 = AtomicU32::new(0);
static BLOB_UNDONE: AtomicU32 = AtomicU32::new(0);

#[step(name = "store-blob", rollback = delete_blob, retries = 5)]
async fn store_blob(key: IdempotencyKey, blob: Vec<u8>) -> Result<usize, StepError> {
    let _ = key;
    BLOB_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(blob.len())
}

#[rollback]
async fn delete_blob(ctx: RollbackContext<'_, usize>, _blob: Vec<u8>) -> Result<(), StepError> {
    let _ = ctx.key();
    BLOB_UNDONE.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[step(name = "index")]
async fn index(
    key: IdempotencyKey,
    name: String,
    cells: HashMap<(u8, u8), u8>,
) -> Result<usize, StepError> {
    let _ = (key, name);
    Ok(cells.len())
}

#[workflow(name = "blobs")]
async fn blobs(ctx: WorkflowContext, size: usize) -> Result<usize, WorkflowError> {
    if size == 0 {
        // JSON maps need string keys: this input cannot be recorded.
        let cells = HashMap::from([((1, 2), 3)]);
        return Ok(index(&ctx, "grid".into(), cells).await?);
    }
    Ok(store_blob(&ctx, vec![1; size]).await?)
}

/// The failure of a step that `run` ended with.
async fn step_failure(run: &(impl AsRef<Instance> + ?Sized)) -> saga_runtime::Failure {
    let run: &Instance = run.as_ref();
    match within("the result", run.result::<usize>()).await {
        Err(Error::WorkflowFailed { failure, .. }) => *failure,
        other => panic!("expected WorkflowFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn oversized_step_inputs_fail_the_step_before_it_runs_naming_it() {
    let engine = engine();
    let run = engine.start(blobs, "blob-1", LIMIT * 2).await.unwrap();
    let failure = step_failure(&run).await;
    assert_eq!(
        failure.kind(),
        &FailureKind::Step {
            step: "store-blob".into()
        }
    );
    assert!(
        failure.message().contains("inputs of step \"store-blob\""),
        "{failure:?}"
    );
    assert!(failure.message().contains("over the limit"), "{failure:?}");
    assert_eq!(BLOB_RUNS.load(Ordering::SeqCst), 0, "no attempt, no retry");
    assert_eq!(
        BLOB_UNDONE.load(Ordering::SeqCst),
        0,
        "nothing ran, nothing to undo"
    );
    let history = run.history().await.unwrap();
    assert!(history.iter().any(|e| matches!(
        &e.kind,
        EventKind::StepFailed { step, attempts: 0, .. } if step == "store-blob"
    )));
    let inspection = run.inspect().await.unwrap();
    let InspectedSlot::Step(step) = &inspection.slots[0] else {
        panic!("{:?}", inspection.slots)
    };
    assert_eq!(step.input, None, "not recorded");

    // Under the limit, the step runs and its inputs are recorded.
    let run = engine.start(blobs, "blob-2", 10).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 10);
    assert_eq!(BLOB_RUNS.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn step_inputs_that_do_not_encode_fail_the_step_naming_it_and_the_input() {
    let engine = engine();
    let run = engine.start(blobs, "grid-1", 0).await.unwrap();
    let failure = step_failure(&run).await;
    assert_eq!(
        failure.kind(),
        &FailureKind::Step {
            step: "index".into()
        }
    );
    let message = failure.message();
    assert!(message.contains("inputs of step \"index\""), "{message}");
    assert!(
        message.contains("input 2 (`std::collections::hash"),
        "{message}"
    );
    assert!(message.contains("key must be a string"), "{message}");
}

fn waiter() -> impl Workflow<Input = (), Output = String> + Copy {
    workflow_fn("waiter", |ctx: WorkflowContext, (): ()| async move {
        let got: String = ctx
            .wait_for_event("wait", "ping", Duration::from_secs(3600))
            .await?;
        Ok::<_, WorkflowError>(got)
    })
}

#[tokio::test]
async fn an_oversized_event_payload_is_refused_before_anything_is_stored() {
    let engine = Engine::builder()
        .clock(TestClock::new())
        .max_payload_bytes(LIMIT)
        .temporary()
        .unwrap();
    let run = engine.start(waiter(), "w-1", ()).await.unwrap();
    until_status(&run, Status::Waiting).await;
    let before = run.history().await.unwrap().len();
    let error = engine
        .send_event("w-1", "ping", &"x".repeat(LIMIT * 2))
        .await
        .expect_err("over the limit");
    assert!(matches!(error, Error::PayloadTooLarge { .. }), "{error:?}");
    assert_eq!(
        run.history().await.unwrap().len(),
        before,
        "nothing was stored"
    );
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    engine.send_event("w-1", "ping", "ok").await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), "ok");
}

#[tokio::test]
async fn invalid_ids_are_refused_everywhere() {
    let engine = engine();
    let long = "a".repeat(101);
    for id in [
        "",
        long.as_str(),
        "-lead",
        "with space",
        "a/b",
        "a:b",
        "é",
        "a\0b",
    ] {
        let started = engine.start(echo(), id, vec![]).await;
        assert!(
            matches!(started, Err(Error::InvalidInstanceId { .. })),
            "start({id:?}): {started:?}"
        );
        assert!(matches!(
            engine.instance(id).await,
            Err(Error::InvalidInstanceId { .. })
        ));
        assert!(matches!(
            engine.send_event(id, "ping", &1).await,
            Err(Error::InvalidInstanceId { .. })
        ));
    }
    assert!(engine.list(&ListFilter::all()).await.unwrap().is_empty());
    let longest = "Z".repeat(100);
    for id in [longest.as_str(), "_x", "a-b_C9", "0"] {
        let run = engine.start(echo(), id, vec![1]).await.unwrap();
        assert_eq!(within("the result", run.result()).await.unwrap(), 1, "{id}");
    }
}

#[tokio::test]
async fn a_duplicate_id_returns_the_same_instance_or_is_refused_for_another_workflow() {
    let engine = engine();
    let runs = Arc::new(AtomicU32::new(0));
    let counted = runs.clone();
    let once = workflow_fn("once", move |ctx: WorkflowContext, n: u32| {
        let counted = counted.clone();
        async move {
            let n = ctx
                .step("count", StepConfig::default(), move |_key| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async move { Ok(n) }
                })
                .await?;
            Ok::<_, WorkflowError>(n)
        }
    });
    let first = engine.start(once.clone(), "dup", 1).await.unwrap();
    assert_eq!(
        within("the result of first", first.result()).await.unwrap(),
        1
    );
    // The same id and input again is the same instance.
    let second = engine.start(once.clone(), "dup", 1).await.unwrap();
    assert_eq!(
        within("the result of second", second.result())
            .await
            .unwrap(),
        1
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "nothing ran twice");
    // Another input under that id is refused, not silently answered.
    let error = engine
        .start(once, "dup", 2)
        .await
        .expect_err("another input");
    assert!(
        matches!(&error, Error::InputMismatch { id } if id == "dup"),
        "{error:?}"
    );
    let error = engine
        .start(echo(), "dup", vec![])
        .await
        .expect_err("taken");
    assert!(
        matches!(&error, Error::InstanceIdInUse { existing, requested, .. }
            if existing == "once" && requested == "echo"),
        "{error:?}"
    );
    assert_eq!(engine.list(&ListFilter::all()).await.unwrap().len(), 1);
}

#[tokio::test]
async fn every_handle_call_on_an_unknown_instance_is_unknown_instance() {
    let engine = Engine::builder()
        .clock(TestClock::auto_advancing())
        .retention(Duration::ZERO)
        .temporary()
        .unwrap();
    assert!(matches!(
        engine.instance("nope").await,
        Err(Error::UnknownInstance { .. })
    ));
    assert!(matches!(
        engine.send_event("nope", "ping", &1).await,
        Err(Error::UnknownInstance { .. })
    ));
    // A handle whose instance went away (removed by retention).
    let run = engine.start(echo(), "gone", vec![1]).await.unwrap();
    within("the result", run.result()).await.unwrap();
    assert_eq!(engine.sweep_expired().await.unwrap(), 1);
    let unknown = |what: &str, result: Result<(), Error>| {
        assert!(
            matches!(result, Err(Error::UnknownInstance { .. })),
            "{what}: {result:?}"
        );
    };
    unknown("status", run.status().await.map(drop));
    unknown("info", run.info().await.map(drop));
    unknown("history", run.history().await.map(drop));
    unknown("result", within("the result", run.result()).await.map(drop));
    unknown("pause", run.pause().await);
    unknown("resume", run.resume().await);
    unknown("terminate", run.terminate().await);
    unknown(
        "terminate_with_rollback",
        run.terminate_with_rollback().await,
    );
    unknown("restart", run.restart().await);
    unknown("restart_from", run.restart_from("measure").await);
    unknown("send_event", engine.send_event("gone", "ping", &1).await);
}

/// Sleeps `duration`, then runs a step with timeout `timeout`.
fn sleeper(duration: Duration, timeout: Duration) -> impl Workflow<Input = (), Output = u8> + Copy {
    workflow_fn("sleeper", move |ctx: WorkflowContext, (): ()| async move {
        ctx.sleep("nap", duration).await?;
        let n = ctx
            .step(
                "after",
                StepConfig::default().timeout(timeout),
                |_key| async move { Ok(1u8) },
            )
            .await?;
        Ok::<_, WorkflowError>(n)
    })
}

#[tokio::test]
async fn zero_and_enormous_durations_neither_panic_nor_overflow() {
    // Zero everywhere: done at once.
    let engine = engine();
    let run = engine
        .start(sleeper(Duration::ZERO, Duration::MAX), "zero", ())
        .await
        .unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 1);
    // Duration::MAX and "99999999 days" on an auto-advancing clock: the
    // clock jumps to a far future and the workflow goes on.
    for (id, duration) in [
        ("max", Duration::MAX),
        (
            "days",
            saga_runtime::time::IntoDuration::into_duration("99999999 days").unwrap(),
        ),
    ] {
        let run = engine
            .start(sleeper(duration, Duration::from_secs(60)), id, ())
            .await
            .unwrap();
        assert_eq!(within("the result", run.result()).await.unwrap(), 1, "{id}");
        let wake = run
            .history()
            .await
            .unwrap()
            .into_iter()
            .find_map(|e| match e.kind {
                EventKind::SleepStarted { wake_at, .. } => Some(wake_at),
                _ => None,
            });
        assert!(wake.is_some(), "{id}: the sleep was recorded");
    }
    // On a clock that stands still, and on the real one, an enormous sleep
    // waits (no overflow, no early wake) and can be ended.
    for engine in [
        Engine::builder()
            .clock(TestClock::new())
            .temporary()
            .unwrap(),
        Engine::temporary().unwrap(),
    ] {
        let run = engine
            .start(sleeper(Duration::MAX, Duration::MAX), "forever", ())
            .await
            .unwrap();
        until_status(&run, Status::Waiting).await;
        // An overflowing wake time would end the sleep at once.
        helpers::quiet(&engine).await;
        assert_eq!(run.status().await.unwrap(), Status::Waiting);
        within("the terminate", run.terminate()).await.unwrap();
        assert_eq!(run.status().await.unwrap(), Status::Terminated);
    }
    // A zero and an enormous event timeout.
    let wf = workflow_fn("timeouts", |ctx: WorkflowContext, (): ()| async move {
        let zero = ctx
            .wait_for_event::<u8>("zero", "never", Duration::ZERO)
            .await;
        assert!(matches!(zero, Err(WaitError::Timeout { .. })), "{zero:?}");
        let got: u8 = ctx.wait_for_event("max", "ping", Duration::MAX).await?;
        Ok::<_, WorkflowError>(got)
    });
    let engine = Engine::builder()
        .clock(TestClock::new())
        .temporary()
        .unwrap();
    let run = engine.start(wf, "timeouts-1", ()).await.unwrap();
    engine.send_event("timeouts-1", "ping", &9u8).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 9);
}

#[tokio::test]
async fn an_invalid_duration_string_is_an_error_the_workflow_sees() {
    let engine = engine();
    let wf = workflow_fn("bad-duration", |ctx: WorkflowContext, (): ()| async move {
        let slept = ctx.sleep("nap", "3 fortnights").await;
        assert!(
            matches!(slept, Err(WaitError::InvalidDuration { .. })),
            "{slept:?}"
        );
        let too_long = ctx.sleep("nap-2", "99999999999999999999 days").await;
        assert!(matches!(too_long, Err(WaitError::InvalidDuration { .. })));
        Ok::<_, WorkflowError>(())
    });
    let run = engine.start(wf, "bad-1", ()).await.unwrap();
    within("the result", run.result()).await.unwrap();
}

#[tokio::test]
async fn events_for_finished_instances_are_invalid_state() {
    let engine = engine();
    let run = engine.start(echo(), "done", vec![1, 2]).await.unwrap();
    within("the result", run.result()).await.unwrap();
    let error = engine
        .send_event("done", "ping", &1)
        .await
        .expect_err("finished");
    assert!(
        matches!(
            error,
            Error::InvalidState {
                status: Status::Complete,
                ..
            }
        ),
        "{error:?}"
    );
    // On a clock that does not move, so the wait cannot time out first.
    let engine = Engine::builder()
        .clock(TestClock::new())
        .temporary()
        .unwrap();
    let waiting = engine.start(waiter(), "ended", ()).await.unwrap();
    within("the terminate", waiting.terminate()).await.unwrap();
    assert!(matches!(
        engine.send_event("ended", "ping", "late").await,
        Err(Error::InvalidState {
            status: Status::Terminated,
            ..
        })
    ));
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Reading {
    sensor: String,
    value: f64,
}

#[workflow(name = "record-reading")]
async fn record_reading(ctx: WorkflowContext, reading: Reading) -> Result<f64, WorkflowError> {
    let _ = ctx;
    Ok(reading.value)
}

#[workflow(name = "keep-tree")]
async fn keep_tree(ctx: WorkflowContext, tree: serde_json::Value) -> Result<bool, WorkflowError> {
    let _ = ctx;
    Ok(tree.is_array())
}

/// JSON arrays nested `depth` deep.
fn nested(depth: usize) -> serde_json::Value {
    (0..depth).fold(serde_json::Value::Null, |inner, _| {
        serde_json::Value::Array(vec![inner])
    })
}

/// Refused at `start` with an `Encode` error that says what to do, and
/// nothing stored.
async fn assert_refused_at_start(engine: &Engine, id: &str, error: Error, says: &str) {
    match &error {
        Error::Encode { what, detail } => {
            assert!(what.contains(id), "{error}");
            assert!(detail.contains(says), "{error}");
        }
        other => panic!("expected Encode, got {other:?}"),
    }
    assert!(
        matches!(
            engine.instance(id).await,
            Err(Error::UnknownInstance { .. })
        ),
        "nothing was stored for {id}"
    );
}

#[tokio::test]
async fn a_workflow_input_json_cannot_read_back_is_refused_at_start() {
    let engine = engine();
    let nan = Reading {
        sensor: "t1".into(),
        value: f64::NAN,
    };
    let error = engine
        .start(record_reading, "nan-1", nan)
        .await
        .unwrap_err();
    assert_refused_at_start(&engine, "nan-1", error, "non-finite float").await;

    let error = engine
        .start(keep_tree, "deep-1", nested(128))
        .await
        .unwrap_err();
    assert_refused_at_start(&engine, "deep-1", error, "127 levels").await;

    // What JSON holds runs.
    let run = engine
        .start(keep_tree, "deep-2", nested(100))
        .await
        .unwrap();
    assert!(within("the result", run.result()).await.unwrap());
    let fine = Reading {
        sensor: "t1".into(),
        value: 21.5,
    };
    let run = engine.start(record_reading, "fine-1", fine).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 21.5);
}

#[workflow(name = "await-reading")]
async fn await_reading(ctx: WorkflowContext, (): ()) -> Result<f64, WorkflowError> {
    let reading: Reading = ctx
        .wait_for_event("wait-reading", "reading", "1 hour")
        .await?;
    Ok(reading.value)
}

#[tokio::test]
async fn an_event_payload_json_cannot_read_back_is_refused_at_send() {
    let engine = Engine::builder()
        .clock(TestClock::new())
        .temporary()
        .unwrap();
    let run = engine.start(await_reading, "reader", ()).await.unwrap();
    until_status(&run, Status::Waiting).await;
    let before = run.history().await.unwrap().len();
    let nan = Reading {
        sensor: "t1".into(),
        value: f64::INFINITY,
    };
    let error = engine
        .send_event("reader", "reading", &nan)
        .await
        .expect_err("an infinity");
    assert!(
        matches!(&error, Error::Encode { detail, .. } if detail.contains("non-finite float (NaN or an infinity) at .value")),
        "{error:?}"
    );
    let error = engine
        .send_event("reader", "reading", &nested(128))
        .await
        .expect_err("too deep");
    assert!(
        matches!(&error, Error::Encode { detail, .. } if detail.contains("127 levels")),
        "{error:?}"
    );
    assert_eq!(run.history().await.unwrap().len(), before, "nothing stored");
    assert_eq!(run.status().await.unwrap(), Status::Waiting);

    let fine = Reading {
        sensor: "t1".into(),
        value: -3.0,
    };
    engine.send_event("reader", "reading", &fine).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), -3.0);
}

#[step(name = "measure-text", read_only)]
async fn measure_text(text: String) -> Result<usize, StepError> {
    Ok(text.len())
}

#[workflow(name = "forward-text")]
async fn forward_text(ctx: WorkflowContext, text: String) -> Result<usize, WorkflowError> {
    Ok(measure_text(&ctx, text).await?)
}

#[tokio::test]
async fn payload_limit_errors_say_which_limit_and_by_how_much() {
    let engine = engine();
    // `"x…x"`: the limit exactly, so the start takes it, but the step's
    // inputs (`["x…x"]`) are 2 bytes longer.
    let run = engine
        .start(forward_text, "exact", "x".repeat(LIMIT - 2))
        .await
        .unwrap();
    let failure = step_failure(&run).await;
    let message = failure.message();
    assert!(
        message.contains("inputs of step \"measure-text\""),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "{} bytes as JSON (stored as one array of them; the limit applies before the engine's codec encodes them), 2 bytes over the limit of {LIMIT} bytes",
            LIMIT + 2
        )),
        "{message}"
    );

    let error = engine
        .start(forward_text, "over", "x".repeat(LIMIT))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains(&format!(
            "input of instance \"over\" is {} bytes (as JSON, before the engine's codec encodes it), 2 bytes over the limit of {LIMIT} bytes",
            LIMIT + 2
        )),
        "{error}"
    );
}

#[tokio::test]
async fn event_ids_are_counted_in_characters() {
    let engine = Engine::builder()
        .clock(TestClock::new())
        .temporary()
        .unwrap();
    engine.start(await_reading, "ids", ()).await.unwrap();
    let reading = Reading {
        sensor: "t1".into(),
        value: 1.0,
    };
    // 150 characters, 300 bytes.
    let umlauts = "ü".repeat(150);
    let sent = engine
        .event("ids", "other")
        .id(umlauts.as_str())
        .send(&reading)
        .await
        .unwrap();
    assert_eq!(sent, Sent::Delivered);
    let sent = engine
        .event("ids", "other")
        .id("€".repeat(200))
        .send(&reading)
        .await
        .unwrap();
    assert_eq!(sent, Sent::Delivered);
    for too_long in ["a".repeat(201), "ü".repeat(201), String::new()] {
        let error = engine
            .event("ids", "other")
            .id(too_long.as_str())
            .send(&reading)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, Error::InvalidArgument(m) if m.contains("1-200 characters")),
            "{error:?}"
        );
    }
}

#[workflow(name = "await-approval")]
async fn await_approval(ctx: WorkflowContext, (): ()) -> Result<String, WorkflowError> {
    let approval: String = ctx
        .wait_for_event("wait-approval", "approval", "7 days")
        .await?;
    Ok(approval)
}

/// An engine whose clock does not move: a waiting instance hibernates and
/// stays so.
fn still_engine(builder: saga_runtime::EngineBuilder) -> Engine {
    builder.clock(TestClock::new()).temporary().unwrap()
}

/// 2,000 events it does not wait for pile up in a waiting instance, and
/// the one it waits for still gets through. What each costs as they pile
/// up (the same the 2,000th time as the first) is a speed, so the bench
/// measures it: `cargo bench -p saga-runtime --bench waiting_memory`.
#[tokio::test]
async fn two_thousand_events_pile_up_and_the_awaited_one_still_gets_through() {
    let engine = still_engine(Engine::builder());
    let run = engine.start(await_approval, "busy", ()).await.unwrap();
    until_status(&run, Status::Waiting).await;
    let noise = "x".repeat(100);
    for _ in 0..2_000 {
        engine.send_event("busy", "noise", &noise).await.unwrap();
    }
    engine.send_event("busy", "approval", "yes").await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), "yes");
    assert_eq!(run.status().await.unwrap(), Status::Complete);
}

#[tokio::test]
async fn an_instance_full_of_events_refuses_more_at_the_sender() {
    let engine = still_engine(Engine::builder().max_pending_events(5));
    let run = engine.start(await_approval, "full", ()).await.unwrap();
    until_status(&run, Status::Waiting).await;
    for _ in 0..5 {
        engine.send_event("full", "noise", "n").await.unwrap();
    }
    let before = run.history().await.unwrap().len();
    let error = engine
        .send_event("full", "noise", "n")
        .await
        .expect_err("over the cap");
    assert!(
        matches!(&error, Error::InstanceFull { id, limit: 5, of: "pending events" } if id == "full"),
        "{error:?}"
    );
    assert!(error.to_string().contains("max_pending_events"), "{error}");
    assert_eq!(run.history().await.unwrap().len(), before, "nothing stored");
    // What the instance waits for is taken at once: noise does not keep
    // it out.
    engine.send_event("full", "approval", "yes").await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), "yes");

    let engine = still_engine(Engine::builder().max_journal_records(12));
    let run = engine.start(await_approval, "long", ()).await.unwrap();
    until_status(&run, Status::Waiting).await;
    let refused = async {
        for _ in 0..12 {
            if let Err(error) = engine.send_event("long", "noise", "n").await {
                return error;
            }
        }
        panic!("12 records, and more events were taken");
    }
    .await;
    assert!(
        matches!(
            &refused,
            Error::InstanceFull {
                limit: 12,
                of: "journal records",
                ..
            }
        ),
        "{refused:?}"
    );
    assert!(matches!(
        engine.send_event("long", "approval", "yes").await,
        Err(Error::InstanceFull { .. })
    ));
    // Control still works: the instance can be ended.
    within("the terminate", run.terminate()).await.unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
}
