//! A rollback handler that needs none of its step's inputs takes only its
//! context (and, if it likes, services).

#![deny(warnings)]

use saga_runtime::prelude::*;

#[derive(Clone, Serialize, Deserialize)]
struct Order {
    id: String,
    cents: u64,
}

#[step(name = "reserve", rollback = release)]
async fn reserve(key: IdempotencyKey, order: Order, quantity: u32) -> Result<String, StepError> {
    Ok(format!("{}:{}:{quantity}:{key}", order.id, order.cents))
}

#[rollback]
async fn release(ctx: RollbackContext<'_, String>) -> Result<(), StepError> {
    let _reservation: Option<&String> = ctx.output();
    let _ = ctx.key().as_str();
    Ok(())
}

#[step(name = "note", rollback = forget)]
async fn note(key: IdempotencyKey) -> Result<u64, StepError> {
    let _ = key.as_str();
    Ok(1)
}

#[rollback(retries = 2)]
async fn forget(ctx: RollbackContext<'_, u64>) -> Result<(), StepError> {
    let _ = ctx.key().as_str();
    Ok(())
}

#[workflow(name = "reserve-order")]
async fn reserve_order(ctx: WorkflowContext, order: Order) -> Result<String, WorkflowError> {
    note(&ctx).await?;
    Ok(reserve(&ctx, order, 2).await?)
}

fn main() {
    fn is_workflow<W: Workflow>(_: W) {}
    is_workflow(reserve_order);
}
