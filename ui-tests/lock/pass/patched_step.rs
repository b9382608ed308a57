//! New calls behind patches in a locked workflow: a step saga.lock does
//! not know, called in `if ctx.patched(..)`, and a sleep it does not know
//! in the `else` of `if !ctx.patched(..)`, and one more behind a patch
//! held in a variable. The lock lists the first patch (as an update
//! writes it) but not the others, nor the new calls.

#![deny(warnings)]

use saga_runtime::prelude::*;

#[step(name = "reserve")]
async fn reserve(key: IdempotencyKey, sku: String) -> Result<u32, StepError> {
    let _ = key.as_str();
    Ok(u32::try_from(sku.len()).unwrap_or(0))
}

#[step(name = "fraud-check", read_only)]
async fn fraud_check(count: u32) -> Result<bool, StepError> {
    Ok(count < 100)
}

#[workflow(name = "lock-patched")]
async fn lock_patched(ctx: WorkflowContext, sku: String) -> Result<u32, WorkflowError> {
    let count = reserve(&ctx, sku).await?;
    if ctx.patched("fraud-check") {
        if !fraud_check(&ctx, count).await? {
            return Err(WorkflowError::new("suspicious"));
        }
    }
    if !ctx.patched("no-settle") {
        // Old instances keep the code they recorded: nothing new here.
    } else {
        ctx.sleep("settle-later", "1 hour").await?;
    }
    // A patch held in a variable guards the branch it decides.
    let noted = ctx.patched("gift-note");
    if noted {
        ctx.sleep("write-note", "1 minute").await?;
    }
    Ok(count)
}

fn main() {
    assert_eq!(lock_patched.name(), "lock-patched");
}
