// A patch held in a variable guards a branch only while the variable
// holds it: once the name is bound again, its branch is not patched, and
// a step saga.lock does not know there is an error.
use saga_runtime::prelude::*;

#[step(name = "engrave")]
async fn engrave(key: IdempotencyKey, text: String) -> Result<String, StepError> {
    let _ = key.as_str();
    Ok(text)
}

#[workflow(name = "lock-engrave")]
async fn lock_engrave(ctx: WorkflowContext, text: String) -> Result<String, WorkflowError> {
    let engraved = ctx.patched("engrave");
    let engraved = !engraved;
    if engraved {
        return Ok(engrave(&ctx, text).await?);
    }
    Ok(text)
}

fn main() {}
