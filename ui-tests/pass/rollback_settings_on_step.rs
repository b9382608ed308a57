//! `rollback(handler = .., retries = ..)` on a step overrides the handler's
//! own settings for that step; run against a real engine.

#![deny(warnings)]

use std::sync::atomic::{AtomicU32, Ordering};

use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;

static REFUND_ATTEMPTS: AtomicU32 = AtomicU32::new(0);

#[step(name = "charge-card", rollback(handler = refund, retries = 2, delay = "1 second"))]
async fn charge_card(key: IdempotencyKey, amount: u64) -> Result<u64, StepError> {
    let _ = key.as_str();
    Ok(amount)
}

#[rollback(retries = 7, delay = "1 hour")]
async fn refund(ctx: RollbackContext<'_, u64>, amount: u64) -> Result<(), StepError> {
    let _ = (ctx.key().as_str(), amount);
    REFUND_ATTEMPTS.fetch_add(1, Ordering::SeqCst);
    Err(StepError::retryable("the payment provider is down"))
}

#[workflow(name = "charge")]
async fn charge(ctx: WorkflowContext, amount: u64) -> Result<u64, WorkflowError> {
    charge_card(&ctx, amount).await?;
    Err(WorkflowError::new("the order was cancelled"))
}

#[tokio::main]
async fn main() {
    let engine = Engine::builder()
        .clock(TestClock::auto_advancing())
        .temporary()
        .expect("engine");
    let run = engine.start(charge, "order-1", 5).await.expect("start");
    match run.result().await {
        Err(saga_runtime::Error::WorkflowFailed { rollback_failure: Some(_), .. }) => {}
        other => panic!("expected a failed rollback, got {other:?}"),
    }
    // 1 attempt + the step's 2 retries, not the handler's own 7.
    assert_eq!(REFUND_ATTEMPTS.load(Ordering::SeqCst), 3);
}
