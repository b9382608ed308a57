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

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use saga_runtime::prelude::*;
use saga_runtime::{Error, EventKind, FailureKind, ListFilter, TestClock};

/// How many times a step body or a compensation ran in this process.
static BODIES: AtomicU32 = AtomicU32::new(0);
static COMPENSATIONS: AtomicU32 = AtomicU32::new(0);

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
enum Shape {
    Complete,
    Errored,
    Sleep,
    Event,
}

fn fixture() -> impl Workflow<Input = Shape, Output = u64> + Copy {
    workflow_fn("fixture", |ctx: WorkflowContext, shape: Shape| async move {
        let undo =
            RollbackRegistration::new(StepConfig::default(), |_input: RollbackInput<u64>| {
                COMPENSATIONS.fetch_add(1, Ordering::SeqCst);
                Box::pin(async { Ok(()) }) as saga_runtime::BoxFuture<Result<(), StepError>>
            });
        let reserved = ctx
            .step_with_rollback(
                "reserve",
                StepConfig::default(),
                |_key| async {
                    BODIES.fetch_add(1, Ordering::SeqCst);
                    Ok(10u64)
                },
                undo,
            )
            .await?;
        match shape {
            Shape::Complete => {}
            Shape::Errored => {
                ctx.step("charge", StepConfig::default().retries(0), |_key| async {
                    BODIES.fetch_add(1, Ordering::SeqCst);
                    Err::<u64, _>(StepError::fatal("card declined"))
                })
                .await?;
            }
            Shape::Sleep => ctx.sleep("settle", "7 days").await?,
            Shape::Event => {
                let approved: u64 = ctx
                    .wait_for_event("approval", "approved", "30 days")
                    .await?;
                return Ok(reserved + approved);
            }
        }
        let finished = ctx
            .step("finish", StepConfig::default(), |_key| async {
                BODIES.fetch_add(1, Ordering::SeqCst);
                Ok(5u64)
            })
            .await?;
        Ok::<_, WorkflowError>(reserved + finished)
    })
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/store-v1")
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

async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), future)
        .await
        .expect("finished within 30 s")
}

/// Writes the fixture: run by hand, see the module docs.
async fn write_fixture(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    let engine = Engine::builder()
        .clock(TestClock::new())
        .open(dir)
        .expect("open the fixture dir");
    let complete = engine
        .start(fixture(), "complete-1", Shape::Complete)
        .await
        .unwrap();
    assert_eq!(within(complete.result()).await.unwrap(), 15);
    let errored = engine
        .start(fixture(), "errored-1", Shape::Errored)
        .await
        .unwrap();
    within(errored.result()).await.expect_err("errored");
    for (id, shape) in [("sleeping-1", Shape::Sleep), ("waiting-1", Shape::Event)] {
        let run = engine.start(fixture(), id, shape).await.unwrap();
        within(async {
            while run.status().await.unwrap() != Status::Waiting {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
    }
    engine.close().await;
    println!("wrote the fixture to {}", dir.display());
}

fn kinds(events: &[saga_runtime::Event]) -> Vec<EventKind> {
    events.iter().map(|e| e.kind.clone()).collect()
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
    let engine = Engine::builder()
        .clock(clock.clone())
        .register(fixture())
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
        kinds(&complete.history().await.unwrap()),
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
    let history = kinds(&errored.history().await.unwrap());
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
    within(clock.wait_for_sleepers(1)).await;
    clock.advance(Duration::from_secs(7 * 24 * 60 * 60));
    assert_eq!(within(sleeping.result::<u64>()).await.unwrap(), 15);
    engine
        .send_event("waiting-1", "approved", &7u64)
        .await
        .unwrap();
    assert_eq!(within(waiting.result::<u64>()).await.unwrap(), 17);
    assert_eq!(
        BODIES.load(Ordering::SeqCst),
        1,
        "only the sleeping instance's `finish` ran; every recorded step replayed from the store"
    );
    assert_eq!(
        COMPENSATIONS.load(Ordering::SeqCst),
        0,
        "no compensation ran again"
    );
    let slept = kinds(&sleeping.history().await.unwrap());
    assert!(slept.contains(&EventKind::SleepCompleted {
        name: "settle".into()
    }));
    engine.close().await;
    let _ = std::fs::remove_dir_all(&copy);
}
