//! `?` in steps and workflows on the user's own error types, permanent
//! errors declared once, and typed workflow errors given back to the caller
//! and to rollback handlers.

use std::sync::Mutex;

use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;

#[derive(Debug)]
enum PaymentError {
    Declined,
    Unavailable,
}

impl std::fmt::Display for PaymentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PaymentError::Declined => f.write_str("card declined"),
            PaymentError::Unavailable => f.write_str("payments unavailable"),
        }
    }
}

impl std::error::Error for PaymentError {}

// Declared once: a declined card stays declined.
impl saga_runtime::Permanent for PaymentError {
    fn is_permanent(&self) -> bool {
        matches!(self, PaymentError::Declined)
    }
}

fn charge(card: &str) -> Result<u64, PaymentError> {
    match card {
        "declined" => Err(PaymentError::Declined),
        "flaky" => Err(PaymentError::Unavailable),
        _ => Ok(42),
    }
}

#[step(name = "charge", retries = 3, delay = "1 second")]
async fn charge_card(key: IdempotencyKey, card: String) -> Result<u64, PaymentError> {
    let _ = key.as_str();
    let charge = charge(&card)?;
    Ok(charge)
}

#[step(name = "parse", read_only, retries = 2, delay = "1 second")]
async fn parse_amount(text: String) -> Result<u64, std::num::ParseIntError> {
    let amount = text.trim().parse::<u64>()?;
    Ok(amount)
}

#[step(name = "say", read_only, retries = 1, delay = "1 second")]
async fn say(text: String) -> Result<String, String> {
    if text.is_empty() {
        return Err(format!("nothing to say ({} chars)", text.len()));
    }
    Ok(text)
}

#[step(name = "shout", read_only, retries = 1, delay = "1 second")]
async fn shout(text: String) -> Result<String, &'static str> {
    if text.is_empty() {
        return Err("nothing to shout");
    }
    Ok(text.to_uppercase())
}

#[workflow(name = "pay")]
async fn pay(ctx: WorkflowContext, card: String) -> Result<u64, WorkflowError> {
    Ok(charge_card(&ctx, card).await?)
}

#[workflow(name = "strings")]
async fn strings(ctx: WorkflowContext, text: String) -> Result<String, WorkflowError> {
    let amount = parse_amount(&ctx, text.clone()).await;
    let said = say(&ctx, text.clone()).await?;
    let shouted = shout(&ctx, said).await?;
    Ok(format!("{shouted} {}", amount.map_or(0, |n| n)))
}

fn engine() -> Engine {
    Engine::builder()
        .clock(TestClock::auto_advancing())
        .temporary()
        .unwrap()
}

fn step_failure(error: saga_runtime::Error) -> Failure {
    match error {
        saga_runtime::Error::WorkflowFailed { failure, .. } => *failure,
        other => panic!("expected a failed workflow, got {other}"),
    }
}

async fn attempts_of(run: &(impl AsRef<Instance> + ?Sized), step: &str) -> usize {
    let run: &Instance = run.as_ref();
    run.history()
        .await
        .unwrap()
        .iter()
        .filter(|e| {
            matches!(&e.kind, saga_runtime::inspect::EventKind::StepFailed { step: s, .. }
                | saga_runtime::inspect::EventKind::StepRetrying { step: s, .. } if s == step)
        })
        .count()
}

#[tokio::test]
async fn a_permanent_error_gives_up_at_once_and_others_are_retried() {
    let engine = engine();
    let declined = engine
        .start(pay, "p-declined", "declined".into())
        .await
        .unwrap();
    let failure = step_failure(declined.result().await.unwrap_err());
    assert_eq!(
        failure.kind(),
        &FailureKind::Step {
            step: "charge".into()
        }
    );
    assert!(failure.message().contains("card declined"), "{failure}");
    // One attempt: no retry after a permanent error.
    assert_eq!(attempts_of(declined.instance(), "charge").await, 1);

    let flaky = engine.start(pay, "p-flaky", "flaky".into()).await.unwrap();
    let failure = step_failure(flaky.result().await.unwrap_err());
    assert!(failure.message().contains("after 4 attempts"), "{failure}");

    let ok = engine.start(pay, "p-ok", "visa".into()).await.unwrap();
    assert_eq!(ok.result().await.unwrap(), 42);
}

#[tokio::test]
async fn std_errors_strings_and_strs_convert_with_question_mark() {
    let engine = engine();
    let run = engine.start(strings, "s-ok", "12".into()).await.unwrap();
    assert_eq!(run.result().await.unwrap(), "12 12");

    let run = engine.start(strings, "s-word", "hi".into()).await.unwrap();
    // The ParseIntError was retried (retries = 2), caught, and the rest ran.
    assert_eq!(run.result().await.unwrap(), "HI 0");
    assert_eq!(attempts_of(run.instance(), "parse").await, 3);

    let run = engine
        .start(strings, "s-empty", String::new())
        .await
        .unwrap();
    let failure = step_failure(run.result().await.unwrap_err());
    assert!(
        failure.message().contains("nothing to say (0 chars)"),
        "{failure}"
    );
    assert_eq!(attempts_of(run.instance(), "say").await, 2);
}

/// What the caller of an order workflow wants to tell apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum OrderError {
    OutOfStock { sku: String },
    Declined,
}

