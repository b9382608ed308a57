//! A crate that matches its `saga.lock`: steps, a step renamed with
//! `renamed_from` (locked under its old name), an inline step, a sleep, an
//! event wait, and a helper called twice.

#![deny(warnings)]

use saga_runtime::prelude::*;

#[step(name = "reserve")]
async fn reserve(key: IdempotencyKey, sku: String) -> Result<u32, StepError> {
    let _ = key.as_str();
    Ok(u32::try_from(sku.len()).unwrap_or(0))
}

#[step(name = "quality-check", renamed_from = "qa-check", read_only)]
async fn quality_check(count: u32) -> Result<bool, StepError> {
    Ok(count > 0)
}

async fn log_progress(ctx: &WorkflowContext, what: &str) {
    let _ = (ctx, what);
}

#[workflow(name = "lock-shop")]
async fn lock_shop(ctx: WorkflowContext, sku: String) -> Result<bool, WorkflowError> {
    log_progress(&ctx, "start").await;
    let count = reserve(&ctx, sku).await?;
    let doubled = ctx
        .step("double", StepConfig::default(), move |_| async move { Ok(count * 2) })
        .await?;
    ctx.sleep("settle", "1 day").await?;
    let _shipped: bool = ctx.wait_for_event("wait-shipped", "shipped", "7 days").await?;
    log_progress(&ctx, "end").await;
    Ok(quality_check(&ctx, doubled).await?)
}

fn main() {
    assert_eq!(lock_shop.name(), "lock-shop");
}
