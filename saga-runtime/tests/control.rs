//! Instance control through the handle: pause stops at the next step
//! boundary and resume goes on; terminate ends the instance for good;
//! restart runs it again from the beginning, restart_from from one step;
//! operations that do not apply to an instance's status are typed errors.
//!
//! Every workflow here is written with `#[workflow]` and `#[step]`, as
//! users write them: none of these tests is about the hand-written API
//! (`workflow_fn`, `ctx.step`), which other files cover.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use saga_runtime::{Engine, Error, Instance};
use tokio::sync::Semaphore;

use helpers::{engine_on, fresh, kinds, wait_until, within};

const HOUR: u64 = 60 * 60;
const DAY: u64 = 24 * HOUR;

fn completed(step: &str) -> impl Fn(&EventKind) -> bool + '_ {
    move |k| matches!(k, EventKind::StepCompleted { step: s, .. } if s == step)
}

fn started(step: &str) -> impl Fn(&EventKind) -> bool + '_ {
    move |k| matches!(k, EventKind::StepStarted { step: s, .. } if s == step)
}

async fn count(run: &(impl AsRef<Instance> + ?Sized), pred: impl Fn(&EventKind) -> bool) -> usize {
    let run: &Instance = run.as_ref();
    kinds(run).await.iter().filter(|k| pred(k)).count()
}

/// What the steps did, seen from outside the engine: a service each test
/// gives its own engine.
struct Probe {
    one: AtomicU32,
    two: AtomicU32,
    three: AtomicU32,
    /// Step "one" of `three_steps` takes a permit before it finishes; none
    /// are given unless the test says so.
    gate: Semaphore,
    /// The inputs step "one" of `three_steps` was called with.
    inputs: std::sync::Mutex<Vec<u64>>,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            one: AtomicU32::new(0),
            two: AtomicU32::new(0),
            three: AtomicU32::new(0),
            gate: Semaphore::new(0),
            inputs: std::sync::Mutex::default(),
        }
    }
}

impl Probe {
    fn runs(&self) -> [u32; 3] {
        [
            self.one.load(Ordering::SeqCst),
            self.two.load(Ordering::SeqCst),
            self.three.load(Ordering::SeqCst),
        ]
    }
}

/// An engine on `clock`, on a fresh store, whose steps report to `probe`.
async fn engine_with(clock: &TestClock, probe: &Arc<Probe>) -> Engine {
    fresh(
        Engine::builder()
            .clock(clock.clone())
            .provide_arc(probe.clone()),
    )
    .await
}

/// Records its input, waits for a permit of the gate, adds one.
#[step(name = "one")]
async fn gated_one(
    key: IdempotencyKey,
    probe: Service<Probe>,
    input: u64,
) -> Result<u64, StepError> {
    let _ = key;
    probe.one.fetch_add(1, Ordering::SeqCst);
    probe.inputs.lock().unwrap().push(input);
    probe.gate.acquire().await.unwrap().forget();
    Ok(input + 1)
}

#[step(name = "two")]
async fn times_ten(key: IdempotencyKey, probe: Service<Probe>, one: u64) -> Result<u64, StepError> {
    let _ = key;
    probe.two.fetch_add(1, Ordering::SeqCst);
    Ok(one * 10)
}

#[step(name = "three")]
async fn plus_five(key: IdempotencyKey, probe: Service<Probe>, two: u64) -> Result<u64, StepError> {
    let _ = key;
    probe.three.fetch_add(1, Ordering::SeqCst);
    Ok(two + 5)
}

/// Steps "one" (gated), "two", "three" in a row; the output is built from
/// the input and every step's output.
#[workflow(name = "three-steps")]
async fn three_steps(ctx: WorkflowContext, input: u64) -> Result<String, WorkflowError> {
    let one = gated_one(&ctx, input).await?;
    let two = times_ten(&ctx, one).await?;
    let three = plus_five(&ctx, two).await?;
    Ok(format!("{input}/{one}/{two}/{three}"))
}

#[step(name = "one")]
async fn before_nap(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Ok(())
}

