//! What a PostgreSQL worker reads when it starts on a schema whose last
//! worker is gone: it claims the instances that worker left, and those
//! that only wait for a later time are not loaded until they are due
//! (their timers are filed in the `timers` table); an event or a control
//! call still reaches them. A timer that a worker of a release before may
//! have left stale is not trusted, and while such a worker is alive none
//! is. The PostgreSQL counterparts of `tests/startup.rs`.
//!
//! Read through a store that counts reads (`support/counting_store.rs`).
#![cfg(feature = "postgres")]

#[path = "support/counting_store.rs"]
mod counting_store;
#[path = "support/helpers.rs"]
mod helpers;

use std::sync::Arc;
use std::time::Duration;

use saga_runtime::EngineBuilder;
use saga_runtime::prelude::*;
use saga_runtime::store::{PgOptions, PgStore};
use saga_runtime::testing::TestClock;

use counting_store::CountingStore;
use helpers::{postgres, within};

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

#[step(name = "add-one", read_only)]
async fn add_one(n: u64) -> Result<u64, StepError> {
    Ok(n + 1)
}

const ENDED: usize = 6;
const ASLEEP: usize = 12;
/// The sleepers and the one event wait.
const WAITING: usize = ASLEEP + 1;

fn builder(clock: &TestClock, schema: &str) -> EngineBuilder {
    Engine::builder()
        .clock(clock.clone())
        .postgres_schema(schema)
        .poll_interval(Duration::from_millis(50))
        .register(one_step)
        .register(nap)
        .register(approval)
}

/// A schema of this test's own with `ENDED` instances ended (`done-N`),
/// `ASLEEP` asleep for a day (`asleep-N`) and one waiting a week for an
/// event (`waits`), its worker gone (closed: its lease ended).
async fn history(tag: &str, clock: &TestClock) -> String {
    let schema = postgres::fresh_schema(tag).await;
    let engine = builder(clock, &schema)
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e));
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
    engine.start(approval, "waits", 1).await.unwrap();
    within("every instance waits", clock.wait_for_sleepers(WAITING)).await;
    helpers::quiet(&engine).await;
    engine.close().await;
    schema
}

/// A new worker on `schema`, through a counting store, once it claimed
/// every waiting instance and ran a new one.
async fn next_worker(schema: &str, clock: &TestClock) -> (Engine, Arc<CountingStore>) {
    let mut options = PgOptions::new(&postgres::database_url());
    options.schema = schema.to_owned();
    let pg = PgStore::connect(options).await.unwrap();
    let store = Arc::new(CountingStore::new(pg));
    let engine = builder(clock, schema).open_store(store.clone()).unwrap();
    within(
        "every waiting instance is claimed",
        clock.wait_for_sleepers(WAITING),
    )
    .await;
    let run = engine.start(one_step, "probe", 1).await.unwrap();
    assert_eq!(
        within("a new instance ends", run.result()).await.unwrap(),
        2
    );
    helpers::quiet(&engine).await;
    (engine, store)
}

