//! Typed step failures: a `#[step]` whose error type is `Serialize +
//! Deserialize` hands the workflow its error back typed,
//! `failed.downcast::<BankError>()`, whether the failure happens in this
//! run or is replayed from history after a restart; `failed.is::<step>()`
//! matches the failure to its step by the step function, a renamed one
//! too. An error type that is not `Serialize` keeps its message only. The
//! workflows are written with `#[workflow]` and `#[step]`, as users write
//! them.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use saga_runtime::{Codec, CodecError, Engine, Error, FailureKind, Sealed};

use helpers::{Reopenable, fresh, until_status, within};

/// The bank's own error type: stored with the failure, as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum BankError {
    Declined { reason: String },
    Unavailable,
}

impl std::fmt::Display for BankError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BankError::Declined { reason } => write!(f, "card declined: {reason}"),
            BankError::Unavailable => f.write_str("the bank is unavailable"),
        }
    }
}

impl std::error::Error for BankError {}

// A declined card stays declined; an outage passes.
impl Permanent for BankError {
    fn is_permanent(&self) -> bool {
        matches!(self, BankError::Declined { .. })
    }
}

/// Declines amounts over 1,000.
#[step(name = "charge-card")]
async fn charge_card(key: IdempotencyKey, cents: u64) -> Result<u64, BankError> {
    let _ = key.as_str();
    match cents {
        0..=1000 => Ok(cents),
        _ => Err(BankError::Declined {
            reason: format!("{cents} is over the limit"),
        }),
    }
}

/// How the workflow answered a failed charge.
fn answer(failed: &StepFailed) -> String {
    match failed.downcast::<BankError>() {
        Some(BankError::Declined { reason }) => format!("declined: {reason}"),
        Some(BankError::Unavailable) => "unavailable".to_owned(),
        None => format!("untyped: {}", failed.error()),
    }
}

/// Charges, and answers a declined card itself.
#[workflow(name = "checkout")]
async fn checkout(ctx: WorkflowContext, cents: u64) -> Result<String, WorkflowError> {
    match charge_card(&ctx, cents).await {
        Ok(charged) => Ok(format!("charged {charged}")),
        Err(failed) if failed.is::<charge_card>() => Ok(answer(&failed)),
        Err(failed) => Err(failed.into()),
    }
}

