//! A filtered page on sled walks the instances that have the filter's
//! most selective fact (its workflow, queue, parent, a tag, ended or not),
//! from its cursor: it reads the page's instances, not the history. A
//! store whose list indexes a release before did not keep (its marker does
//! not say so) lists the same meanwhile, and the indexes are refiled in
//! the background.
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

use saga_runtime::StartOptions;
use saga_runtime::inspect::{ListFilter, Page};
use saga_runtime::prelude::*;
use saga_runtime::store::SledStore;
use saga_runtime::testing::TestClock;

use child::DataDir;
use counting_store::CountingStore;
use helpers::within;

/// Ended instances: more than a few pages.
const ENDED: usize = 200;
/// Asleep: `asleep-N`; the first `TAGGED` carry the tag `batch=b7`.
const ASLEEP: usize = 5;
const TAGGED: usize = 3;

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

#[step(name = "add-one", read_only)]
async fn add_one(n: u64) -> Result<u64, StepError> {
    Ok(n + 1)
}

async fn open_counting(dir: &Path, clock: &TestClock) -> (Engine, Arc<CountingStore>) {
    let sled = helpers::when_released(|| SledStore::open(dir))
        .await
        .unwrap();
    let store = Arc::new(CountingStore::new(sled));
    let engine = Engine::builder()
        .clock(clock.clone())
        .register(one_step)
        .register(nap)
        .open_store(store.clone())
        .unwrap();
    (engine, store)
}

/// `ENDED` instances ended (`done-N`), then `ASLEEP` asleep, closed.
async fn history(dir: &Path, clock: &TestClock) {
    let (engine, _store) = open_counting(dir, clock).await;
    for i in 0..ENDED {
        let run = engine
            .start(one_step, &format!("done-{i:03}"), 1)
            .await
            .unwrap();
        within("an instance ends", run.result()).await.unwrap();
    }
    // Started in the reverse of id order: start order is not id order.
    for i in (0..ASLEEP).rev() {
        let mut options = StartOptions::new();
        if i < TAGGED {
            options = options.tag("batch", "b7");
        }
        engine
            .start_with(nap, &format!("asleep-{i}"), 1, options)
            .await
            .unwrap();
        clock.advance(std::time::Duration::from_millis(1));
    }
    within("instances fall asleep", clock.wait_for_sleepers(ASLEEP)).await;
    engine.close().await;
}

/// Every instance of the walk of `filter` in pages of `limit` (`by_id`:
/// in id order), and how many entries the store read for it.
async fn walk(
    engine: &Engine,
    store: &CountingStore,
    filter: &ListFilter,
    limit: usize,
    by_id: bool,
) -> (Vec<String>, usize) {
    store.take_reads();
    let mut page = Page::first(limit);
    if by_id {
        page = page.by_id();
    }
    let mut ids = Vec::new();
    loop {
        let found = engine.list_page(filter, &page).await.unwrap();
        ids.extend(found.instances.into_iter().map(|info| info.id));
        match found.next {
            Some(cursor) => page = page.after(cursor),
            None => break,
        }
    }
    (ids, store.take_reads().page_entries)
}

fn asleep(ids: &[usize]) -> Vec<String> {
    ids.iter().map(|i| format!("asleep-{i}")).collect()
}

/// What the filters find, however the store walks: checked in start
/// order and in id order, in pages of one and of a hundred.
async fn lists_as_expected(engine: &Engine, store: &CountingStore) {
    let waiting = ListFilter::all().status(Status::Waiting);
    let tagged = ListFilter::all().tag("batch", "b7");
    let naps = ListFilter::all().workflow("nap");
    for limit in [1, 100] {
        let (ids, _) = walk(engine, store, &waiting, limit, false).await;
        assert_eq!(
            ids,
            asleep(&[4, 3, 2, 1, 0]),
            "start order, pages of {limit}"
        );
        let (ids, _) = walk(engine, store, &waiting, limit, true).await;
        assert_eq!(ids, asleep(&[0, 1, 2, 3, 4]), "id order, pages of {limit}");
        let (ids, _) = walk(engine, store, &tagged, limit, false).await;
        assert_eq!(ids, asleep(&[2, 1, 0]));
        let (ids, _) = walk(engine, store, &naps, limit, true).await;
        assert_eq!(ids, asleep(&[0, 1, 2, 3, 4]));
    }
    let ended = ListFilter::all()
        .status(Status::Complete)
        .workflow("one-step");
    let (ids, _) = walk(engine, store, &ended, 7, true).await;
    assert_eq!(ids.len(), ENDED);
    assert_eq!(ids[0], "done-000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selective_page_reads_the_instances_that_match_alone() {
    let dir = DataDir::new("list-index");
    let clock = TestClock::new();
    history(dir.path(), &clock).await;
    let (engine, store) = open_counting(dir.path(), &clock).await;
    within("the sleepers resume", clock.wait_for_sleepers(ASLEEP)).await;

    lists_as_expected(&engine, &store).await;
    let waiting = ListFilter::all().status(Status::Waiting);
    let (_, read) = walk(&engine, &store, &waiting, 100, false).await;
    assert_eq!(read, ASLEEP, "the instances not ended, and no ended one");
    let tagged = ListFilter::all().tag("batch", "b7");
    let (_, read) = walk(&engine, &store, &tagged, 100, true).await;
    assert_eq!(read, TAGGED);
    // A first page of two reads two entries.
    store.take_reads();
    let first = engine.list_page(&waiting, &Page::first(2)).await.unwrap();
    assert_eq!(first.instances.len(), 2);
    assert!(first.next.is_some());
    assert_eq!(store.take_reads().page_entries, 2);
    engine.close().await;
}

/// What a release that keeps no list indexes leaves: its repair on open
/// writes the marker without the word `lists`, and what it writes is not
/// filed. Here nothing is.
fn as_written_by_a_release_without_list_indexes(dir: &Path) {
    let db = sled::open(dir).unwrap();
    let index = db.open_tree("index").unwrap();
    let marker = index
        .iter()
        .keys()
        .map(|k| k.unwrap().to_vec())
        .find(|k| k.first() == Some(&0))
        .expect("the store carries the marker");
    index.insert(marker, &b"timers+ended"[..]).unwrap();
    db.open_tree("lists").unwrap().clear().unwrap();
    db.open_tree("lists_of").unwrap().clear().unwrap();
    db.flush().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_indexes_a_release_before_did_not_keep_are_refiled_not_trusted() {
    let dir = DataDir::new("list-index-before");
    let clock = TestClock::new();
    history(dir.path(), &clock).await;
    as_written_by_a_release_without_list_indexes(dir.path());

    let (engine, store) = open_counting(dir.path(), &clock).await;
    within("the sleepers resume", clock.wait_for_sleepers(ASLEEP)).await;
    // Whether the refiling is done yet or not: the same instances.
    lists_as_expected(&engine, &store).await;
    let waiting = ListFilter::all().status(Status::Waiting);
    helpers::wait_until("the list indexes are refiled", || async {
        walk(&engine, &store, &waiting, 100, false).await.1 == ASLEEP
    })
    .await;
    lists_as_expected(&engine, &store).await;
    engine.close().await;
    drop(store);

    // Trusted from the first page after a reopen.
    let (engine, store) = open_counting(dir.path(), &clock).await;
    within("the sleepers resume", clock.wait_for_sleepers(ASLEEP)).await;
    let (ids, read) = walk(&engine, &store, &waiting, 100, false).await;
    assert_eq!(ids.len(), ASLEEP);
    assert_eq!(read, ASLEEP);
    engine.close().await;
}
