//! Replay safety: non-determinism and changed output types are reported as
//! such, naming the step, and nothing completed runs again.
//!
//! Each test runs a first release of a workflow until a step completed,
//! closes the engine with the instance unfinished (as a crash would leave
//! it), and opens the store again with a second release registered under
//! the same workflow name.

#[path = "support/helpers.rs"]
mod helpers;

use std::future::pending;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use saga_runtime::prelude::*;
use saga_runtime::{Error, FailureKind};

use helpers::{wait_until, within};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("saga-replay-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// What the steps share with the test, provided to both engines.
#[derive(Default)]
struct Probe {
    /// Runs of the bodies of `reserve`, `one`, `two` and `three`.
    reserve_runs: AtomicU32,
    runs: [AtomicU32; 3],
    /// While set, the body of step `three` never returns: the first
    /// release is stopped with it in flight.
    hang_three: AtomicBool,
}

/// Runs `first` on a fresh store until `ready` says so, closes the engine
/// (as a crash would leave it: the instance unfinished), then reopens the
/// store with `second` registered and returns the instance's result.
async fn run_then_replay<W1: Workflow<Input = ()>, W2: Workflow<Input = ()>>(
    dir: &Path,
    probe: &Arc<Probe>,
    first: W1,
    ready: impl Fn(&[saga_runtime::inspect::Event]) -> bool,
    second: W2,
) -> (
    Result<W2::Output, Error>,
    saga_runtime::inspect::InstanceInfo,
) {
    let engine = Engine::builder()
        .provide_arc(probe.clone())
        .open(dir)
        .unwrap();
    let run = engine.start(first, "replay-1", ()).await.unwrap();
    wait_until("the first run to reach its point", || async {
        ready(&run.history().await.unwrap())
    })
    .await;
    drop(run);
    engine.close().await;
    // The hang belonged to the first process.
    probe.hang_three.store(false, Ordering::SeqCst);

    let engine = Engine::builder()
        .provide_arc(probe.clone())
        .open(dir)
        .unwrap();
    engine.register(second).unwrap();
    let instance = engine.instance("replay-1").await.unwrap();
    let result = within("the replay", instance.result::<W2::Output>()).await;
    let info = instance.info().await.unwrap();
    engine.close().await;
    (result, info)
}

fn completed(step: &'static str) -> impl Fn(&[saga_runtime::inspect::Event]) -> bool {
    move |history| {
        history
            .iter()
            .any(|e| matches!(&e.kind, saga_runtime::inspect::EventKind::StepCompleted { step: s, .. } if s == step))
    }
}

#[step(name = "reserve", read_only)]
async fn reserve(probe: Service<Probe>) -> Result<u32, StepError> {
    probe.reserve_runs.fetch_add(1, Ordering::SeqCst);
    Ok(1)
}

#[step(name = "charge", read_only)]
async fn charge() -> Result<u32, StepError> {
    Ok(2)
}

/// `charge` renamed without `renamed_from`: history says otherwise.
#[step(name = "charge-card", read_only)]
async fn charge_card() -> Result<u32, StepError> {
    Ok(2)
}

#[workflow(name = "order")]
async fn order_v1(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    reserve(&ctx).await?;
    charge(&ctx).await?;
    pending::<()>().await;
    Ok(())
}

#[workflow(name = "order")]
async fn order_v2(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    reserve(&ctx).await?;
    charge_card(&ctx).await?;
    Ok(())
}

#[tokio::test]
async fn a_replay_that_reaches_another_step_is_a_non_determinism_error() {
    let dir = temp_dir("nondeterminism");
    let probe = Arc::new(Probe::default());
    let (result, info) =
        run_then_replay(&dir, &probe, order_v1, completed("charge"), order_v2).await;
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
        probe.reserve_runs.load(Ordering::SeqCst),
        1,
        "the completed step ran again"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[step(name = "price", read_only)]
async fn price_v1() -> Result<Vec<u8>, StepError> {
    Ok(vec![1, 2, 3])
}

/// The output type changed from `Vec<u8>` to `(String, u64, u64)`.
#[step(name = "price", read_only)]
async fn price_v2() -> Result<(String, u64, u64), StepError> {
    Ok(("x".to_string(), 1, 2))
}

#[workflow(name = "quote")]
async fn quote_v1(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    price_v1(&ctx).await?;
    pending::<()>().await;
    Ok(())
}

#[workflow(name = "quote")]
async fn quote_v2(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    let price = price_v2(&ctx).await?;
    Ok(price.1)
}

#[tokio::test]
async fn a_stored_output_that_no_longer_decodes_names_the_step_and_type() {
    let dir = temp_dir("decode");
    let probe = Arc::new(Probe::default());
    let (result, _) = run_then_replay(&dir, &probe, quote_v1, completed("price"), quote_v2).await;
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

#[workflow(name = "greet")]
async fn greet_v1(ctx: WorkflowContext, times: u64) -> Result<u64, WorkflowError> {
    price_v1(&ctx).await?;
    pending::<()>().await;
    Ok(times)
}

/// The input type changed from `u64` to `String`.
#[workflow(name = "greet")]
async fn greet_v2(_ctx: WorkflowContext, name: String) -> Result<u64, WorkflowError> {
    Ok(name.len() as u64)
}

#[tokio::test]
async fn a_stored_input_that_no_longer_decodes_parks_the_instance() {
    let dir = temp_dir("input");
    let engine = Engine::open(&dir).unwrap();
    let run = engine.start(greet_v1, "greet-1", 7).await.unwrap();
    wait_until("the first run to complete its step", || async {
        completed("price")(&run.history().await.unwrap())
    })
    .await;
    drop(run);
    engine.close().await;

    let engine = Engine::open(&dir).unwrap();
    engine.register(greet_v2).unwrap();
    let instance = engine.instance("greet-1").await.unwrap();
    match within("the replay", instance.result::<u64>()).await {
        Err(Error::Blocked { failure, .. }) => {
            assert_eq!(failure.kind(), &FailureKind::Decode, "{failure}");
            assert!(failure.message().contains("String"), "{failure}");
        }
        other => panic!("expected the instance parked, got {other:?}"),
    }
    assert_eq!(
        instance.info().await.unwrap().status,
        Status::Blocked,
        "parked, not failed: nothing was compensated"
    );
    engine.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[step(name = "one", read_only)]
async fn one(probe: Service<Probe>) -> Result<u64, StepError> {
    probe.runs[0].fetch_add(1, Ordering::SeqCst);
    Ok(1)
}

#[step(name = "two", read_only)]
async fn two(probe: Service<Probe>) -> Result<u64, StepError> {
    probe.runs[1].fetch_add(1, Ordering::SeqCst);
    Ok(10)
}

#[step(name = "three", read_only)]
async fn three(probe: Service<Probe>) -> Result<u64, StepError> {
    probe.runs[2].fetch_add(1, Ordering::SeqCst);
    if probe.hang_three.load(Ordering::SeqCst) {
        pending::<()>().await;
    }
    Ok(100)
}

#[workflow(name = "three")]
async fn one_two_three(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    let mut total = one(&ctx).await?;
    total += two(&ctx).await?;
    total += three(&ctx).await?;
    Ok(total)
}

#[tokio::test]
async fn replay_returns_stored_outputs_and_runs_only_what_did_not_complete() {
    let dir = temp_dir("resume");
    let probe = Arc::new(Probe::default());
    probe.hang_three.store(true, Ordering::SeqCst);
    let (result, _) =
        run_then_replay(&dir, &probe, one_two_three, completed("two"), one_two_three).await;
    assert_eq!(result.unwrap(), 111);
    let counts: Vec<u32> = probe
        .runs
        .iter()
        .map(|c| c.load(Ordering::SeqCst))
        .collect();
    assert_eq!(counts[..2], [1, 1], "completed steps ran again: {counts:?}");
    assert!(counts[2] >= 1);
    let _ = std::fs::remove_dir_all(&dir);
}
