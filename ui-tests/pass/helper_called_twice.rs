//! An ordinary helper that takes `&WorkflowContext` may be called at any
//! number of call sites: the call-site rule is for `#[step]` functions only.

#![deny(warnings)]

use saga_runtime::prelude::*;

#[step(name = "send-email")]
async fn send_email(key: IdempotencyKey, to: String, text: String) -> Result<(), StepError> {
    let _ = (key.as_str(), to, text);
    Ok(())
}

/// Not a step: it calls a step in a loop (one call site) and the sleep
/// inside it is named once.
async fn remind(ctx: &WorkflowContext, user: String) -> Result<(), WorkflowError> {
    send_email(ctx, user, "reminder".to_owned()).await?;
    Ok(())
}

/// Its parameters in another order: still a helper.
async fn log_progress(step: u32, ctx: &WorkflowContext) {
    let _ = (step, ctx);
}

#[workflow(name = "onboarding")]
async fn onboarding(ctx: WorkflowContext, user: String) -> Result<(), WorkflowError> {
    remind(&ctx, user.clone()).await?;
    log_progress(1, &ctx).await;
    remind(&ctx, user).await?;
    log_progress(2, &ctx).await;
    Ok(())
}

fn main() {
    assert_eq!(onboarding.name(), "onboarding");
}
