//! Published state: a workflow sets named values (`ctx.publish`) that
//! callers outside read while it runs (`Instance::published`) or wait on
//! (`Instance::wait_for_published`). The latest value wins, the history
//! keeps each, a replay writes none again, and a wait wakes on a change or
//! times out on the engine's clock. The workflows are written with
//! `#[workflow]` and `#[step]`, as users write them.

#[path = "support/helpers.rs"]
mod helpers;

use std::time::Duration;

use saga_runtime::Engine;
use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;

use helpers::{Reopenable, drop_after, until_status, within};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Progress {
    done: u32,
    total: u32,
}

#[step(name = "import-row", read_only)]
async fn import_row(row: u32) -> Result<u32, StepError> {
    Ok(row)
}

/// Imports `rows` rows, publishing its progress after each and its stage
/// before and after it waits to go on.
#[workflow(name = "import")]
async fn import(ctx: WorkflowContext, rows: u32) -> Result<u32, WorkflowError> {
    ctx.publish("stage", "importing")?;
    for row in 1..=rows {
        import_row(&ctx, row).await?;
        ctx.publish(
            "progress",
            &Progress {
                done: row,
                total: rows,
            },
        )?;
    }
    ctx.wait_for_event::<()>("go-on", "go-on", "1 day").await?;
    ctx.publish("stage", "finished")?;
    Ok(rows)
}

/// Publishes 1, sleeps a day, then publishes 2.
#[workflow(name = "count")]
async fn count(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    ctx.publish("count", &1u32)?;
    ctx.sleep("a-day", "1 day").await?;
    ctx.publish("count", &2u32)?;
    Ok(())
}

