//! Continue-as-new: `ctx.continue_as_new(workflow, input)` ends a run and
//! begins the next under the same id, with a new input and an empty
//! history, so a loop that runs for months keeps a short journal. The
//! workflows are written with `#[workflow]` and `#[step]`, as users write
//! them; `tests/postgres_semantics.rs` runs this file on PostgreSQL too.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use saga_runtime::time::Clock;
use saga_runtime::{Engine, Error};

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

/// Waits until instance `id` waits for its event in run `run` (not for
/// its child, which it waits for first: `Waiting` too).
async fn until_waiting_in(engine: &Engine, id: &str, run: u32) {
    let instance = engine.instance(id).await.unwrap();
    wait_until(&format!("run {run} waiting"), || async {
        let inspection = instance.inspect().await.unwrap();
        let for_the_event = inspection.slots.iter().any(|slot| {
            matches!(slot, saga_runtime::inspect::InspectedSlot::Wait(wait) if wait.state == saga_runtime::inspect::WaitState::Waiting)
        });
        inspection.run == run && inspection.status == Status::Waiting && for_the_event
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
        fresh(builder(&keys)().queue(saga_runtime::queue::Queue::new("loops").concurrency(1)))
            .await;
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

/// An entity that takes `ITEMS_PER_RUN` items, then continues as new: it
/// loops for ever, one run per batch of items.
#[workflow(name = "inbox")]
async fn inbox(ctx: WorkflowContext, batch: u32) -> Result<(), WorkflowError> {
    for _ in 0..ITEMS_PER_RUN {
        let _: u32 = ctx.wait_for_event("wait-item", "item", "30 days").await?;
    }
    ctx.continue_as_new(inbox, batch + 1).await
}

const ITEMS_PER_RUN: u32 = 20;
const MINUTE: Duration = Duration::from_secs(60);

/// An engine on `clock` that remembers event ids for an hour across runs.
async fn inbox_engine(clock: &TestClock) -> Engine {
    let engine = fresh(
        Engine::builder()
            .clock(clock.clone())
            .event_dedup_window(Duration::from_secs(HOUR)),
    )
    .await;
    engine.register(inbox).unwrap();
    engine
}

/// Sends item `n` to `id` with the event id `item-{n}` (payload `n`, or
/// `payload` when given).
async fn send_item(engine: &Engine, id: &str, n: u32, payload: Option<u32>) -> Result<Sent, Error> {
    engine
        .event(id, "item")
        .id(format!("item-{n:04}"))
        .send(&payload.unwrap_or(n))
        .await
}

/// The event ids the instance remembers, in id order.
async fn remembered(engine: &Engine, id: &str) -> Vec<String> {
    let instance = engine.instance(id).await.unwrap();
    let inspection = instance.inspect().await.unwrap();
    inspection.event_ids.into_iter().map(|e| e.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_inside_the_window_is_recognised_after_several_hand_overs() {
    let clock = TestClock::new();
    let engine = inbox_engine(&clock).await;
    engine.start(inbox, "inbox-1", 0).await.unwrap();
    until_waiting_in(&engine, "inbox-1", 0).await;

    // Within a run every id is remembered, however long ago it was sent.
    assert_eq!(
        send_item(&engine, "inbox-1", 0, None).await.unwrap(),
        Sent::Delivered
    );
    clock.advance(Duration::from_secs(2 * HOUR));
    assert_eq!(
        send_item(&engine, "inbox-1", 0, None).await.unwrap(),
        Sent::Duplicate
    );
    // The rest of run 0's batch, then three more runs, ten minutes apart.
    for n in 1..ITEMS_PER_RUN {
        send_item(&engine, "inbox-1", n, None).await.unwrap();
    }
    until_waiting_in(&engine, "inbox-1", 1).await;
    for run in 1..=3 {
        clock.advance(10 * MINUTE);
        for n in run * ITEMS_PER_RUN..(run + 1) * ITEMS_PER_RUN {
            send_item(&engine, "inbox-1", n, None).await.unwrap();
        }
        until_waiting_in(&engine, "inbox-1", run + 1).await;
    }

    // Run 4 began 30 minutes after run 0's last items: still remembered
    // through four hand-overs, with their send times. Item 0, sent two
    // hours before run 0 ended, was not handed over.
    let item = ITEMS_PER_RUN - 1;
    assert_eq!(
        send_item(&engine, "inbox-1", item, None).await.unwrap(),
        Sent::Duplicate
    );
    let conflict = send_item(&engine, "inbox-1", item, Some(7)).await;
    assert!(
        matches!(conflict, Err(Error::EventIdConflict { .. })),
        "{conflict:?}"
    );
    let instance = engine.instance("inbox-1").await.unwrap();
    let inspection = instance.inspect().await.unwrap();
    assert_eq!(inspection.run, 4);
    assert!(
        inspection.pending_events.is_empty(),
        "nothing was stored again"
    );
    let ids: Vec<&str> = inspection.event_ids.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids.len(), 4 * ITEMS_PER_RUN as usize - 1, "{ids:?}");
    assert_eq!(ids.first(), Some(&"item-0001"));
    let oldest = inspection
        .event_ids
        .iter()
        .map(|e| e.sent_at)
        .min()
        .unwrap();
    assert_eq!(clock.now().duration_since(oldest).unwrap(), 30 * MINUTE);

    // An hour on, the next hand-over drops what was sent before it.
    clock.advance(Duration::from_secs(HOUR) + MINUTE);
    for n in 4 * ITEMS_PER_RUN..5 * ITEMS_PER_RUN {
        send_item(&engine, "inbox-1", n, None).await.unwrap();
    }
    until_waiting_in(&engine, "inbox-1", 5).await;
    let carried = remembered(&engine, "inbox-1").await;
    assert_eq!(carried.len(), ITEMS_PER_RUN as usize, "{carried:?}");
    assert_eq!(carried.first().map(String::as_str), Some("item-0080"));
    // A send of a dropped id is a new event, even with another payload,
    // and is remembered again.
    assert_eq!(
        send_item(&engine, "inbox-1", item, Some(7)).await.unwrap(),
        Sent::Delivered
    );
    let now_remembered = remembered(&engine, "inbox-1").await;
    assert_eq!(
        now_remembered.first().map(String::as_str),
        Some("item-0019")
    );
    assert_eq!(
        send_item(&engine, "inbox-1", item, Some(7)).await.unwrap(),
        Sent::Duplicate
    );
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_sent_a_thousand_ids_hands_over_one_window_of_them() {
    const IDS: u32 = 1000;
    let clock = TestClock::new();
    let engine = inbox_engine(&clock).await;
    engine.start(inbox, "inbox-2", 0).await.unwrap();
    // Id `n` is sent at minute `n`; each run ends on its batch's last id,
    // its hand-over written before the clock moves on.
    let window_ids = (HOUR / 60) as usize;
    for n in 0..IDS {
        assert_eq!(
            send_item(&engine, "inbox-2", n, None).await.unwrap(),
            Sent::Delivered
        );
        if n % ITEMS_PER_RUN == ITEMS_PER_RUN - 1 {
            let run = n / ITEMS_PER_RUN + 1;
            until_waiting_in(&engine, "inbox-2", run).await;
            let carried = remembered(&engine, "inbox-2").await;
            assert!(carried.len() <= window_ids, "run {run}: {}", carried.len());
        }
        clock.advance(MINUTE);
    }
    let last_run = IDS / ITEMS_PER_RUN;
    // The last hand-over came at id 999's minute: it carried the ids sent
    // less than an hour before, not the thousand.
    let carried = remembered(&engine, "inbox-2").await;
    let first = IDS - window_ids as u32;
    let expected: Vec<String> = (first..IDS).map(|n| format!("item-{n:04}")).collect();
    assert_eq!(carried, expected);
    assert_eq!(
        engine
            .instance("inbox-2")
            .await
            .unwrap()
            .history()
            .await
            .unwrap()[0]
            .kind,
        EventKind::ContinuedAsNew { run: last_run }
    );
    // Inside the window a repeat is still a duplicate; before it, new.
    assert_eq!(
        send_item(&engine, "inbox-2", first, None).await.unwrap(),
        Sent::Duplicate
    );
    assert_eq!(
        send_item(&engine, "inbox-2", first - 1, None)
            .await
            .unwrap(),
        Sent::Delivered
    );
    engine.close().await;
}
