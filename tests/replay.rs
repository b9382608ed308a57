//! Replay safety: non-determinism and changed output types are reported as
//! such, naming the step, and nothing completed runs again.

use std::future::pending;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use saga_runtime::prelude::*;
use saga_runtime::{Error, FailureKind};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("saga-replay-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs `first` on a fresh store until `ready` says so, closes the engine
/// (as a crash would leave it: the instance unfinished), then reopens the
/// store with `second` registered and returns the instance's result.
async fn run_then_replay<W1: Workflow<Input = ()>, W2: Workflow<Input = ()>>(
    dir: &Path,
    first: W1,
    ready: impl Fn(&[saga_runtime::Event]) -> bool,
    second: W2,
) -> (Result<W2::Output, Error>, saga_runtime::InstanceInfo) {
    let engine = Engine::open(dir).unwrap();
    let run = engine.start(first, "replay-1", ()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), async {
        while !ready(&run.history().await.unwrap()) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("first run reached its point");
    drop(run);
    engine.close().await;

    let engine = Engine::open(dir).unwrap();
    engine.register(second).unwrap();
    let instance = engine.instance("replay-1").await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(30), instance.result::<W2::Output>())
        .await
        .expect("replay finished");
    let info = instance.info().await.unwrap();
    engine.close().await;
    (result, info)
}

fn completed(step: &'static str) -> impl Fn(&[saga_runtime::Event]) -> bool {
    move |history| {
        history
            .iter()
            .any(|e| matches!(&e.kind, saga_runtime::EventKind::StepCompleted { step: s, .. } if s == step))
    }
}

#[tokio::test]
async fn a_replay_that_reaches_another_step_is_a_non_determinism_error() {
    let dir = temp_dir("nondeterminism");
    let a_runs = Arc::new(AtomicU32::new(0));
    let runs = a_runs.clone();
    let v1 = workflow_fn("order", move |ctx: WorkflowContext, (): ()| {
        let runs = runs.clone();
        async move {
            ctx.step("reserve", StepConfig::default(), move |_| {
                runs.fetch_add(1, Ordering::SeqCst);
                async { Ok(1u32) }
            })
            .await?;
            ctx.step("charge", StepConfig::default(), |_| async { Ok(2u32) })
                .await?;
            pending::<()>().await;
            Ok::<_, WorkflowError>(())
        }
    });
    let runs = a_runs.clone();
    let v2 = workflow_fn("order", move |ctx: WorkflowContext, (): ()| {
        let runs = runs.clone();
        async move {
            ctx.step("reserve", StepConfig::default(), move |_| {
                runs.fetch_add(1, Ordering::SeqCst);
                async { Ok(1u32) }
            })
            .await?;
            // Renamed from "charge": history says otherwise.
            ctx.step("charge-card", StepConfig::default(), |_| async { Ok(2u32) })
                .await?;
            Ok::<_, WorkflowError>(())
        }
    });
    let (result, info) = run_then_replay(&dir, v1, completed("charge"), v2).await;
    match result {
        Err(Error::Blocked { failure, .. }) => {
            assert_eq!(
                failure.kind(),
                &FailureKind::NonDeterminism {
                    expected: "step \"charge\"".into(),
                    found: "step \"charge-card\"".into()
                },
                "{failure}"
            );
            assert!(failure.message().contains("non-determinism"), "{failure}");
        }
        other => panic!("expected a non-determinism failure, got {other:?}"),
    }
    assert_eq!(info.status, Status::Blocked, "parked, not ended");
    assert_eq!(
        a_runs.load(Ordering::SeqCst),
        1,
        "the completed step ran again"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_stored_output_that_no_longer_decodes_names_the_step_and_type() {
    let dir = temp_dir("decode");
    let v1 = workflow_fn("quote", |ctx: WorkflowContext, (): ()| async move {
        ctx.step("price", StepConfig::default(), |_| async {
            Ok(vec![1u8, 2, 3])
        })
        .await?;
        pending::<()>().await;
        Ok::<_, WorkflowError>(())
    });
    let v2 = workflow_fn("quote", |ctx: WorkflowContext, (): ()| async move {
        // The output type changed from Vec<u8> to (String, u64, u64).
        let price: (String, u64, u64) = ctx
            .step("price", StepConfig::default(), |_| async {
                Ok(("x".to_string(), 1, 2))
            })
            .await?;
        Ok::<_, WorkflowError>(price.1)
    });
    let (result, _) = run_then_replay(&dir, v1, completed("price"), v2).await;
    match result {
        Err(Error::Blocked { failure, .. }) => {
            assert_eq!(failure.kind(), &FailureKind::Decode, "{failure}");
            assert!(failure.message().contains("\"price\""), "{failure}");
            assert!(failure.message().contains("String"), "{failure}");
        }
        other => panic!("expected a decode failure, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn replay_returns_stored_outputs_and_runs_only_what_did_not_complete() {
    let dir = temp_dir("resume");
    let runs: Arc<[AtomicU32; 3]> = Arc::default();
    let make = |block_last: bool| {
        let runs = runs.clone();
        workflow_fn("three", move |ctx: WorkflowContext, (): ()| {
            let runs = runs.clone();
            async move {
                let mut total = 0u64;
                for (i, name) in ["one", "two", "three"].into_iter().enumerate() {
                    let runs = runs.clone();
                    total += ctx
                        .step(name, StepConfig::default(), move |_| {
                            runs[i].fetch_add(1, Ordering::SeqCst);
                            async move {
                                if i == 2 && block_last {
                                    pending::<()>().await;
                                }
                                Ok(10u64.pow(i as u32))
                            }
                        })
                        .await?;
                }
                Ok::<_, WorkflowError>(total)
            }
        })
    };
    let (result, _) = run_then_replay(&dir, make(true), completed("two"), make(false)).await;
    assert_eq!(result.unwrap(), 111);
    let counts: Vec<u32> = runs.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    assert_eq!(counts[..2], [1, 1], "completed steps ran again: {counts:?}");
    assert!(counts[2] >= 1);
    let _ = std::fs::remove_dir_all(&dir);
}
