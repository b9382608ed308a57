//! A store written by an earlier build still opens and replays.
//!
//! `tests/fixtures/store-v1/` is a sled directory written by this crate
//! (format version 1) with four instances of workflow `fixture`: one
//! complete, one errored after its rollback, one in a 7-day sleep, one
//! waiting for an event. The test copies it, opens the copy, checks
//! statuses, results and histories, and lets the waiting ones finish by
//! replay, so a change of the encoding or of the history format fails here
//! before it reaches a user's store.
//!
//! Regenerate the fixture (only on purpose, with a format-version bump and
//! a migration for the old one) with:
//!
//! ```text
//! SAGA_WRITE_FIXTURE=1 cargo test -p saga-runtime --test upgrade
//! ```

#[path = "support/helpers.rs"]
mod helpers;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saga_runtime::inspect::{EventKind, ListFilter};
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use saga_runtime::{Error, FailureKind};

use helpers::{kinds, until_status, within};

/// What ran in this process, provided to the engine as a service: how
/// many step bodies, and the keys of the compensations.
#[derive(Default)]
struct Runs {
    bodies: AtomicU32,
    compensations: Mutex<Vec<String>>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
enum Shape {
    Complete,
    Errored,
    Sleep,
    Event,
}

#[step(name = "reserve", read_only, rollback = undo_reserve)]
async fn reserve(runs: Service<Runs>) -> Result<u64, StepError> {
    runs.bodies.fetch_add(1, Ordering::SeqCst);
    Ok(10)
}

#[rollback]
async fn undo_reserve(ctx: RollbackContext<'_, u64>, runs: Service<Runs>) -> Result<(), StepError> {
    runs.compensations
        .lock()
        .unwrap()
        .push(ctx.key().as_str().to_owned());
    Ok(())
}

#[step(name = "charge", read_only, retries = 0)]
async fn charge(runs: Service<Runs>) -> Result<u64, StepError> {
    runs.bodies.fetch_add(1, Ordering::SeqCst);
    Err(StepError::fatal("card declined"))
}

#[step(name = "finish", read_only)]
async fn finish(runs: Service<Runs>) -> Result<u64, StepError> {
    runs.bodies.fetch_add(1, Ordering::SeqCst);
    Ok(5)
}

#[workflow(name = "fixture")]
async fn fixture(ctx: WorkflowContext, shape: Shape) -> Result<u64, WorkflowError> {
    let reserved = reserve(&ctx).await?;
    match shape {
        Shape::Complete => {}
        Shape::Errored => {
            charge(&ctx).await?;
        }
        Shape::Sleep => ctx.sleep("settle", "7 days").await?,
        Shape::Event => {
            let approved: u64 = ctx
                .wait_for_event("approval", "approved", "30 days")
                .await?;
            return Ok(reserved + approved);
        }
    }
    let finished = finish(&ctx).await?;
    Ok(reserved + finished)
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v1")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the copy");
    for entry in std::fs::read_dir(from).expect("read the fixture") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a fixture file");
        }
    }
}

/// Writes the fixture: run by hand, see the module docs.
async fn write_fixture(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    let engine = Engine::builder()
        .clock(TestClock::new())
        .provide(Runs::default())
        .open(dir)
        .expect("open the fixture dir");
    let complete = engine
        .start(fixture, "complete-1", Shape::Complete)
        .await
        .unwrap();
    assert_eq!(within("complete-1", complete.result()).await.unwrap(), 15);
    let errored = engine
        .start(fixture, "errored-1", Shape::Errored)
        .await
        .unwrap();
    within("errored-1", errored.result())
        .await
        .expect_err("errored");
    for (id, shape) in [("sleeping-1", Shape::Sleep), ("waiting-1", Shape::Event)] {
        let run = engine.start(fixture, id, shape).await.unwrap();
        until_status(&run, Status::Waiting).await;
    }
    engine.close().await;
    println!("wrote the fixture to {}", dir.display());
}

fn started(step: &str) -> EventKind {
    EventKind::StepStarted {
        step: step.into(),
        occurrence: 0,
    }
}

