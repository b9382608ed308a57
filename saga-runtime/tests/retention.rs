//! Retention: finished instances are removed, history and all, once they
//! have been finished for longer than the retention period, by
//! `sweep_expired()` and by the engine's own hourly sweep on its clock;
//! instances still running or waiting are kept however old. The workflows
//! are written with `#[workflow]` and `#[step]`, as users write them.

#[path = "support/helpers.rs"]
mod helpers;

use std::time::Duration;

use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use saga_runtime::{EngineBuilder, Error, Instance};

use helpers::{wait_until, within};

const HOUR: u64 = 60 * 60;
const DAY: u64 = 24 * HOUR;

async fn engine_keeping(clock: &TestClock, retention: Duration) -> Engine {
    helpers::fresh(Engine::builder().clock(clock.clone()).retention(retention)).await
}

async fn is_gone(engine: &Engine, id: &str) -> bool {
    matches!(
        engine.instance(id).await,
        Err(Error::UnknownInstance { .. })
    )
}

/// Returns its input.
#[step(name = "echo", read_only)]
async fn echo_step(n: u32) -> Result<u32, StepError> {
    Ok(n)
}

/// Completes at once with its input.
#[workflow(name = "echo")]
async fn echo(ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    Ok(echo_step(&ctx, n).await?)
}

/// Fails at once (no compensation): an `Errored` instance.
#[workflow(name = "doomed")]
async fn doomed(_ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    Err(WorkflowError::new("no luck"))
}

/// Sleeps for a year: stays `Waiting`.
#[workflow(name = "sleeper")]
async fn sleeper(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    ctx.sleep("long-nap", "365 days").await?;
    Ok(())
}

/// Never finishes.
#[step(name = "forever", read_only)]
async fn forever() -> Result<(), StepError> {
    std::future::pending().await
}

/// Runs a step that never finishes: stays `Running`.
#[workflow(name = "busy")]
async fn busy(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    forever(&ctx).await?;
    Ok(())
}

/// An instance of each kind: `done` (Complete), `failed` (Errored),
/// `asleep` (Waiting), `busy` (Running), `paused` (Paused), `ended`
/// (Terminated); returns once each is where it should be.
async fn one_of_each(engine: &Engine, clock: &TestClock) {
    let done = engine.start(echo, "done", 1).await.unwrap();
    within("done", done.result()).await.unwrap();
    let failed = engine.start(doomed, "failed", ()).await.unwrap();
    assert!(within("failed", failed.result()).await.is_err());
    engine.start(sleeper, "asleep", ()).await.unwrap();
    within("the sleep", clock.wait_for_sleepers(1)).await;
    let running = engine.start(busy, "busy", ()).await.unwrap();
    until_started(&running).await;
    let paused = engine.start(sleeper, "paused", ()).await.unwrap();
    within("the second sleep", clock.wait_for_sleepers(2)).await;
    paused.pause().await.unwrap();
    let ended = engine.start(sleeper, "ended", ()).await.unwrap();
    within("the third sleep", clock.wait_for_sleepers(3)).await;
    ended.terminate().await.unwrap();
    assert_eq!(
        engine
            .instance("asleep")
            .await
            .unwrap()
            .status()
            .await
            .unwrap(),
        Status::Waiting
    );
    assert_eq!(running.status().await.unwrap(), Status::Running);
    assert_eq!(paused.status().await.unwrap(), Status::Paused);
    assert_eq!(ended.status().await.unwrap(), Status::Terminated);
}

async fn until_started(run: &(impl AsRef<Instance> + ?Sized)) {
    let run: &Instance = run.as_ref();
    wait_until("the busy step", || async {
        run.history()
            .await
            .unwrap()
            .iter()
            .any(|e| matches!(e.kind, EventKind::StepStarted { .. }))
    })
    .await;
}

