//! Retention on sled walks the index of ended instances by end time, a
//! batch at a time: a sweep reads the instances that expired and none of
//! the others, whatever the history. A store whose index a release before
//! did not keep (its marker does not say so) is swept by reading every
//! entry once, which files every ended instance again; later sweeps walk
//! the index.
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

use saga_runtime::Error;
use saga_runtime::prelude::*;
use saga_runtime::store::SledStore;
use saga_runtime::testing::TestClock;

use child::DataDir;
use counting_store::CountingStore;
use helpers::within;

const HOUR: u64 = 60 * 60;
const DAY: u64 = 24 * HOUR;

/// More than one batch of the sweep's walk.
const OLD: usize = 600;
const YOUNG: usize = 20;

#[workflow(name = "one-step")]
async fn one_step(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    Ok(add_one(&ctx, n).await?)
}

#[step(name = "add-one", read_only)]
async fn add_one(n: u64) -> Result<u64, StepError> {
    Ok(n + 1)
}

/// The store in `dir`, read through a counting store, its engine keeping
/// ended instances for `retention`.
async fn open_counting(
    dir: &Path,
    clock: &TestClock,
    retention: Duration,
) -> (Engine, Arc<CountingStore>) {
    let sled = helpers::when_released(|| SledStore::open(dir))
        .await
        .unwrap();
    let store = Arc::new(CountingStore::new(sled));
    let engine = Engine::builder()
        .clock(clock.clone())
        .retention(retention)
        .register(one_step)
        .open_store(store.clone())
        .unwrap();
    (engine, store)
}

async fn run_to_end(engine: &Engine, id: &str) {
    let run = engine.start(one_step, id, 1).await.unwrap();
    within("an instance ends", run.result()).await.unwrap();
}

/// `OLD` instances ended (`old-N`), then two days later `YOUNG` more
/// (`young-N`): a day later, the old ones are past a day's retention and
/// the young ones not. Closed. Its engine keeps them for a year: its own
/// hourly sweep removes none.
async fn history(dir: &Path, clock: &TestClock) {
    let (engine, _store) = open_counting(dir, clock, Duration::from_secs(365 * DAY)).await;
    for i in 0..OLD {
        run_to_end(&engine, &format!("old-{i:04}")).await;
    }
    clock.advance(Duration::from_secs(2 * DAY));
    for i in 0..YOUNG {
        run_to_end(&engine, &format!("young-{i:02}")).await;
    }
    clock.advance(Duration::from_secs(HOUR));
    engine.close().await;
}

async fn is_gone(engine: &Engine, id: &str) -> bool {
    matches!(
        engine.instance(id).await,
        Err(Error::UnknownInstance { .. })
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_reads_the_expired_instances_alone() {
    let dir = DataDir::new("retention-index");
    let clock = TestClock::new();
    history(dir.path(), &clock).await;

    let (engine, store) = open_counting(dir.path(), &clock, Duration::from_secs(DAY)).await;
    store.take_reads();
    assert_eq!(engine.sweep_expired().await.unwrap(), OLD);
    let reads = store.take_reads();
    assert_eq!(reads.whole_index, 0, "{reads:?}");
    assert_eq!(reads.of_prefix("young-"), Vec::<&str>::new(), "{reads:?}");
    assert_eq!(reads.ended_keys, OLD, "{reads:?}");
    assert!(is_gone(&engine, "old-0000").await);
    assert!(is_gone(&engine, &format!("old-{:04}", OLD - 1)).await);
    assert!(!is_gone(&engine, "young-00").await);

    // Nothing more expired: the walk reads no key, and no instance.
    store.take_reads();
    assert_eq!(engine.sweep_expired().await.unwrap(), 0);
    let reads = store.take_reads();
    assert_eq!(reads.ended_keys, 0, "{reads:?}");
    assert_eq!(reads.of_prefix("young-"), Vec::<&str>::new(), "{reads:?}");
    engine.close().await;
}

/// What a release that keeps no index of ended instances leaves: its
/// repair on open writes the marker without the word `ended`, and the
/// instances it ends are not filed. Here none is.
fn as_written_by_a_release_without_the_ended_index(dir: &Path) {
    let db = sled::open(dir).unwrap();
    let index = db.open_tree("index").unwrap();
    let marker = index
        .iter()
        .keys()
        .map(|k| k.unwrap().to_vec())
        .find(|k| k.first() == Some(&0))
        .expect("the store carries the marker");
    index.insert(marker, &b"timers"[..]).unwrap();
    db.open_tree("ended").unwrap().clear().unwrap();
    db.flush().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_a_release_before_did_not_keep_is_rebuilt_by_a_whole_sweep() {
    let dir = DataDir::new("retention-index-before");
    let clock = TestClock::new();
    history(dir.path(), &clock).await;
    as_written_by_a_release_without_the_ended_index(dir.path());

    let (engine, store) = open_counting(dir.path(), &clock, Duration::from_secs(DAY)).await;
    store.take_reads();
    assert_eq!(engine.sweep_expired().await.unwrap(), OLD);
    // Every entry was read, the young ones too.
    let reads = store.take_reads();
    assert_eq!(reads.of_prefix("young-").len(), YOUNG, "{reads:?}");
    assert!(is_gone(&engine, "old-0000").await);
    assert!(!is_gone(&engine, "young-00").await);
    engine.close().await;
    drop(store);

    // Rebuilt, and trusted after a reopen: the young ones, filed by the
    // whole sweep, go by the index. (The clock moves before the engine
    // opens: its own hourly sweep does not run meanwhile.)
    clock.advance(Duration::from_secs(DAY));
    let (engine, store) = open_counting(dir.path(), &clock, Duration::from_secs(DAY)).await;
    store.take_reads();
    assert_eq!(engine.sweep_expired().await.unwrap(), YOUNG);
    let reads = store.take_reads();
    assert_eq!(reads.whole_index, 0, "{reads:?}");
    assert_eq!(reads.ended_keys, YOUNG, "{reads:?}");
    assert!(is_gone(&engine, "young-00").await);
    engine.close().await;
}