impl std::fmt::Display for OrderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OrderError::OutOfStock { sku } => write!(f, "{sku} is out of stock"),
            OrderError::Declined => f.write_str("the card was declined"),
        }
    }
}

/// (rollback key, typed cause) of each compensation that ran.
static CAUSES: Mutex<Vec<(String, Option<OrderError>)>> = Mutex::new(Vec::new());

#[step(name = "reserve", rollback = release)]
async fn reserve(key: IdempotencyKey, sku: String) -> Result<String, StepError> {
    Ok(format!("{sku}@{key}"))
}

#[rollback]
async fn release(ctx: RollbackContext<'_, String>, sku: String) -> Result<(), StepError> {
    let _ = sku;
    let cause = ctx.cause().downcast::<OrderError>();
    CAUSES.lock().unwrap().push((ctx.key().to_string(), cause));
    Ok(())
}

#[workflow(name = "order")]
async fn order(ctx: WorkflowContext, sku: String) -> Result<String, OrderError> {
    let reservation = reserve(&ctx, sku.clone())
        .await
        .map_err(|_| OrderError::Declined)?;
    if sku == "gone" {
        return Err(OrderError::OutOfStock { sku });
    }
    Ok(reservation)
}

#[tokio::test]
async fn a_typed_workflow_error_reaches_the_caller_and_the_rollback_handler() {
    let engine = engine();
    let run = engine.start(order, "o-1", "gone".into()).await.unwrap();
    let failure = step_failure(run.result().await.unwrap_err());
    let expected = OrderError::OutOfStock { sku: "gone".into() };
    assert_eq!(failure.downcast::<OrderError>(), Some(expected.clone()));
    assert_eq!(failure.to_string(), "gone is out of stock");
    assert_eq!(failure.kind(), &FailureKind::Workflow);
    let causes = CAUSES.lock().unwrap().clone();
    let causes: Vec<_> = causes
        .iter()
        .filter(|(key, _)| key.starts_with("o-1:"))
        .collect();
    assert_eq!(
        causes,
        [&("o-1:rollback:reserve".to_owned(), Some(expected.clone()))]
    );

    // Read again from the journal (a new handle, the state folded anew).
    let again = engine.instance("o-1").await.unwrap();
    let failure = step_failure(again.result::<String>().await.unwrap_err());
    assert_eq!(failure.downcast::<OrderError>(), Some(expected));
    // Another type does not decode.
    assert_eq!(failure.downcast::<u64>(), None);
}

#[tokio::test]
async fn a_typed_error_survives_a_reopen() {
    let dir = std::env::temp_dir().join(format!("saga-errors-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    {
        let engine = Engine::open(&dir).unwrap();
        let run = engine.start(order, "o-2", "gone".into()).await.unwrap();
        assert!(run.result().await.is_err());
        engine.close().await;
    }
    let engine = Engine::open(&dir).unwrap();
    let run = engine.instance("o-2").await.unwrap();
    let failure = step_failure(run.result::<String>().await.unwrap_err());
    assert_eq!(
        failure.downcast::<OrderError>(),
        Some(OrderError::OutOfStock { sku: "gone".into() })
    );
    engine.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[derive(Debug, Serialize, Deserialize)]
struct Huge(String);

impl std::fmt::Display for Huge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a {}-byte error", self.0.len())
    }
}

#[workflow(name = "huge-error")]
async fn huge_error(ctx: WorkflowContext, size: usize) -> Result<(), Huge> {
    let _ = ctx;
    Err(Huge("x".repeat(size)))
}

#[tokio::test]
async fn a_typed_error_over_the_payload_limit_keeps_its_message_only() {
    let engine = Engine::builder()
        .clock(TestClock::auto_advancing())
        .max_payload_bytes(1024)
        .temporary()
        .unwrap();
    let run = engine.start(huge_error, "big-1", 4096).await.unwrap();
    let failure = step_failure(run.result().await.unwrap_err());
    assert_eq!(failure.to_string(), "a 4096-byte error");
    assert!(failure.downcast::<Huge>().is_none());
    let run = engine.start(huge_error, "small-1", 10).await.unwrap();
    let failure = step_failure(run.result().await.unwrap_err());
    assert_eq!(failure.downcast::<Huge>().map(|h| h.0.len()), Some(10));
}

#[step(name = "pay-later", renamed_from = "pay-by-invoice", read_only)]
async fn pay_later() -> Result<u64, StepError> {
    Err(StepError::fatal("invoices are off today"))
}

/// Catches the failure of one step, matched by the step function itself.
#[workflow(name = "pay-or-give-up")]
async fn pay_or_give_up(ctx: WorkflowContext, (): ()) -> Result<String, WorkflowError> {
    match pay_later(&ctx).await {
        Ok(_) => Ok("paid".into()),
        Err(failed) if failed.is::<pay_later>() && !failed.is::<charge_card>() => {
            Ok(format!("gave up on {}: {}", failed.step(), failed.error()))
        }
        Err(failed) => Err(failed.into()),
    }
}

#[tokio::test]
async fn a_step_failure_is_matched_by_its_step_function() {
    let engine = engine();
    let run = engine.start(pay_or_give_up, "give-up-1", ()).await.unwrap();
    let answer: String = run.result().await.unwrap();
    assert_eq!(answer, "gave up on pay-later: invoices are off today");
}