#[tokio::test]
async fn sweep_removes_instances_finished_longer_ago_than_the_retention() {
    let clock = TestClock::new();
    let engine = engine_keeping(&clock, Duration::from_secs(DAY)).await;
    one_of_each(&engine, &clock).await;
    let done = engine.instance("done").await.unwrap();

    // Younger than a day: nothing goes.
    clock.advance(Duration::from_secs(DAY - 1));
    assert_eq!(engine.sweep_expired().await.unwrap(), 0);
    assert!(!is_gone(&engine, "done").await);

    clock.advance(Duration::from_secs(1));
    assert_eq!(engine.sweep_expired().await.unwrap(), 3);
    for id in ["done", "failed", "ended"] {
        assert!(is_gone(&engine, id).await, "{id} was removed");
    }
    // A handle taken before sees the removal too, history included.
    assert!(matches!(
        done.history().await,
        Err(Error::UnknownInstance { .. })
    ));
    assert!(matches!(
        done.status().await,
        Err(Error::UnknownInstance { .. })
    ));

    // Running, waiting and paused instances stay, however old.
    clock.advance(Duration::from_secs(100 * DAY));
    engine.sweep_expired().await.unwrap();
    for (id, status) in [
        ("asleep", Status::Waiting),
        ("busy", Status::Running),
        ("paused", Status::Paused),
    ] {
        assert_eq!(
            engine.instance(id).await.unwrap().status().await.unwrap(),
            status,
            "{id}"
        );
    }
    let listed: Vec<String> = engine
        .list(&saga_runtime::inspect::ListFilter::all())
        .await
        .unwrap()
        .into_iter()
        .map(|info| info.id)
        .collect();
    assert_eq!(listed, ["asleep", "busy", "paused"]);
}

#[tokio::test]
async fn a_removed_id_starts_afresh_with_an_empty_history() {
    let clock = TestClock::new();
    let engine = engine_keeping(&clock, Duration::from_secs(DAY)).await;
    let run = engine.start(echo, "again", 1).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 1);
    clock.advance(Duration::from_secs(2 * DAY));
    assert_eq!(engine.sweep_expired().await.unwrap(), 1);

    // Nothing of the old instance is left: same id, new input, new history.
    let run = engine.start(echo, "again", 2).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 2);
    let history = run.history().await.unwrap();
    assert_eq!(history.first().map(|e| e.seq), Some(0));
    assert_eq!(
        history
            .iter()
            .filter(|e| matches!(e.kind, EventKind::InstanceCreated { .. }))
            .count(),
        1,
        "{history:?}"
    );
}

#[tokio::test]
async fn the_engine_sweeps_on_its_own_every_hour_of_its_clock() {
    let clock = TestClock::new();
    let engine = engine_keeping(&clock, Duration::from_secs(DAY)).await;
    one_of_each(&engine, &clock).await;

    clock.advance(Duration::from_secs(DAY + HOUR));
    for id in ["done", "failed", "ended"] {
        wait_until("the sweeper", || is_gone(&engine, id)).await;
    }
    for id in ["asleep", "busy", "paused"] {
        assert!(!is_gone(&engine, id).await, "{id} is kept");
    }

    // It goes on sweeping: an instance finished now goes a day later.
    let late = engine.start(echo, "late", 3).await.unwrap();
    within("late", late.result()).await.unwrap();
    clock.advance(Duration::from_secs(12 * HOUR));
    // The sweeper waits on a timeout, which the clock does not count: the
    // harness's pause stands in.
    helpers::quiet(&engine).await;
    assert!(!is_gone(&engine, "late").await, "only half a day old");
    clock.advance(Duration::from_secs(13 * HOUR));
    wait_until("the next sweeps", || is_gone(&engine, "late")).await;
}

#[tokio::test]
async fn the_default_retention_is_seven_days() {
    assert_eq!(
        EngineBuilder::DEFAULT_RETENTION,
        Duration::from_secs(7 * DAY)
    );
    let clock = TestClock::new();
    let engine = helpers::fresh(Engine::builder().clock(clock.clone())).await;
    let run = engine.start(echo, "week", 1).await.unwrap();
    within("the result", run.result()).await.unwrap();
    clock.advance(Duration::from_secs(7 * DAY - 1));
    assert_eq!(engine.sweep_expired().await.unwrap(), 0);
    clock.advance(Duration::from_secs(1));
    assert_eq!(engine.sweep_expired().await.unwrap(), 1);
    assert!(is_gone(&engine, "week").await);
}