fn completed(step: &str) -> EventKind {
    EventKind::StepCompleted {
        step: step.into(),
        occurrence: 0,
        attempts: 1,
    }
}

fn created() -> EventKind {
    EventKind::InstanceCreated {
        workflow: "fixture".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_format_version_1_opens_and_replays() {
    if std::env::var_os("SAGA_WRITE_FIXTURE").is_some() {
        write_fixture(&fixture_dir()).await;
        return;
    }
    let copy = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("saga-upgrade-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&copy);
    copy_dir(&fixture_dir(), &copy);
    let clock = TestClock::new();
    let runs = Arc::new(Runs::default());
    let engine = Engine::builder()
        .clock(clock.clone())
        .provide_arc(runs.clone())
        .register(fixture)
        .open(&copy)
        .expect("the fixture opens");

    let listed: Vec<(String, Status)> = engine
        .list(&ListFilter::all())
        .await
        .unwrap()
        .into_iter()
        .map(|i| (i.id, i.status))
        .collect();
    assert_eq!(listed.len(), 4, "{listed:?}");

    let complete = engine.instance("complete-1").await.unwrap();
    assert_eq!(complete.status().await.unwrap(), Status::Complete);
    assert_eq!(complete.result::<u64>().await.unwrap(), 15);
    assert_eq!(
        kinds(&complete).await,
        [
            created(),
            EventKind::InstanceResumed,
            started("reserve"),
            completed("reserve"),
            started("finish"),
            completed("finish"),
            EventKind::InstanceCompleted,
        ]
    );

    let errored = engine.instance("errored-1").await.unwrap();
    match errored.result::<u64>().await {
        Err(Error::WorkflowFailed {
            failure,
            rollback_failure: None,
            ..
        }) => {
            assert_eq!(
                failure.kind(),
                &FailureKind::Step {
                    step: "charge".into()
                }
            );
            assert!(failure.message().contains("card declined"));
        }
        other => panic!("expected WorkflowFailed, got {other:?}"),
    }
    let history = kinds(&errored).await;
    assert_eq!(
        &history[..4],
        [
            created(),
            EventKind::InstanceResumed,
            started("reserve"),
            completed("reserve")
        ]
    );
    for expected in [
        EventKind::RollbackStepStarted {
            step: "reserve".into(),
            occurrence: 0,
        },
        EventKind::RollbackStepCompleted {
            step: "reserve".into(),
            occurrence: 0,
        },
        EventKind::RollbackCompleted,
    ] {
        assert!(history.contains(&expected), "{expected:?} in {history:?}");
    }
    assert!(matches!(
        history.last(),
        Some(EventKind::InstanceErrored { error }) if error.contains("card declined")
    ));

    // The waiting ones resume by replay: their first step is not run again.
    let sleeping = engine.instance("sleeping-1").await.unwrap();
    let waiting = engine.instance("waiting-1").await.unwrap();
    within("the replayed sleep", clock.wait_for_sleepers(1)).await;
    clock.advance(Duration::from_secs(7 * 24 * 60 * 60));
    assert_eq!(
        within("sleeping-1", sleeping.result::<u64>())
            .await
            .unwrap(),
        15
    );
    engine
        .send_event("waiting-1", "approved", &7u64)
        .await
        .unwrap();
    assert_eq!(
        within("waiting-1", waiting.result::<u64>()).await.unwrap(),
        17
    );
    assert_eq!(
        runs.bodies.load(Ordering::SeqCst),
        1,
        "only the sleeping instance's `finish` ran; every recorded step replayed from the store"
    );
    let compensated = runs.compensations.lock().unwrap().clone();
    assert!(
        compensated.is_empty(),
        "no compensation ran again: {compensated:?}"
    );
    let slept = kinds(&sleeping).await;
    assert!(slept.contains(&EventKind::SleepCompleted {
        name: "settle".into()
    }));
    engine.close().await;
    let _ = std::fs::remove_dir_all(&copy);
}