/// The ids of the sleepers.
fn sleepers() -> impl Iterator<Item = String> {
    (0..ASLEEP).map(|i| format!("asleep-{i}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleeping_instances_are_claimed_but_not_loaded_until_due() {
    let clock = TestClock::new();
    let schema = history("pgstartasleep", &clock).await;
    let (engine, store) = next_worker(&schema, &clock).await;
    let reads = store.take_reads();
    for prefix in ["asleep-", "waits", "done-"] {
        assert_eq!(reads.journals_of(prefix), Vec::<&str>::new(), "{reads:?}");
    }
    assert_eq!(reads.of_prefix("done-"), Vec::<&str>::new(), "{reads:?}");
    assert_eq!(reads.whole_index, 0, "{reads:?}");
    assert_eq!(clock.sleepers(), WAITING, "each is counted once");

    // Their time comes: each is loaded, and ends.
    clock.advance(Duration::from_secs(24 * 60 * 60));
    for id in sleepers() {
        let run = engine.instance(&id).await.unwrap();
        assert_eq!(
            within("a sleeper ends", run.result::<u64>()).await.unwrap(),
            2
        );
    }
    let reads = store.take_reads();
    assert_eq!(reads.journals_of("asleep-").len(), ASLEEP, "{reads:?}");
    // The event wait is not due yet: still not loaded.
    assert_eq!(reads.journals_of("waits"), Vec::<&str>::new(), "{reads:?}");
    assert_eq!(clock.sleepers(), 1, "only the event wait is left");
    engine.close().await;
    postgres::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_wakes_a_waiter_that_was_never_loaded() {
    let clock = TestClock::new();
    let schema = history("pgstartevent", &clock).await;
    let (engine, store) = next_worker(&schema, &clock).await;
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
    assert_eq!(clock.sleepers(), ASLEEP, "the sleepers still sleep");
    let reads = store.take_reads();
    assert_eq!(
        reads.journals_of("asleep-"),
        Vec::<&str>::new(),
        "{reads:?}"
    );
    engine.close().await;
    postgres::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeper_that_was_never_loaded_can_be_terminated() {
    let clock = TestClock::new();
    let schema = history("pgstartterm", &clock).await;
    let (engine, _store) = next_worker(&schema, &clock).await;
    let run = engine.instance("asleep-3").await.unwrap();
    run.terminate().await.unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    assert_eq!(clock.sleepers(), WAITING - 1, "it sleeps no more");
    // The others wake as before; the terminated one stays terminated.
    clock.advance(Duration::from_secs(24 * 60 * 60));
    let woken = engine.instance("asleep-4").await.unwrap();
    assert_eq!(
        within("a sleeper ends", woken.result::<u64>())
            .await
            .unwrap(),
        2
    );
    helpers::quiet(&engine).await;
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    engine.close().await;
    postgres::drop_schema(&schema).await;
}

/// A timer whose index entry changed since it was filed (as a worker of a
/// release before, which keeps no timers, leaves it) is not trusted: that
/// instance is loaded at once; the others are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_its_entry_no_longer_files_is_not_trusted() {
    let clock = TestClock::new();
    let schema = history("pgstartstale", &clock).await;
    postgres::admin()
        .await
        .batch_execute(&format!(
            "UPDATE {schema}.timers SET filed_by = '\\x00' WHERE id = 'asleep-0'"
        ))
        .await
        .unwrap();
    let (engine, store) = next_worker(&schema, &clock).await;
    let reads = store.take_reads();
    assert_eq!(reads.journals_of("asleep-"), ["asleep-0"], "{reads:?}");
    assert_eq!(clock.sleepers(), WAITING, "it sleeps again, loaded");
    clock.advance(Duration::from_secs(24 * 60 * 60));
    for id in sleepers() {
        let run = engine.instance(&id).await.unwrap();
        assert_eq!(
            within("a sleeper ends", run.result::<u64>()).await.unwrap(),
            2
        );
    }
    engine.close().await;
    postgres::drop_schema(&schema).await;
}

/// While a worker of a release that keeps no timers is alive, a new worker
/// trusts none: it loads every instance it claims, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_a_worker_of_a_release_before_lives_every_claimed_sleeper_is_loaded() {
    let clock = TestClock::new();
    let schema = history("pgstartolder", &clock).await;
    let admin = postgres::admin().await;
    admin
        .batch_execute(&format!(
            "INSERT INTO {schema}.workers (name, expires_at)
             VALUES ('a-worker-of-the-release-before', now() + interval '1 hour')"
        ))
        .await
        .unwrap();
    let (engine, store) = next_worker(&schema, &clock).await;
    let reads = store.take_reads();
    assert_eq!(reads.journals_of("asleep-").len(), ASLEEP, "{reads:?}");
    assert_eq!(reads.journals_of("waits"), ["waits"], "{reads:?}");
    // Its workers record their release: a worker of this one counts as none.
    let releases: Vec<Option<i32>> = admin
        .query(
            &format!("SELECT release FROM {schema}.workers ORDER BY release NULLS FIRST"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(releases.first(), Some(&None), "{releases:?}");
    assert!(
        releases[1..].iter().all(|r| r.is_some_and(|r| r >= 11)),
        "{releases:?}"
    );
    clock.advance(Duration::from_secs(24 * 60 * 60));
    let woken = engine.instance("asleep-1").await.unwrap();
    assert_eq!(
        within("a sleeper ends", woken.result::<u64>())
            .await
            .unwrap(),
        2
    );
    engine.close().await;
    postgres::drop_schema(&schema).await;
}

/// More sleepers than the engine's window of alarms (256): the worker that
/// claims them keeps only the next ones in memory and reads on from the
/// `timers` table (in wake, then id order), and every one wakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_sleepers_than_the_window_all_wake() {
    const MANY: usize = 300;
    let clock = TestClock::new();
    let schema = postgres::fresh_schema("pgstartwindow").await;
    let url = postgres::database_url();
    let engine = builder(&clock, &schema)
        .connect(&url)
        .await
        .unwrap_or_else(|e| postgres::missing(e));
    for i in 0..MANY {
        engine.start(nap, &format!("nap-{i:03}"), 1).await.unwrap();
    }
    within("every instance sleeps", clock.wait_for_sleepers(MANY)).await;
    helpers::quiet(&engine).await;
    engine.close().await;

    let mut options = PgOptions::new(&url);
    options.schema = schema.clone();
    let store = Arc::new(CountingStore::new(PgStore::connect(options).await.unwrap()));
    let engine = builder(&clock, &schema).open_store(store.clone()).unwrap();
    within("every sleeper is claimed", clock.wait_for_sleepers(MANY)).await;
    helpers::quiet(&engine).await;
    let reads = store.take_reads();
    assert_eq!(reads.journals_of("nap-"), Vec::<&str>::new(), "{reads:?}");
    clock.advance(Duration::from_secs(24 * 60 * 60));
    for i in 0..MANY {
        let run = engine.instance(&format!("nap-{i:03}")).await.unwrap();
        assert_eq!(
            within("a sleeper ends", run.result::<u64>()).await.unwrap(),
            2
        );
    }
    assert_eq!(clock.sleepers(), 0);
    engine.close().await;
    postgres::drop_schema(&schema).await;
}
