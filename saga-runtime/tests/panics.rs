//! The panic sweep: a panic in each place user code runs is a failed
//! attempt, an `Errored` end with compensations, a rollback failure, or a
//! `Blocked` instance, as documented; never a dead driver, and the engine
//! runs other instances on.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use saga_runtime::{BoxFuture, Error, Instance};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use helpers::{until_status, within};

/// Serializes as its number, or panics when told to.
#[derive(Clone, Debug, Deserialize, PartialEq)]
struct Boom {
    n: u64,
    explode: bool,
}

impl Serialize for Boom {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        assert!(!self.explode, "boom in Serialize");
        #[derive(Serialize)]
        struct Plain {
            n: u64,
            explode: bool,
        }
        Plain {
            n: self.n,
            explode: false,
        }
        .serialize(s)
    }
}

/// Clones fine, unless its `explode` is set.
#[derive(Debug, Deserialize, Serialize)]
struct BadClone {
    explode: bool,
}

impl Clone for BadClone {
    fn clone(&self) -> Self {
        assert!(!self.explode, "boom in Clone");
        BadClone {
            explode: self.explode,
        }
    }
}

/// Whether `Fragile`'s `Deserialize` panics on the value 13 (the replay
/// test's; other tests' values never panic, so they may run alongside).
static FRAGILE: AtomicBool = AtomicBool::new(false);

#[derive(Debug, Serialize)]
struct Fragile(u64);

impl<'de> Deserialize<'de> for Fragile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u64::deserialize(d)?;
        assert!(
            !(n == 13 && FRAGILE.load(Ordering::SeqCst)),
            "boom in Deserialize"
        );
        Ok(Fragile(n))
    }
}

/// A service whose use panics.
struct Flaky;

impl Flaky {
    fn call(&self) -> u64 {
        panic!("boom in the service")
    }
}

#[derive(Default)]
struct Refunds(AtomicU32);

#[step(name = "charge", rollback = refund)]
async fn charge(key: IdempotencyKey, amount: u64) -> Result<u64, StepError> {
    let _ = key;
    Ok(amount)
}

