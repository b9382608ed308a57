//! Steps that take a `StepContext`, with or without a key beside it.

#![deny(warnings)]

use saga_runtime::prelude::*;

#[step(name = "with-context")]
async fn with_context(step: StepContext, order: u64) -> Result<String, StepError> {
    Ok(format!(
        "{} {} {} #{} attempt {}: {order}",
        step.instance_id(),
        step.step_name(),
        step.key().as_str(),
        step.occurrence(),
        step.attempt()
    ))
}

#[step(name = "context-and-key", retries = 0)]
async fn context_and_key(
    step: StepContext,
    order: u64,
    key: IdempotencyKey,
) -> Result<String, StepError> {
    Ok(format!("{key} attempt {} for {order}", step.attempt()))
}

#[step(name = "context-read-only", read_only)]
async fn context_read_only(step: StepContext) -> Result<u32, StepError> {
    Ok(step.attempt())
}

#[workflow(name = "step-context")]
async fn step_context(ctx: WorkflowContext, order: u64) -> Result<String, WorkflowError> {
    let a = with_context(&ctx, order).await?;
    let b = context_and_key(&ctx, order).await?;
    let attempt = context_read_only(&ctx).await?;
    Ok(format!("{a} {b} {attempt}"))
}

fn main() {
    assert_eq!(step_context.name(), "step-context");
}
