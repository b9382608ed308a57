//! What a worker reads when it opens a store: the instances that can run,
//! never the ended ones, whatever the history; the active set once for
//! every workflow registered together; after a crash, only what the
//! crashed process wrote; a store last written by a release that keeps no
//! index of the active instances is scanned whole once.
//!
//! Read through a store that counts reads (`support/counting_store.rs`).

#[path = "support/child.rs"]
mod child;
#[path = "support/counting_store.rs"]
mod counting_store;
#[path = "support/helpers.rs"]
mod helpers;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use saga_runtime::EngineBuilder;
use saga_runtime::prelude::*;
use saga_runtime::store::SledStore;
use saga_runtime::testing::TestClock;

use child::DataDir;
use counting_store::{CountingStore, Reads};
use helpers::within;

#[workflow(name = "one-step")]
async fn one_step(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    Ok(add_one(&ctx, n).await?)
}

#[workflow(name = "nap")]
async fn nap(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let n = add_one(&ctx, n).await?;
    ctx.sleep("nap", "1 day").await?;
    Ok(n)
}

#[workflow(name = "approval")]
async fn approval(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let n = add_one(&ctx, n).await?;
    let extra: u64 = ctx
        .wait_for_event("wait-approval", "approved", "7 days")
        .await?;
    Ok(n + extra)
}

#[workflow(name = "other")]
async fn other(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    Ok(add_one(&ctx, n).await?)
}

#[step(name = "add-one", read_only)]
async fn add_one(n: u64) -> Result<u64, StepError> {
    Ok(n + 1)
}

const ENDED: usize = 12;
const ASLEEP: usize = 3;

fn builder(clock: &TestClock) -> EngineBuilder {
    Engine::builder()
        .clock(clock.clone())
        .register(one_step)
        .register(nap)
        .register(approval)
        .register(other)
}

async fn open_counting(dir: &Path, clock: &TestClock) -> (Engine, Arc<CountingStore>) {
    let sled = helpers::when_released(|| SledStore::open(dir))
        .await
        .unwrap();
    let store = Arc::new(CountingStore::new(sled));
    let engine = builder(clock).open_store(store.clone()).unwrap();
    (engine, store)
}

/// A store with `ENDED` instances ended (`done-N`) and `ASLEEP` asleep
/// (`asleep-N`), closed.
async fn history(dir: &Path, clock: &TestClock) {
    let engine = builder(clock).open(dir).unwrap();
    for i in 0..ENDED {
        let run = engine
            .start(one_step, &format!("done-{i}"), 1)
            .await
            .unwrap();
        within("an instance ends", run.result()).await.unwrap();
    }
    for i in 0..ASLEEP {
        engine.start(nap, &format!("asleep-{i}"), 1).await.unwrap();
    }
    within("instances fall asleep", clock.wait_for_sleepers(ASLEEP)).await;
    engine.close().await;
}

/// Runs a new instance to its end: the engine is ready.
async fn ready(engine: &Engine, id: &str) {
    let run = engine.start(one_step, id, 1).await.unwrap();
    assert_eq!(
        within("a new instance ends", run.result()).await.unwrap(),
        2
    );
}