#[step(name = "two")]
async fn after_nap(key: IdempotencyKey, probe: Service<Probe>) -> Result<(), StepError> {
    let _ = key;
    probe.two.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Step "one", a day's sleep, step "two"; the probe counts the runs of
/// "two".
#[workflow(name = "nap-between")]
async fn nap_between_steps(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    before_nap(&ctx).await?;
    ctx.sleep("nap", "1 day").await?;
    after_nap(&ctx).await?;
    Ok(())
}

#[step(name = "draft")]
async fn draft(key: IdempotencyKey) -> Result<u32, StepError> {
    let _ = key;
    Ok(1)
}

#[step(name = "publish")]
async fn publish(key: IdempotencyKey, decision: String) -> Result<String, StepError> {
    let _ = key;
    Ok(format!("published ({decision})"))
}

/// Step "draft", a wait for an approval, step "publish" with the decision.
#[workflow(name = "approve")]
async fn approve(ctx: WorkflowContext, (): ()) -> Result<String, WorkflowError> {
    draft(&ctx).await?;
    let decision: String = ctx
        .wait_for_event("wait-approval", "approval", "7 days")
        .await?;
    Ok(publish(&ctx, decision).await?)
}

#[tokio::test]
async fn pause_stops_at_the_next_step_boundary_and_resume_goes_on() {
    let clock = TestClock::new();
    let probe = Arc::new(Probe::default());
    let engine = engine_with(&clock, &probe).await;
    let run = engine.start(three_steps, "pause-1", 4).await.unwrap();
    wait_until("step one to run", || async { probe.runs()[0] == 1 }).await;

    run.pause().await.unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Paused);
    // The step in flight finishes...
    probe.gate.add_permits(1);
    wait_until("step one to complete", || async {
        count(&run, completed("one")).await == 1
    })
    .await;
    // ...but the next one does not start.
    helpers::quiet(&engine).await;
    assert_eq!(probe.runs(), [1, 0, 0]);
    assert_eq!(run.status().await.unwrap(), Status::Paused);
    assert_eq!(count(&run, started("two")).await, 0);

    run.resume().await.unwrap();
    assert_eq!(
        within("the result", run.result()).await.unwrap(),
        "4/5/50/55"
    );
    assert_eq!(probe.runs(), [1, 1, 1], "nothing ran twice");
    let kinds = kinds(&run).await;
    assert!(kinds.contains(&EventKind::Paused) && kinds.contains(&EventKind::Resumed));
}

