// saga.lock lists the step `gift-wrap` but not as called by `lock-added`.
use saga_runtime::prelude::*;

#[step(name = "gift-wrap")]
async fn gift_wrap(key: IdempotencyKey, order: u64) -> Result<u64, StepError> {
    let _ = key.as_str();
    Ok(order)
}

#[workflow(name = "lock-added")]
async fn lock_added(ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(gift_wrap(&ctx, order).await?)
}

fn main() {}