/// The names of the `Published` events of the instance's history, in order.
async fn published_names(run: &(impl AsRef<Instance> + ?Sized)) -> Vec<String> {
    helpers::kinds(run)
        .await
        .into_iter()
        .filter_map(|kind| match kind {
            EventKind::Published { name } => Some(name),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn the_latest_value_is_read_while_the_workflow_runs_and_after_it_ends() {
    let engine = helpers::fresh(Engine::builder().register(import)).await;
    let run = engine.start(import, "import-1", 3).await.unwrap();
    until_status(&run, Status::Waiting).await;

    assert_eq!(
        run.published::<Progress>("progress").await.unwrap(),
        Some(Progress { done: 3, total: 3 })
    );
    assert_eq!(
        run.published::<String>("stage").await.unwrap().as_deref(),
        Some("importing")
    );
    assert_eq!(run.published::<u32>("never-set").await.unwrap(), None);
    // The history keeps each value's record; readers see the latest.
    assert_eq!(
        published_names(&run).await,
        ["stage", "progress", "progress", "progress"]
    );

    engine.send_event("import-1", "go-on", &()).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 3);
    assert_eq!(
        run.published::<String>("stage").await.unwrap().as_deref(),
        Some("finished")
    );
    // A value that does not decode as the type asked for is a typed error.
    let error = run.published::<u32>("stage").await.unwrap_err();
    assert!(matches!(error, Error::Decode { .. }), "{error}");
    // The inspection lists each name's latest value.
    let inspection = run.inspect().await.unwrap();
    let names: Vec<(&str, Option<&serde_json::Value>)> = inspection
        .published
        .iter()
        .map(|p| (p.name.as_str(), p.value.json()))
        .collect();
    assert_eq!(
        names,
        [
            (
                "progress",
                Some(&serde_json::json!({"done": 3, "total": 3}))
            ),
            ("stage", Some(&serde_json::json!("finished"))),
        ]
    );
    engine.close().await;
}

#[tokio::test]
async fn a_replay_after_a_reopen_keeps_the_values_and_publishes_none_again() {
    let store = Reopenable::new("published-replay").await;
    let engine = store.open(|| Engine::builder().register(import)).await;
    let run = engine.start(import, "import-2", 2).await.unwrap();
    until_status(&run, Status::Waiting).await;
    assert_eq!(
        published_names(&run).await,
        ["stage", "progress", "progress"]
    );
    drop(run);
    engine.close().await;

    let engine = store.open(|| Engine::builder().register(import)).await;
    let run = engine.instance("import-2").await.unwrap();
    assert_eq!(
        run.published::<Progress>("progress").await.unwrap(),
        Some(Progress { done: 2, total: 2 })
    );
    // Going on replays the workflow from its start: its publishes before
    // the wait are in the journal already, and are not written again.
    engine.send_event("import-2", "go-on", &()).await.unwrap();
    assert_eq!(within("the result", run.result::<u32>()).await.unwrap(), 2);
    assert_eq!(
        published_names(&run).await,
        ["stage", "progress", "progress", "stage"]
    );
    assert_eq!(
        run.published::<String>("stage").await.unwrap().as_deref(),
        Some("finished")
    );
    engine.close().await;
}

#[tokio::test]
async fn a_wait_wakes_when_the_value_changes_and_times_out_on_the_engines_clock() {
    let clock = TestClock::new();
    let engine = helpers::fresh(Engine::builder().clock(clock.clone()).register(count)).await;
    let run = engine.start(count, "count-1", ()).await.unwrap();

    // Any value: the first is there, or comes.
    let first = within(
        "the first value",
        run.wait_for_published::<u32>("count", None, Duration::from_secs(60)),
    )
    .await
    .unwrap()
    .expect("a value before the timeout");
    assert_eq!(first.value, 1);
    within("the sleep", clock.wait_for_sleeps(1)).await;

    // Nothing newer within 10 seconds of the engine's clock.
    let waiting = {
        let run = run.clone();
        tokio::spawn(async move {
            run.wait_for_published::<u32>("count", Some(first.version), Duration::from_secs(10))
                .await
        })
    };
    within("the wait's deadline", clock.wait_for_event_waits(1)).await;
    clock.advance(Duration::from_secs(11));
    assert_eq!(within("the timeout", waiting).await.unwrap().unwrap(), None);

    // The workflow wakes a day later and publishes 2: the wait wakes.
    let waiting = {
        let run = run.clone();
        tokio::spawn(async move {
            run.wait_for_published::<u32>(
                "count",
                Some(first.version),
                Duration::from_secs(3 * 86_400),
            )
            .await
        })
    };
    within("the wait's deadline", clock.wait_for_event_waits(1)).await;
    clock.advance(Duration::from_secs(86_400));
    let second = within("the change", waiting)
        .await
        .unwrap()
        .unwrap()
        .expect("the new value");
    assert_eq!(second.value, 2);
    assert!(second.version > first.version);
    within("the end", run.result()).await.unwrap();

    // The instance ended: a wait for a newer value answers at once.
    let after_end = run
        .wait_for_published::<u32>("count", Some(second.version), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(after_end, None);
    engine.close().await;
}

#[tokio::test]
async fn a_wait_dropped_at_any_await_leaves_nothing_behind() {
    let clock = TestClock::new();
    let engine = helpers::fresh(Engine::builder().clock(clock.clone()).register(count)).await;
    let run = engine.start(count, "count-2", ()).await.unwrap();
    within("the sleep", clock.wait_for_sleeps(1)).await;
    let first = run
        .wait_for_published::<u32>("count", None, Duration::from_secs(60))
        .await
        .unwrap()
        .expect("the first value");
    for polls in 1..8 {
        let wait =
            run.wait_for_published::<u32>("count", Some(first.version), Duration::from_secs(10));
        assert!(
            drop_after(wait, polls).await.is_none(),
            "after {polls} polls"
        );
        // Its deadline went with it.
        assert_eq!(clock.event_waits(), 0, "after {polls} polls");
    }
    // The instance runs on, and a new wait sees the next value.
    clock.advance(Duration::from_secs(86_400));
    let second = within(
        "the change",
        run.wait_for_published::<u32>("count", Some(first.version), Duration::from_secs(60)),
    )
    .await
    .unwrap()
    .expect("the new value");
    assert_eq!(second.value, 2);
    engine.close().await;
}

/// On PostgreSQL, an engine that does not own the instance (a client of
/// the same schema, which runs no workflow) reads the value and waits for
/// its change, which the owner publishes.
#[tokio::test]
async fn another_worker_reads_and_waits_for_published_values() {
    if !helpers::on_postgres() {
        return;
    }
    let store = Reopenable::new("published-workers").await;
    let owner = store.open(|| Engine::builder().register(import)).await;
    let client = store.open(Engine::builder).await;
    let run = owner.start(import, "import-3", 2).await.unwrap();
    until_status(&run, Status::Waiting).await;

    let remote = client.instance("import-3").await.unwrap();
    assert_eq!(
        remote.published::<Progress>("progress").await.unwrap(),
        Some(Progress { done: 2, total: 2 })
    );
    let stage = remote
        .wait_for_published::<String>("stage", None, Duration::from_secs(60))
        .await
        .unwrap()
        .expect("the stage");
    assert_eq!(stage.value, "importing");
    let waiting = {
        let remote = remote.clone();
        tokio::spawn(async move {
            remote
                .wait_for_published::<String>("stage", Some(stage.version), helpers::PATIENCE)
                .await
        })
    };
    client.send_event("import-3", "go-on", &()).await.unwrap();
    let finished = within("the change on the other worker", waiting)
        .await
        .unwrap()
        .unwrap()
        .expect("the new stage");
    assert_eq!(finished.value, "finished");
    client.close().await;
    owner.close().await;
}

/// A value is checked before it is recorded: a name outside the grammar
/// (the macros refuse it at build time; `workflow_fn` meets it at run
/// time) and a value over the payload limit are typed errors.
#[tokio::test]
async fn a_bad_name_or_a_value_too_large_is_a_typed_error() {
    let checks = workflow_fn("checks", |ctx: WorkflowContext, (): ()| async move {
        let bad_name = ctx.publish("Progress", &1u32).map_err(|e| e.to_string());
        let too_large = ctx
            .publish("blob", &"x".repeat(4096))
            .map_err(|e| e.to_string());
        Ok::<_, WorkflowError>((bad_name, too_large))
    });
    let engine = helpers::fresh(Engine::builder().max_payload_bytes(1024).register(checks)).await;
    let run = engine.start(checks, "checks-1", ()).await.unwrap();
    let (bad_name, too_large) = within("the result", run.result()).await.unwrap();
    assert!(
        bad_name
            .unwrap_err()
            .contains("invalid published value name")
    );
    assert!(too_large.unwrap_err().contains("blob"));
    assert_eq!(run.published::<String>("blob").await.unwrap(), None);
    engine.close().await;
}

/// The replay check before a deploy runs the workflow against a history
/// that holds published values: a publish is no call it must meet, and
/// the replay records nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_check_passes_a_history_with_published_values() {
    use saga_runtime::testing::{History, Replayed, replay};
    let engine = helpers::fresh(Engine::builder().register(import)).await;
    let run = engine.start(import, "import-5", 2).await.unwrap();
    until_status(&run, Status::Waiting).await;
    let history = History::export(&engine, "import-5").await.unwrap();
    assert_eq!(
        replay(import, &history).await.unwrap(),
        Replayed::ReachedEnd
    );

    engine.send_event("import-5", "go-on", &()).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 2);
    let history = History::export(&engine, "import-5").await.unwrap();
    assert_eq!(replay(import, &history).await.unwrap(), Replayed::Returned);
    assert_eq!(
        published_names(&run).await,
        ["stage", "progress", "progress", "stage"]
    );
    engine.close().await;
}