#[rollback]
async fn refund(ctx: RollbackContext<'_, u64>, refunds: Service<Refunds>) -> Result<(), StepError> {
    let _ = ctx;
    refunds.0.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[rollback]
async fn refund_panics(ctx: RollbackContext<'_, u64>) -> Result<(), StepError> {
    let _ = ctx;
    panic!("boom in the rollback handler")
}

#[step(name = "charge", rollback = refund_panics)]
async fn charge_badly(key: IdempotencyKey, amount: u64) -> Result<u64, StepError> {
    let _ = key;
    Ok(amount)
}

#[step(name = "explode", retries = 0, read_only)]
async fn explode() -> Result<u64, StepError> {
    panic!("boom in the step body")
}

#[step(name = "use-service", retries = 0, read_only)]
async fn use_service(flaky: Service<Flaky>) -> Result<u64, StepError> {
    Ok(flaky.call())
}

#[step(name = "boom-output", retries = 0, read_only)]
async fn boom_output() -> Result<Boom, StepError> {
    Ok(Boom {
        n: 1,
        explode: true,
    })
}

#[step(name = "take-bad-clone", retries = 0, read_only)]
async fn take_bad_clone(input: BadClone) -> Result<bool, StepError> {
    Ok(input.explode)
}

#[step(name = "fragile", read_only)]
async fn fragile() -> Result<Fragile, StepError> {
    Ok(Fragile(7))
}

/// Charges (with a refund), then does what `what` says panics.
#[workflow(name = "panics")]
async fn panics(ctx: WorkflowContext, what: String) -> Result<u64, WorkflowError> {
    charge(&ctx, 5).await?;
    match what.as_str() {
        "step" => Ok(explode(&ctx).await?),
        "service" => Ok(use_service(&ctx).await?),
        "step-output" => Ok(boom_output(&ctx).await?.n),
        "clone" => Ok(u64::from(
            take_bad_clone(&ctx, BadClone { explode: true }).await?,
        )),
        "after-await" => panic!("boom after the first await"),
        _ => Ok(0),
    }
}

#[workflow(name = "rollback-panics")]
async fn rollback_panics(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    charge_badly(&ctx, 5).await?;
    Err(WorkflowError::new("out of stock"))
}

#[workflow(name = "boom-result")]
async fn boom_result(ctx: WorkflowContext, (): ()) -> Result<Boom, WorkflowError> {
    charge(&ctx, 5).await?;
    Ok(Boom {
        n: 1,
        explode: true,
    })
}

#[workflow(name = "boom-input")]
async fn boom_input(_ctx: WorkflowContext, input: Boom) -> Result<u64, WorkflowError> {
    Ok(input.n)
}

#[workflow(name = "fragile")]
async fn fragile_then_wait(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    let value = fragile(&ctx).await?;
    let more: u64 = ctx.wait_for_event("more", "more", "1 day").await?;
    Ok(value.0 + more)
}

#[step(name = "fragile-13", read_only)]
async fn fragile_13() -> Result<Fragile, StepError> {
    Ok(Fragile(13))
}

#[workflow(name = "fragile-replay")]
async fn fragile_replay(ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    let value = fragile_13(&ctx).await?;
    let more: u64 = ctx.wait_for_event("more", "more", "1 day").await?;
    Ok(value.0 + more)
}

#[workflow(name = "fine")]
async fn fine(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    Ok(charge(&ctx, n).await?)
}

struct World {
    engine: Engine,
    refunds: Arc<Refunds>,
}

fn world() -> World {
    world_on(TestClock::auto_advancing())
}

fn world_on(clock: TestClock) -> World {
    let refunds = Arc::new(Refunds::default());
    let engine = Engine::builder()
        .clock(clock)
        .provide_arc(refunds.clone())
        .provide(Flaky)
        .temporary()
        .unwrap();
    World { engine, refunds }
}

/// The engine still runs a new instance: nothing died with the panic.
async fn engine_goes_on(engine: &Engine, id: &str) {
    let run = engine.start(fine, &format!("{id}-after"), 3).await.unwrap();
    assert_eq!(within("another instance", run.result()).await.unwrap(), 3);
}

/// The workflow failed with `message` in its failure, and was compensated.
async fn errored_and_compensated(instance: &(impl AsRef<Instance> + ?Sized), message: &str) {
    let instance: &Instance = instance.as_ref();
    let ended = within("the end", instance.result::<u64>()).await;
    match ended {
        Err(Error::WorkflowFailed {
            failure,
            rollback_failure: None,
            ..
        }) => assert!(failure.to_string().contains(message), "{failure}"),
        other => panic!(
            "{}: expected a failure with {message:?}, got {other:?}",
            instance.id()
        ),
    }
    assert_eq!(instance.status().await.unwrap(), Status::Errored);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_user_code_of_a_step_fails_it_and_compensates() {
    let w = world();
    let cases = [
        ("step", "boom in the step body"),
        ("service", "boom in the service"),
        ("step-output", "boom in Serialize"),
        ("clone", "boom in Clone"),
        ("after-await", "boom after the first await"),
    ];
    for (what, message) in cases {
        let id = format!("p-{what}");
        // Read before the start: the instance may compensate before
        // `start` returns.
        let refunds = w.refunds.0.load(Ordering::SeqCst);
        let run = w.engine.start(panics, &id, what.to_owned()).await.unwrap();
        errored_and_compensated(run.instance(), message).await;
        assert_eq!(
            w.refunds.0.load(Ordering::SeqCst),
            refunds + 1,
            "{what}: refunded"
        );
        engine_goes_on(&w.engine, &id).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_step_closure_before_its_future_is_a_failed_attempt() {
    let w = world();
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = attempts.clone();
    let wf = workflow_fn("closure-panics", move |ctx: WorkflowContext, (): ()| {
        let seen = seen.clone();
        async move {
            let n: u64 = ctx
                .step(
                    "flaky",
                    StepConfig::default()
                        .retries(3)
                        .delay(Duration::from_millis(1)),
                    move |_key| {
                        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                            panic!("boom before the future");
                        }
                        async { Ok(4u64) }
                    },
                )
                .await?;
            Ok::<_, WorkflowError>(n)
        }
    });
    let run = w.engine.start(wf, "closure-1", ()).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 4);
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        2,
        "the panic was one failed attempt"
    );
    engine_goes_on(&w.engine, "closure-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_rollback_handler_is_a_rollback_failure() {
    let w = world();
    let run = w.engine.start(rollback_panics, "rb-1", ()).await.unwrap();
    match within("the end", run.result()).await {
        Err(Error::WorkflowFailed {
            failure,
            rollback_failure: Some(rollback),
            ..
        }) => {
            assert!(failure.message().contains("out of stock"), "{failure}");
            assert!(
                rollback
                    .to_string()
                    .contains("boom in the rollback handler"),
                "{rollback}"
            );
        }
        other => panic!("expected a rollback failure, got {other:?}"),
    }

    // A hand-written handler that panics before it returns its future.
    let wf = workflow_fn("rb-closure", |ctx: WorkflowContext, (): ()| async move {
        let refund = RollbackRegistration::new(
            StepConfig::default().retries(0),
            |_input: RollbackInput<u64>| -> BoxFuture<Result<(), StepError>> {
                panic!("boom before the rollback future")
            },
        );
        ctx.step_with_rollback(
            "charge",
            StepConfig::default(),
            |_| async { Ok(5u64) },
            refund,
        )
        .await?;
        Err::<(), _>(WorkflowError::new("out of stock"))
    });
    let run = w.engine.start(wf, "rb-2", ()).await.unwrap();
    match within("the end", run.result()).await {
        Err(Error::WorkflowFailed {
            rollback_failure: Some(rollback),
            ..
        }) => assert!(
            rollback
                .to_string()
                .contains("boom before the rollback future"),
            "{rollback}"
        ),
        other => panic!("expected a rollback failure, got {other:?}"),
    }
    engine_goes_on(&w.engine, "rb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_payloads_serialize_is_an_error_not_a_dead_engine() {
    let w = world();
    // The workflow's output: the instance ends Errored, compensated.
    let run = w.engine.start(boom_result, "out-1", ()).await.unwrap();
    let refunds = w.refunds.0.load(Ordering::SeqCst);
    let ended = within("the end", run.result()).await;
    assert!(
        matches!(&ended, Err(Error::WorkflowFailed { failure, .. }) if failure.to_string().contains("boom in Serialize")),
        "{ended:?}"
    );
    assert_eq!(w.refunds.0.load(Ordering::SeqCst), refunds + 1);

    // A workflow input: refused, nothing stored.
    let started = w
        .engine
        .start(
            boom_input,
            "in-1",
            Boom {
                n: 1,
                explode: true,
            },
        )
        .await;
    assert!(matches!(started, Err(Error::Encode { .. })), "{started:?}");
    assert!(matches!(
        w.engine.instance("in-1").await,
        Err(Error::UnknownInstance { .. })
    ));

    // An event payload: refused, nothing delivered. (The wait's clock
    // stands still.)
    let w = world_on(TestClock::new());
    let waiting = w.engine.start(fragile_then_wait, "ev-1", ()).await.unwrap();
    let sent = w
        .engine
        .send_event(
            "ev-1",
            "more",
            &Boom {
                n: 1,
                explode: true,
            },
        )
        .await;
    assert!(matches!(sent, Err(Error::Encode { .. })), "{sent:?}");
    w.engine.send_event("ev-1", "more", &1u64).await.unwrap();
    assert_eq!(within("the result", waiting.result()).await.unwrap(), 8);
    engine_goes_on(&w.engine, "serialize").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_stored_values_deserialize_on_replay_blocks_the_instance() {
    let dir = std::env::temp_dir().join(format!("saga-panics-replay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let open = || {
        Engine::builder()
            .clock(TestClock::new())
            .open(&dir)
            .unwrap()
    };
    let engine = open();
    let run = engine.start(fragile_replay, "replay-1", ()).await.unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    engine.close().await;

    // The next process replays the stored output of "fragile-13", whose
    // Deserialize now panics.
    FRAGILE.store(true, Ordering::SeqCst);
    let engine = open();
    engine.register(fragile_replay).unwrap();
    engine.send_event("replay-1", "more", &1u64).await.unwrap();
    let run = engine.instance("replay-1").await.unwrap();
    match within("the block", run.result::<u64>()).await {
        Err(Error::Blocked { failure, .. }) => {
            assert_eq!(
                failure.kind(),
                &saga_runtime::FailureKind::Decode,
                "{failure}"
            );
            assert!(failure.message().contains("fragile-13"), "{failure}");
            assert!(failure.message().contains("panicked"), "{failure}");
        }
        other => panic!("expected Blocked(Decode), got {other:?}"),
    }
    FRAGILE.store(false, Ordering::SeqCst);
    drop(run);
    engine.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