/// Charges, then waits to be told to go on before it looks at the failure:
/// after a restart in the wait, the failure it matches is the replayed one.
#[workflow(name = "checkout-later")]
async fn checkout_later(ctx: WorkflowContext, cents: u64) -> Result<String, WorkflowError> {
    let charged = charge_card(&ctx, cents).await;
    let _: bool = ctx.wait_for_event("wait-go-on", "go-on", "30 days").await?;
    match charged {
        Ok(charged) => Ok(format!("charged {charged}")),
        Err(failed) if failed.is::<charge_card>() => Ok(answer(&failed)),
        Err(failed) => Err(failed.into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_failure_is_matched_by_its_step_and_its_typed_error() {
    let engine = fresh(Engine::builder()).await;
    engine.register(checkout).unwrap();
    let declined = engine.start(checkout, "checkout-1", 5000).await.unwrap();
    assert_eq!(
        within("the checkout", declined.result()).await.unwrap(),
        "declined: 5000 is over the limit"
    );
    let charged = engine.start(checkout, "checkout-2", 700).await.unwrap();
    assert_eq!(
        within("the checkout", charged.result()).await.unwrap(),
        "charged 700"
    );
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_failure_keeps_its_typed_error() {
    let store = Reopenable::new("typedfailures").await;
    let engine = store.open(Engine::builder).await;
    engine.register(checkout_later).unwrap();
    let run = engine.start(checkout_later, "later-1", 5000).await.unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    engine.close().await;

    // A new process: the failure comes from history, not from memory.
    let engine = store.open(Engine::builder).await;
    engine.register(checkout_later).unwrap();
    engine.send_event("later-1", "go-on", &true).await.unwrap();
    let run = engine.instance("later-1").await.unwrap();
    assert_eq!(
        within("the checkout", run.result::<String>())
            .await
            .unwrap(),
        "declined: 5000 is over the limit"
    );
    drop(run);
    engine.close().await;
}

/// The step of `checkout-later` renamed in a later release.
#[step(name = "charge-payment", renamed_from = "charge-card")]
async fn charge_payment(key: IdempotencyKey, cents: u64) -> Result<u64, BankError> {
    charge_card_body(key, cents).await
}

async fn charge_card_body(key: IdempotencyKey, cents: u64) -> Result<u64, BankError> {
    let _ = key.as_str();
    Err(BankError::Declined {
        reason: format!("{cents} is not charged by the renamed step"),
    })
}

/// `checkout-later` with its step renamed: the match names the new step.
#[workflow(name = "checkout-later")]
async fn checkout_later_renamed(ctx: WorkflowContext, cents: u64) -> Result<String, WorkflowError> {
    let charged = charge_payment(&ctx, cents).await;
    let _: bool = ctx.wait_for_event("wait-go-on", "go-on", "30 days").await?;
    match charged {
        Ok(charged) => Ok(format!("charged {charged}")),
        Err(failed) if failed.is::<charge_payment>() => Ok(answer(&failed)),
        Err(failed) => Err(failed.into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_step_still_matches_the_failure_recorded_under_its_old_name() {
    let store = Reopenable::new("typedrenamed").await;
    let engine = store.open(Engine::builder).await;
    engine.register(checkout_later).unwrap();
    let run = engine
        .start(checkout_later, "renamed-1", 5000)
        .await
        .unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    engine.close().await;

    let engine = store.open(Engine::builder).await;
    engine.register(checkout_later_renamed).unwrap();
    engine
        .send_event("renamed-1", "go-on", &true)
        .await
        .unwrap();
    let run = engine.instance("renamed-1").await.unwrap();
    // The failure recorded under "charge-card" answers to the renamed
    // step, with the error the old code returned.
    assert_eq!(
        within("the checkout", run.result::<String>())
            .await
            .unwrap(),
        "declined: 5000 is over the limit"
    );
    drop(run);
    engine.close().await;
}

/// An error type that is not `Serialize`.
#[derive(Debug)]
struct Offline;

impl std::fmt::Display for Offline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the terminal is offline")
    }
}

impl std::error::Error for Offline {}

impl Permanent for Offline {}

#[step(name = "print-receipt")]
async fn print_receipt(key: IdempotencyKey) -> Result<(), Offline> {
    let _ = key.as_str();
    Err(Offline)
}

#[workflow(name = "receipt")]
async fn receipt(ctx: WorkflowContext, (): ()) -> Result<String, WorkflowError> {
    match print_receipt(&ctx).await {
        Ok(()) => Ok("printed".to_owned()),
        Err(failed) if failed.is::<print_receipt>() => {
            assert!(!failed.is::<charge_card>());
            Ok(answer(&failed))
        }
        Err(failed) => Err(failed.into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_type_that_is_not_serialize_keeps_its_message_only() {
    let engine = fresh(Engine::builder()).await;
    engine.register(receipt).unwrap();
    let run = engine.start(receipt, "receipt-1", ()).await.unwrap();
    assert_eq!(
        within("the receipt", run.result()).await.unwrap(),
        "untyped: the terminal is offline"
    );
    engine.close().await;
}

/// Down twice, then declined: the failure keeps the last attempt's error.
#[step(name = "charge-flaky", retries = 2, delay = "1 second")]
async fn charge_flaky(key: IdempotencyKey, attempts: Service<AtomicU32>) -> Result<u64, BankError> {
    let _ = key.as_str();
    match attempts.fetch_add(1, Ordering::SeqCst) {
        0 | 1 => Err(BankError::Unavailable),
        _ => Err(BankError::Declined {
            reason: "third time".to_owned(),
        }),
    }
}

#[workflow(name = "flaky-checkout")]
async fn flaky_checkout(ctx: WorkflowContext, (): ()) -> Result<(String, u32), WorkflowError> {
    match charge_flaky(&ctx).await {
        Ok(charged) => Ok((format!("charged {charged}"), 1)),
        Err(failed) => Ok((answer(&failed), failed.attempts())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attempt_that_gives_up_is_the_typed_error() {
    let attempts = Arc::new(AtomicU32::new(0));
    let builder = Engine::builder()
        .clock(TestClock::auto_advancing())
        .provide_arc(attempts.clone());
    let engine = fresh(builder).await;
    engine.register(flaky_checkout).unwrap();
    let run = engine.start(flaky_checkout, "flaky-1", ()).await.unwrap();
    assert_eq!(
        within("the checkout", run.result()).await.unwrap(),
        ("declined: third time".to_owned(), 3)
    );
    engine.close().await;
}

/// Propagates the failure with `?`.
#[workflow(name = "strict-checkout")]
async fn strict_checkout(ctx: WorkflowContext, cents: u64) -> Result<u64, WorkflowError> {
    Ok(charge_card(&ctx, cents).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_propagated_step_failure_reaches_the_caller_typed() {
    let engine = fresh(Engine::builder()).await;
    engine.register(strict_checkout).unwrap();
    let run = engine
        .start(strict_checkout, "strict-1", 2000)
        .await
        .unwrap();
    let error = within("the checkout", run.result()).await.unwrap_err();
    let Error::WorkflowFailed { failure, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(
        failure.kind(),
        &FailureKind::Step {
            step: "charge-card".to_owned()
        }
    );
    assert_eq!(
        failure.downcast::<BankError>(),
        Some(BankError::Declined {
            reason: "2000 is over the limit".to_owned()
        })
    );
    // A person inspecting it reads the error as stored, without the type.
    let inspection = run.inspect().await.unwrap();
    assert_eq!(
        inspection.error_value,
        Some(saga_runtime::inspect::PayloadView::Json {
            value: serde_json::json!({"Declined": {"reason": "2000 is over the limit"}}),
            bytes: 48,
        })
    );
    // A failure with no typed error has none to show.
    engine.register(untyped_checkout).unwrap();
    let untyped = engine
        .start(untyped_checkout, "untyped-1", ())
        .await
        .unwrap();
    assert!(
        within("the untyped checkout", untyped.result())
            .await
            .is_err()
    );
    let inspection = untyped.inspect().await.unwrap();
    assert!(inspection.failure.is_some());
    assert_eq!(inspection.error_value, None);
    engine.close().await;
}

#[workflow(name = "untyped-checkout")]
async fn untyped_checkout(_ctx: WorkflowContext, (): ()) -> Result<u64, WorkflowError> {
    Err(WorkflowError::new("no card on file"))
}

/// Reverses the bytes of each value, and keeps what it was given. It
/// seals the bank's errors with a key of their own, "bank", and every other
/// value with "main"; it opens the values of the keys in `holds`.
#[derive(Clone)]
struct Reverse {
    sealed: Arc<Mutex<Vec<Vec<u8>>>>,
    holds: &'static [&'static str],
}

impl Codec for Reverse {
    fn encode(&self, plain: &[u8]) -> Result<Sealed, CodecError> {
        self.sealed.lock().unwrap().push(plain.to_vec());
        let key = match String::from_utf8_lossy(plain).contains("Declined") {
            true => "bank",
            false => "main",
        };
        Ok(Sealed {
            key: key.into(),
            bytes: plain.iter().rev().copied().collect(),
        })
    }

    fn decode(&self, sealed: &Sealed) -> Result<Vec<u8>, CodecError> {
        match self.holds.contains(&sealed.key.as_str()) {
            true => Ok(sealed.bytes.iter().rev().copied().collect()),
            false => Err(CodecError::MissingKey {
                key: sealed.key.clone(),
            }),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typed_error_is_sealed_like_a_step_output() {
    let sealed = Arc::new(Mutex::new(Vec::new()));
    let codec = |holds| Reverse {
        sealed: sealed.clone(),
        holds,
    };
    let store = Reopenable::new("typedsealed").await;
    let with = |holds: &'static [&'static str]| {
        let codec = codec(holds);
        move || Engine::builder().codec(codec.clone())
    };
    let engine = store.open(with(&["main", "bank"])).await;
    engine.register(checkout_later).unwrap();
    let run = engine
        .start(checkout_later, "sealed-1", 5000)
        .await
        .unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    engine.close().await;
    assert!(
        sealed
            .lock()
            .unwrap()
            .iter()
            .any(|plain| String::from_utf8_lossy(plain).contains("5000 is over the limit")),
        "the codec never sealed the typed error"
    );

    // Without the error's key the replay cannot give the workflow what the
    // first run gave it: the instance is parked, naming the key. (It is
    // replayed when its event wakes it; the event is kept for later.)
    let engine = store.open(with(&["main"])).await;
    engine.register(checkout_later).unwrap();
    let run = engine.instance("sealed-1").await.unwrap();
    engine.send_event("sealed-1", "go-on", &true).await.unwrap();
    until_status(&run, Status::Blocked).await;
    let blocked = within("the block", run.result::<String>()).await;
    match &blocked {
        Err(Error::Blocked { failure, .. }) => {
            assert!(failure.message().contains("\"bank\""), "{failure}");
        }
        other => panic!("{other:?}"),
    }
    drop(run);
    engine.close().await;

    // With it, the parked instance resumes, takes the event it was sent
    // while parked, and the error reads back.
    let engine = store.open(with(&["main", "bank"])).await;
    engine.register(checkout_later).unwrap();
    let run = engine.instance("sealed-1").await.unwrap();
    helpers::wait_until("sealed-1 resumed", || async {
        run.status().await.unwrap() != Status::Blocked
    })
    .await;
    assert_eq!(
        within("the checkout", run.result::<String>())
            .await
            .unwrap(),
        "declined: 5000 is over the limit"
    );
    drop(run);
    engine.close().await;
}
