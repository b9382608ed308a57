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

use saga_runtime::prelude::*;
use saga_runtime::store::SledStore;
use saga_runtime::{EngineBuilder, TestClock};

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
    assert_eq!(reads.of_prefix("asleep-").len(), ASLEEP, "{reads:?}");

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
    engine.close().await;
    drop(dying);

    let (engine, store) = open_counting(dir.path(), &clock).await;
    within("the sleepers resume", clock.wait_for_sleepers(ASLEEP + 1)).await;
    let reads = store.take_reads();
    assert_eq!(reads.of_prefix("done-"), Vec::<&str>::new(), "{reads:?}");
    assert_eq!(reads.whole_index, 0, "{reads:?}");
    assert_eq!(reads.of_prefix("late-"), ["late-nap"], "{reads:?}");
    engine.close().await;
}

/// What the repair on open of a release before does to a store of this
/// one: it removes the marker, an index entry without a journal. Then it
/// writes as it knows: here, an instance it started that sleeps is missing
/// from the index of active instances.
fn as_written_by_the_release_before(dir: &Path) {
    let db = sled::open(dir).unwrap();
    let index = db.open_tree("index").unwrap();
    let marker: Vec<u8> = index
        .iter()
        .keys()
        .map(|k| k.unwrap().to_vec())
        .find(|k| k.first() == Some(&0))
        .expect("the store carries the marker");
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