/// A store with [`history`], opened again through a counting store (the
/// three workflows registered with the builder), its sleepers resumed and
/// a new instance run: what that read.
async fn reopened_and_ready(name: &str) -> (DataDir, TestClock, Engine, Reads) {
    let dir = DataDir::new(name);
    let clock = TestClock::new();
    history(dir.path(), &clock).await;
    let (engine, store) = open_counting(dir.path(), &clock).await;
    within("the sleepers resume", clock.wait_for_sleepers(ASLEEP)).await;
    ready(&engine, "probe").await;
    let reads = store.take_reads();
    (dir, clock, engine, reads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_reads_no_ended_instance() {
    let (_dir, clock, engine, reads) = reopened_and_ready("startup-ended").await;
    assert_eq!(reads.of_prefix("done-"), Vec::<&str>::new(), "{reads:?}");
    assert_eq!(reads.whole_index, 0, "{reads:?}");
    // Nor a sleeper's entry: its timer in the active set is enough.
    assert_eq!(reads.of_prefix("asleep-"), Vec::<&str>::new(), "{reads:?}");

    // They still wake and end.
    clock.advance(Duration::from_secs(24 * 60 * 60));
    for i in 0..ASLEEP {
        let run = engine.instance(&format!("asleep-{i}")).await.unwrap();
        assert_eq!(
            within("a sleeper ends", run.result::<u64>()).await.unwrap(),
            2
        );
    }
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registering_workflows_reads_the_active_set_once() {
    let (_dir, _clock, engine, reads) = reopened_and_ready("startup-register").await;
    assert_eq!(reads.active_set, 1, "{reads:?}");
    assert_eq!(reads.whole_index, 0, "{reads:?}");
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_open_repairs_only_what_was_running() {
    let dir = DataDir::new("startup-crash");
    let clock = TestClock::new();
    history(dir.path(), &clock).await;

    // A process that ends one more instance, starts one that falls asleep,
    // and dies without closing.
    let sled = helpers::when_released(|| SledStore::open(dir.path()))
        .await
        .unwrap();
    let dying = Arc::new(CountingStore::dying(sled));
    let engine = builder(&clock).open_store(dying.clone()).unwrap();
    within("the sleepers resume", clock.wait_for_sleepers(ASLEEP)).await;
    ready(&engine, "late-done").await;
    // Its start flushes after late-done's end: late-done's mark goes.
    engine.start(nap, "late-nap", 1).await.unwrap();
    within("it falls asleep", clock.wait_for_sleepers(ASLEEP + 1)).await;
    // The next start flushes after late-nap fell asleep: a sleeper's mark
    // goes too, as an end's does. The last one keeps its mark.
    engine.start(nap, "late-nap-2", 1).await.unwrap();
    within("it falls asleep", clock.wait_for_sleepers(ASLEEP + 2)).await;
    engine.close().await;
    drop(dying);

    let (engine, store) = open_counting(dir.path(), &clock).await;
    within("the sleepers resume", clock.wait_for_sleepers(ASLEEP + 2)).await;
    let reads = store.take_reads();
    assert_eq!(reads.of_prefix("done-"), Vec::<&str>::new(), "{reads:?}");
    assert_eq!(reads.whole_index, 0, "{reads:?}");
    // Sleepers are not read at all (their timers are); late-nap-2, still
    // marked, is repaired.
    assert_eq!(reads.of_prefix("asleep-"), Vec::<&str>::new(), "{reads:?}");
    assert_eq!(reads.of_prefix("late-"), ["late-nap-2"], "{reads:?}");
    engine.close().await;
}

/// The key of the marker that says the active and dirty trees are kept
/// (the one key of `index` that starts with a zero byte).
fn marker_key(index: &sled::Tree) -> Vec<u8> {
    index
        .iter()
        .keys()
        .map(|k| k.unwrap().to_vec())
        .find(|k| k.first() == Some(&0))
        .expect("the store carries the marker")
}

/// What the repair on open of a release before does to a store of this
/// one: it removes the marker, an index entry without a journal. Then it
/// writes as it knows: here, an instance it started that sleeps is missing
/// from the index of active instances.
fn as_written_by_the_release_before(dir: &Path) {
    let db = sled::open(dir).unwrap();
    let index = db.open_tree("index").unwrap();
    let marker = marker_key(&index);
    index.remove(marker).unwrap();
    db.open_tree("active").unwrap().remove("asleep-0").unwrap();
    db.flush().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_a_release_before_wrote_is_scanned_whole_once() {
    let dir = DataDir::new("startup-before");
    let clock = TestClock::new();
    history(dir.path(), &clock).await;
    as_written_by_the_release_before(dir.path());

    let (engine, store) = open_counting(dir.path(), &clock).await;
    within("every sleeper resumes", clock.wait_for_sleepers(ASLEEP)).await;
    let reads = store.take_reads();
    assert!(reads.whole_index > 0, "{reads:?}");
    engine.close().await;
    drop(store);

    let (engine, store) = open_counting(dir.path(), &clock).await;
    within("every sleeper resumes", clock.wait_for_sleepers(ASLEEP)).await;
    let reads = store.take_reads();
    assert_eq!(reads.whole_index, 0, "{reads:?}");
    assert_eq!(reads.of_prefix("done-"), Vec::<&str>::new(), "{reads:?}");
    engine.close().await;
}

/// A store with [`history`] and `K` more sleepers (`more-N`, due in a day)
/// and one instance waiting for an event (`waits`), closed; opened again
/// through a counting store, a new instance run.
async fn reopened_with_sleepers(name: &str) -> (DataDir, TestClock, Engine, Arc<CountingStore>) {
    const K: usize = 20;
    let dir = DataDir::new(name);
    let clock = TestClock::new();
    history(dir.path(), &clock).await;
    let engine = builder(&clock).open(dir.path()).unwrap();
    within("the sleepers resume", clock.wait_for_sleepers(ASLEEP)).await;
    for i in 0..K {
        engine.start(nap, &format!("more-{i}"), 1).await.unwrap();
    }
    engine.start(approval, "waits", 1).await.unwrap();
    within(
        "every instance waits",
        clock.wait_for_sleepers(ASLEEP + K + 1),
    )
    .await;
    engine.close().await;

    let (engine, store) = open_counting(dir.path(), &clock).await;
    within(
        "every sleeper is counted",
        clock.wait_for_sleepers(ASLEEP + K + 1),
    )
    .await;
    ready(&engine, "probe").await;
    helpers::quiet(&engine).await;
    (dir, clock, engine, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleeping_instances_are_not_loaded_until_due() {
    let (_dir, clock, engine, store) = reopened_with_sleepers("startup-asleep").await;
    let reads = store.take_reads();
    // Not one journal of an instance that only waits was read.
    for prefix in ["asleep-", "more-", "waits", "done-"] {
        assert_eq!(reads.journals_of(prefix), Vec::<&str>::new(), "{reads:?}");
    }
    assert_eq!(reads.whole_index, 0, "{reads:?}");
    assert_eq!(clock.sleepers(), ASLEEP + 20 + 1, "each is counted once");

    // Their time comes: each is loaded, and ends.
    clock.advance(Duration::from_secs(24 * 60 * 60));
    for id in (0..ASLEEP)
        .map(|i| format!("asleep-{i}"))
        .chain((0..20).map(|i| format!("more-{i}")))
    {
        let run = engine.instance(&id).await.unwrap();
        assert_eq!(
            within("a sleeper ends", run.result::<u64>()).await.unwrap(),
            2
        );
    }
    let reads = store.take_reads();
    assert_eq!(reads.journals_of("asleep-").len(), ASLEEP, "{reads:?}");
    assert_eq!(reads.journals_of("more-").len(), 20, "{reads:?}");
    // (The retention sweep the day's passing starts may read one that
    // just ended again: it is not counted here.)
    // The event wait is not due yet: still not loaded.
    assert_eq!(reads.journals_of("waits"), Vec::<&str>::new(), "{reads:?}");
    assert_eq!(clock.sleepers(), 1, "only the event wait is left");
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_wakes_a_waiter_that_was_never_loaded() {
    let (_dir, clock, engine, store) = reopened_with_sleepers("startup-event").await;
    assert_eq!(store.take_reads().journals_of("waits"), Vec::<&str>::new());
    engine
        .send_event("waits", "approved", &40u64)
        .await
        .unwrap();
    let run = engine.instance("waits").await.unwrap();
    assert_eq!(
        within("the waiter ends", run.result::<u64>())
            .await
            .unwrap(),
        42
    );
    assert_eq!(clock.event_waits(), 0, "its deadline is no longer counted");
    assert_eq!(clock.sleepers(), ASLEEP + 20, "the sleepers still sleep");
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeper_that_was_never_loaded_can_be_terminated() {
    let (_dir, clock, engine, _store) = reopened_with_sleepers("startup-terminate").await;
    let run = engine.instance("more-3").await.unwrap();
    run.terminate().await.unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    assert_eq!(clock.sleepers(), ASLEEP + 20, "it sleeps no more");
    // The others wake as before; the terminated one stays terminated.
    clock.advance(Duration::from_secs(24 * 60 * 60));
    let woken = engine.instance("more-4").await.unwrap();
    assert_eq!(
        within("a sleeper ends", woken.result::<u64>())
            .await
            .unwrap(),
        2
    );
    helpers::quiet(&engine).await;
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    engine.close().await;
}

/// What a release that keeps the active set but no timer index leaves: its
/// repair on open writes the marker without saying the timers are kept,
/// and it moved a sleeper's wake without filing it. Here the timer index
/// says asleep-0 wakes ten days late.
fn as_written_by_a_release_without_timers(dir: &Path) {
    let db = sled::open(dir).unwrap();
    let index = db.open_tree("index").unwrap();
    let marker = marker_key(&index);
    index.insert(marker, &[] as &[u8]).unwrap();
    let (active, timers) = (
        db.open_tree("active").unwrap(),
        db.open_tree("timers").unwrap(),
    );
    let filed = active.get("asleep-0").unwrap().expect("asleep-0 is active");
    let at = u64::from_be_bytes(filed[..8].try_into().unwrap());
    let late = at + 10 * 24 * 60 * 60 * 1000;
    let key = |at: u64| [&at.to_be_bytes()[..], b"asleep-0"].concat();
    timers.remove(key(at)).unwrap();
    timers.insert(key(late), &[0u8]).unwrap();
    active
        .insert("asleep-0", [&late.to_be_bytes()[..], &[0]].concat())
        .unwrap();
    db.flush().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_a_release_before_did_not_keep_are_filed_again_not_trusted() {
    let dir = DataDir::new("startup-timers-before");
    let clock = TestClock::new();
    history(dir.path(), &clock).await;
    as_written_by_a_release_without_timers(dir.path());

    let (engine, _store) = open_counting(dir.path(), &clock).await;
    within("every sleeper resumes", clock.wait_for_sleepers(ASLEEP)).await;
    clock.advance(Duration::from_secs(24 * 60 * 60));
    let run = engine.instance("asleep-0").await.unwrap();
    assert_eq!(
        within("it wakes on time", run.result::<u64>())
            .await
            .unwrap(),
        2
    );
    engine.close().await;
}
