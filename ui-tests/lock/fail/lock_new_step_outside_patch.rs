// A step saga.lock does not know, called by a locked workflow outside any
// `ctx.patched` branch: an instance in flight would replay into it.
use saga_runtime::prelude::*;

#[step(name = "engrave")]
async fn engrave(key: IdempotencyKey, text: String) -> Result<String, StepError> {
    let _ = key.as_str();
    Ok(text)
}

#[workflow(name = "lock-engrave")]
async fn lock_engrave(ctx: WorkflowContext, text: String) -> Result<String, WorkflowError> {
    Ok(engrave(&ctx, text).await?)
}

fn main() {}
