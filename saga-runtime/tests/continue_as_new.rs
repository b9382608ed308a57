//! Continue-as-new: `ctx.continue_as_new(workflow, input)` ends a run and
//! begins the next under the same id, with a new input and an empty
//! history, so a loop that runs for months keeps a short journal. The
//! workflows are written with `#[workflow]` and `#[step]`, as users write
//! them; `tests/postgres_semantics.rs` runs this file on PostgreSQL too.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use saga_runtime::prelude::*;
use saga_runtime::{Engine, Error, EventKind, TestClock};

use helpers::{Reopenable, fresh, on_postgres, until_status, wait_until, within};

/// The idempotency keys the steps ran with, in order.
#[derive(Default)]
struct Keys(Mutex<Vec<String>>);

impl Keys {
    fn note(&self, key: &IdempotencyKey) {
        self.0.lock().unwrap().push(key.as_str().to_owned());
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

#[step(name = "tick", read_only)]
async fn tick(n: u32) -> Result<u32, StepError> {
    Ok(n + 1)
}

/// Counts to `to`, one run per number.
#[workflow(name = "counter")]
async fn counter(ctx: WorkflowContext, (n, to): (u32, u32)) -> Result<u32, WorkflowError> {
    let next = tick(&ctx, n).await?;
    if next >= to {
        return Ok(next);
    }
    ctx.continue_as_new(counter, (next, to)).await
}

/// How many iterations the long loop makes.
const ITERATIONS: u32 = 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_iterations_keep_the_journal_short() {
    let engine = fresh(Engine::builder()).await;
    engine.register(counter).unwrap();
    let began = Instant::now();
    let run = engine
        .start(counter, "count-1", (0, ITERATIONS))
        .await
        .unwrap();
    // `result()` follows the id to its last run.
    let counted = within("the last run", run.result()).await.unwrap();
    let took = began.elapsed();
    eprintln!(
        "continue_as_new: {ITERATIONS} iterations in {took:?} on {}",
        if on_postgres() { "PostgreSQL" } else { "sled" }
    );
    assert_eq!(counted, ITERATIONS);

    let inspection = run.inspect().await.unwrap();
    assert_eq!(inspection.run, ITERATIONS - 1);
    assert_eq!(inspection.status, Status::Complete);
    // Each run holds its own few events, however many runs came before.
    let last = run.history().await.unwrap();
    assert!(last.len() <= 6, "the last run's history: {last:?}");
    assert_eq!(
        last[0].kind,
        EventKind::ContinuedAsNew {
            run: ITERATIONS - 1
        }
    );
    for earlier in [0, 1, ITERATIONS / 2, ITERATIONS - 2] {
        let history = run.history_of_run(earlier).await.unwrap();
        assert!(history.len() <= 6, "run {earlier}: {history:?}");
        assert_eq!(
            history.last().map(|e| &e.kind),
            Some(&EventKind::ContinuedAsNew { run: earlier + 1 }),
            "run {earlier} ends with its hand-over"
        );
    }
    assert!(matches!(
        run.history_of_run(ITERATIONS).await,
        Err(Error::InvalidArgument(_))
    ));
    engine.close().await;
}

#[step(name = "note")]
async fn note(key: IdempotencyKey, keys: Service<Keys>) -> Result<(), StepError> {
    keys.note(&key);
    Ok(())
}

#[workflow(name = "kid")]
async fn kid(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    note(&ctx).await?;
    Ok(())
}

/// Notes its key, starts a child, waits for a `go`, and continues until
/// run `to`.
#[workflow(name = "looper")]
async fn looper(ctx: WorkflowContext, (run, to): (u32, u32)) -> Result<u32, WorkflowError> {
    note(&ctx).await?;
    ctx.child("kid", kid, ()).await?;
    let _: u32 = ctx.wait_for_event("wait-go", "go", "30 days").await?;
    if run == to {
        return Ok(run);
    }
    ctx.continue_as_new(looper, (run + 1, to)).await
}

fn builder(keys: &Arc<Keys>) -> impl Fn() -> saga_runtime::EngineBuilder + '_ {
    move || Engine::builder().provide_arc(keys.clone())
}

async fn open(store: &Reopenable, keys: &Arc<Keys>) -> Engine {
    let engine = store.open(builder(keys)).await;
    engine.register(kid).unwrap();
    engine.register(looper).unwrap();
    engine
}

/// Waits until instance `id` waits in run `run`.
async fn until_waiting_in(engine: &Engine, id: &str, run: u32) {
    let instance = engine.instance(id).await.unwrap();
    wait_until(&format!("run {run} waiting"), || async {
        let inspection = instance.inspect().await.unwrap();
        inspection.run == run && inspection.status == Status::Waiting
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_has_its_own_keys_and_children_and_a_reopen_resumes_the_current_run() {
    let keys = Arc::new(Keys::default());
    let store = Reopenable::new("continue").await;
    let engine = open(&store, &keys).await;
    engine.start(looper, "loop-1", (0, 2)).await.unwrap();
    until_waiting_in(&engine, "loop-1", 0).await;
    // Two events at once: the first ends run 0, the second waits for run
    // 1, which takes it over (events not taken carry over).
    engine.send_event("loop-1", "go", &1u32).await.unwrap();
    engine.send_event("loop-1", "go", &2u32).await.unwrap();
    until_waiting_in(&engine, "loop-1", 2).await;
    engine.close().await;

    // Opened again: run 2 goes on where it waits.
    let engine = open(&store, &keys).await;
    let instance = engine.instance("loop-1").await.unwrap();
    assert_eq!(instance.inspect().await.unwrap().run, 2);
    // Its driver replays run 2 (`Running`) up to the wait it was in.
    until_waiting_in(&engine, "loop-1", 2).await;
    engine.send_event("loop-1", "go", &3u32).await.unwrap();
    let last: u32 = within("the last run", instance.result()).await.unwrap();
    assert_eq!(last, 2);

    // A run's keys and children are its own; run 0's are as before.
    let mut noted = keys.all();
    noted.sort();
    assert_eq!(
        noted,
        [
            "loop-1.kid:note",
            "loop-1.kid~r1:note",
            "loop-1.kid~r2:note",
            "loop-1:note",
            "loop-1:note~r1",
            "loop-1:note~r2",
        ]
    );
    for child in ["loop-1.kid", "loop-1.kid~r1", "loop-1.kid~r2"] {
        let child = engine.instance(child).await.unwrap();
        assert_eq!(child.status().await.unwrap(), Status::Complete);
    }
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_after_continue_as_new_restarts_the_current_run() {
    let keys = Arc::new(Keys::default());
    let engine = fresh(builder(&keys)()).await;
    engine.register(kid).unwrap();
    engine.register(looper).unwrap();
    let run = engine.start(looper, "loop-2", (0, 1)).await.unwrap();
    until_waiting_in(&engine, "loop-2", 0).await;
    engine.send_event("loop-2", "go", &1u32).await.unwrap();
    until_waiting_in(&engine, "loop-2", 1).await;

    run.restart().await.unwrap();
    until_status(&run, Status::Waiting).await;
    let inspection = run.inspect().await.unwrap();
    assert_eq!((inspection.run, inspection.generation), (1, 1));
    // From its own input, not run 0's.
    assert_eq!(inspection.input.json(), Some(&serde_json::json!([1, 1])));
    engine.send_event("loop-2", "go", &2u32).await.unwrap();
    assert_eq!(within("the end", run.result()).await.unwrap(), 1);
    assert!(keys.all().contains(&"loop-2:note@1~r1".to_owned()));
    engine.close().await;
}

const HOUR: u64 = 60 * 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_removes_the_runs_that_ended_longer_ago_while_the_loop_goes_on() {
    let clock = TestClock::new();
    let keys = Arc::new(Keys::default());
    let engine = fresh(
        builder(&keys)()
            .clock(clock.clone())
            .retention(Duration::from_secs(HOUR)),
    )
    .await;
    engine.register(kid).unwrap();
    engine.register(looper).unwrap();
    let run = engine.start(looper, "loop-3", (0, 5)).await.unwrap();
    until_waiting_in(&engine, "loop-3", 0).await;
    engine.send_event("loop-3", "go", &1u32).await.unwrap();
    until_waiting_in(&engine, "loop-3", 1).await;
    // Run 0 ended now; run 1 ends two hours on.
    clock.advance(Duration::from_secs(2 * HOUR));
    engine.send_event("loop-3", "go", &2u32).await.unwrap();
    until_waiting_in(&engine, "loop-3", 2).await;

    engine.sweep_expired().await.unwrap();
    assert!(matches!(
        run.history_of_run(0).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(
        run.history_of_run(1).await.is_ok(),
        "run 1 ended an hour ago"
    );
    let inspection = run.inspect().await.unwrap();
    assert_eq!((inspection.run, inspection.status), (2, Status::Waiting));

    // The loop goes on.
    clock.advance(Duration::from_secs(2 * HOUR));
    engine.sweep_expired().await.unwrap();
    assert!(run.history_of_run(1).await.is_err());
    engine.send_event("loop-3", "go", &3u32).await.unwrap();
    until_waiting_in(&engine, "loop-3", 3).await;
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continued_instance_keeps_its_queue_slot() {
    let keys = Arc::new(Keys::default());
    let engine =
        fresh(builder(&keys)().queue(saga_runtime::Queue::new("loops").concurrency(1))).await;
    engine.register(kid).unwrap();
    engine.register(looper).unwrap();
    let first = engine
        .start_on("loops", looper, "loop-q1", (0, 2))
        .await
        .unwrap();
    until_waiting_in(&engine, "loop-q1", 0).await;
    let second = engine
        .start_on("loops", looper, "loop-q2", (0, 0))
        .await
        .unwrap();
    for run in 1..=2 {
        engine.send_event("loop-q1", "go", &run).await.unwrap();
        until_waiting_in(&engine, "loop-q1", run).await;
        // The slot went on with the loop: the other still waits for it.
        assert_eq!(second.status().await.unwrap(), Status::Queued);
    }
    engine.send_event("loop-q1", "go", &3u32).await.unwrap();
    assert_eq!(within("the loop's end", first.result()).await.unwrap(), 2);
    until_waiting_in(&engine, "loop-q2", 0).await;
    engine.close().await;
}

#[rollback]
async fn refund(ctx: RollbackContext<'_, ()>, keys: Service<Keys>) -> Result<(), StepError> {
    keys.note(ctx.key());
    Ok(())
}

#[step(name = "charge", rollback = refund)]
async fn charge(key: IdempotencyKey, keys: Service<Keys>) -> Result<(), StepError> {
    keys.note(&key);
    Ok(())
}

#[step(name = "ship")]
async fn ship(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Err(StepError::fatal("no truck"))
}

/// Charges each run; the second run's shipping fails.
#[workflow(name = "charger")]
async fn charger(ctx: WorkflowContext, run: u32) -> Result<(), WorkflowError> {
    charge(&ctx).await?;
    if run == 1 {
        ship(&ctx).await?;
    }
    ctx.continue_as_new(charger, run + 1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_run_compensates_its_own_steps_only() {
    let keys = Arc::new(Keys::default());
    let engine = fresh(builder(&keys)()).await;
    engine.register(charger).unwrap();
    let run = engine.start(charger, "charger-1", 0).await.unwrap();
    let failed = within("the failure", run.result()).await;
    assert!(
        matches!(failed, Err(Error::WorkflowFailed { .. })),
        "{failed:?}"
    );
    // Run 0's charge stays: its compensation was not carried over.
    assert_eq!(
        keys.all(),
        [
            "charger-1:charge",
            "charger-1:charge~r1",
            "charger-1:rollback:charge~r1"
        ]
    );
    assert_eq!(run.inspect().await.unwrap().run, 1);
    engine.close().await;
}