#[tokio::test]
async fn a_pause_during_a_sleep_holds_the_instance_after_it() {
    let clock = TestClock::new();
    let probe = Arc::new(Probe::default());
    let engine = engine_with(&clock, &probe).await;
    let run = engine
        .start(nap_between_steps, "pause-nap-1", ())
        .await
        .unwrap();
    within("the nap", clock.wait_for_sleepers(1)).await;
    run.pause().await.unwrap();
    clock.advance(Duration::from_secs(2 * DAY));
    wait_until("the nap to end", || async {
        kinds(&run)
            .await
            .iter()
            .any(|k| matches!(k, EventKind::SleepCompleted { .. }))
    })
    .await;
    helpers::quiet(&engine).await;
    assert_eq!(probe.two.load(Ordering::SeqCst), 0);
    assert_eq!(run.status().await.unwrap(), Status::Paused);
    run.resume().await.unwrap();
    within("the result", run.result()).await.unwrap();
    assert_eq!(probe.two.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_resumed_instance_is_back_in_its_sleep() {
    let clock = TestClock::new();
    let probe = Arc::new(Probe::default());
    let engine = engine_with(&clock, &probe).await;
    let run = engine
        .start(nap_between_steps, "resume-nap-1", ())
        .await
        .unwrap();
    within("the nap", clock.wait_for_sleepers(1)).await;
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    run.pause().await.unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Paused);
    run.resume().await.unwrap();
    // Still asleep: waiting, not running.
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    clock.advance(Duration::from_secs(2 * DAY));
    within("the result", run.result()).await.unwrap();
    assert_eq!(probe.two.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_right_after_start_never_lose_the_instance() {
    let clock = TestClock::new();
    let probe = Arc::new(Probe::default());
    let engine = engine_with(&clock, &probe).await;
    probe.gate.add_permits(100);
    for i in 0..100 {
        let id = format!("quick-{i}");
        let run = engine.start(three_steps, &id, 1).await.unwrap();
        // The instance may finish before the pause (or the resume) lands:
        // then that call says so, and nothing is lost either.
        let finished_first = |result: Result<(), Error>| match result {
            Ok(()) => {}
            Err(Error::InvalidState {
                status: Status::Complete,
                ..
            }) => {}
            Err(other) => panic!("unexpected {other:?}"),
        };
        finished_first(run.pause().await);
        for _ in 0..i % 4 {
            tokio::task::yield_now().await;
        }
        finished_first(run.resume().await);
        assert_eq!(
            within("the result", run.result()).await.unwrap(),
            "1/2/20/25"
        );
        assert_eq!(probe.runs(), [i + 1; 3]);
    }
}

#[tokio::test]
async fn terminate_ends_a_waiting_instance_and_no_further_step_runs() {
    let clock = TestClock::new();
    let probe = Arc::new(Probe::default());
    let engine = engine_with(&clock, &probe).await;
    let run = engine.start(nap_between_steps, "term-1", ()).await.unwrap();
    within("the nap", clock.wait_for_sleepers(1)).await;
    run.terminate().await.unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    match within("the result", run.result()).await {
        Err(Error::Terminated { id, .. }) => assert_eq!(id, "term-1"),
        other => panic!("expected Terminated, got {other:?}"),
    }
    assert_eq!(clock.sleepers(), 0, "the sleep was let go");
    clock.advance(Duration::from_secs(2 * DAY));
    helpers::quiet(&engine).await;
    assert_eq!(probe.two.load(Ordering::SeqCst), 0);
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    assert_eq!(
        kinds(&run).await.last(),
        Some(&EventKind::InstanceTerminated)
    );
    match run.terminate().await {
        Err(Error::InvalidState { status, .. }) => assert_eq!(status, Status::Terminated),
        other => panic!("expected InvalidState, got {other:?}"),
    }
}

#[tokio::test]
async fn terminate_stops_a_step_in_flight_and_a_paused_instance() {
    let clock = TestClock::new();
    let probe = Arc::new(Probe::default());
    let engine = engine_with(&clock, &probe).await;
    let run = engine.start(three_steps, "term-2", 1).await.unwrap();
    wait_until("step one to run", || async { probe.runs()[0] == 1 }).await;
    within("terminate", run.terminate()).await.unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    probe.gate.add_permits(1);
    helpers::quiet(&engine).await;
    assert_eq!(probe.runs(), [1, 0, 0]);
    assert_eq!(
        count(&run, completed("one")).await,
        0,
        "the step was stopped"
    );

    // A paused instance has no driver: terminate writes the end itself.
    // (A new engine, with a probe of its own.)
    let probe = Arc::new(Probe::default());
    let engine = engine_with(&clock, &probe).await;
    let run = engine.start(three_steps, "term-3", 1).await.unwrap();
    wait_until("step one to run", || async { probe.runs()[0] == 1 }).await;
    run.pause().await.unwrap();
    probe.gate.add_permits(1);
    wait_until("step one to complete", || async {
        count(&run, completed("one")).await == 1
    })
    .await;
    helpers::quiet(&engine).await;
    run.terminate().await.unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    assert!(matches!(run.result().await, Err(Error::Terminated { .. })));
    assert!(matches!(
        run.resume().await,
        Err(Error::InvalidState {
            status: Status::Terminated,
            ..
        })
    ));
    helpers::quiet(&engine).await;
    assert_eq!(probe.runs(), [1, 0, 0]);
}

#[tokio::test]
async fn restart_runs_again_from_the_beginning_with_the_same_input_and_new_history() {
    let clock = TestClock::new();
    let probe = Arc::new(Probe::default());
    let engine = engine_with(&clock, &probe).await;
    probe.gate.add_permits(2);
    let run = engine.start(three_steps, "restart-1", 7).await.unwrap();
    assert_eq!(
        within("the result", run.result()).await.unwrap(),
        "7/8/80/85"
    );

    run.restart().await.unwrap();
    assert_eq!(
        within("the second result", run.result()).await.unwrap(),
        "7/8/80/85"
    );
    assert_eq!(probe.runs(), [2, 2, 2], "every step ran again");
    assert_eq!(*probe.inputs.lock().unwrap(), vec![7, 7]);

    // The journal is append-only: history keeps the first run, then the
    // restart, then the second run.
    let all = kinds(&run).await;
    assert!(matches!(all[0], EventKind::InstanceCreated { .. }));
    let restarted = all
        .iter()
        .position(|k| *k == EventKind::InstanceRestarted { from_step: None })
        .unwrap();
    let (before, after) = all.split_at(restarted);
    for step in ["one", "two", "three"] {
        assert_eq!(before.iter().filter(|k| completed(step)(k)).count(), 1);
        assert_eq!(after.iter().filter(|k| completed(step)(k)).count(), 1);
    }
    assert_eq!(before.last(), Some(&EventKind::InstanceCompleted));
    assert_eq!(after.last(), Some(&EventKind::InstanceCompleted));
}

#[tokio::test]
async fn restart_from_a_step_keeps_the_steps_before_it() {
    let clock = TestClock::new();
    let probe = Arc::new(Probe::default());
    let engine = engine_with(&clock, &probe).await;
    probe.gate.add_permits(2);
    let run = engine.start(three_steps, "restart-2", 3).await.unwrap();
    assert_eq!(
        within("the result", run.result()).await.unwrap(),
        "3/4/40/45"
    );

    run.restart_from("two").await.unwrap();
    assert_eq!(
        within("the second result", run.result()).await.unwrap(),
        "3/4/40/45"
    );
    assert_eq!(probe.runs(), [1, 2, 2], "step one was not run again");

    let kinds = kinds(&run).await;
    let restarted = kinds
        .iter()
        .position(|k| {
            *k == EventKind::InstanceRestarted {
                from_step: Some("two".into()),
            }
        })
        .unwrap();
    let one = kinds.iter().position(completed("one")).unwrap();
    let two = kinds.iter().rposition(completed("two")).unwrap();
    assert!(one < restarted && restarted < two, "{kinds:?}");
    let after = &kinds[restarted..];
    assert_eq!(kinds.iter().filter(|k| completed("one")(k)).count(), 1);
    assert_eq!(after.iter().filter(|k| completed("one")(k)).count(), 0);
    assert_eq!(after.iter().filter(|k| completed("two")(k)).count(), 1);

    match run.restart_from("no-such-step").await {
        Err(Error::UnknownStep { step, .. }) => assert_eq!(step, "no-such-step"),
        other => panic!("expected UnknownStep, got {other:?}"),
    }
    assert_eq!(run.status().await.unwrap(), Status::Complete);
}

#[tokio::test]
async fn restart_of_a_waiting_instance_lets_go_of_its_sleep() {
    let clock = TestClock::new();
    let probe = Arc::new(Probe::default());
    let engine = engine_with(&clock, &probe).await;
    let run = engine
        .start(nap_between_steps, "restart-3", ())
        .await
        .unwrap();
    within("the nap", clock.wait_for_sleepers(1)).await;
    clock.advance(Duration::from_secs(12 * HOUR));
    run.restart().await.unwrap();
    // The new run sleeps a full day from now, and the old sleep is gone.
    // (History keeps the earlier generation's events before the restart.)
    wait_until("the new nap", || async {
        let kinds = kinds(&run).await;
        let restarted = kinds
            .iter()
            .rposition(|k| matches!(k, EventKind::InstanceRestarted { .. }))
            .expect("the restart is in the history");
        kinds[restarted..]
            .iter()
            .any(|k| matches!(k, EventKind::SleepStarted { .. }))
    })
    .await;
    within("the new nap", clock.wait_for_sleepers(1)).await;
    helpers::quiet(&engine).await;
    assert_eq!(clock.sleepers(), 1);
    clock.advance(Duration::from_secs(12 * HOUR));
    // The clock wakes what is due inside `advance`: it still holds the nap.
    assert_eq!(clock.sleepers(), 1, "half the nap is not due");
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    clock.advance(Duration::from_secs(12 * HOUR));
    within("the result", run.result()).await.unwrap();
    assert_eq!(probe.two.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn control_of_a_finished_or_unknown_instance_is_a_typed_error() {
    let clock = TestClock::new();
    let probe = Arc::new(Probe::default());
    let engine = engine_with(&clock, &probe).await;
    probe.gate.add_permits(1);
    let run = engine.start(three_steps, "done-1", 1).await.unwrap();
    within("the result", run.result()).await.unwrap();
    for (what, result) in [
        ("pause", run.pause().await),
        ("resume", run.resume().await),
        ("terminate", run.terminate().await),
        (
            "terminate_with_rollback",
            run.terminate_with_rollback().await,
        ),
    ] {
        match result {
            Err(Error::InvalidState { status, id, .. }) => {
                assert_eq!(
                    (status, id.as_str()),
                    (Status::Complete, "done-1"),
                    "{what}"
                )
            }
            other => panic!("{what}: expected InvalidState, got {other:?}"),
        }
    }
    assert_eq!(run.status().await.unwrap(), Status::Complete);
    match engine.instance("ghost").await {
        Err(Error::UnknownInstance { id }) => assert_eq!(id, "ghost"),
        other => panic!("expected UnknownInstance, got {other:?}"),
    }
}

/// An event that a discarded wait took is delivered again after
/// `restart_from`: the restarted wait does not need a second send.
#[tokio::test]
async fn restart_from_delivers_again_the_events_its_discarded_waits_took() {
    let clock = TestClock::new();
    let engine = engine_on(&clock).await;
    let run = engine.start(approve, "approve-1", ()).await.unwrap();
    engine
        .send_event("approve-1", "approval", "yes")
        .await
        .unwrap();
    assert_eq!(
        within("the result", run.result()).await.unwrap(),
        "published (yes)"
    );

    run.restart_from("draft").await.unwrap();
    assert_eq!(
        within("the result after restart", run.result())
            .await
            .unwrap(),
        "published (yes)"
    );
    let all = kinds(&run).await;
    let restarted = all
        .iter()
        .position(|k| matches!(k, EventKind::InstanceRestarted { .. }))
        .unwrap();
    assert_eq!(
        all[restarted..]
            .iter()
            .filter(|k| matches!(k, EventKind::EventDelivered { .. }))
            .count(),
        1,
        "since the restart, the wait took the re-queued event once"
    );
}
