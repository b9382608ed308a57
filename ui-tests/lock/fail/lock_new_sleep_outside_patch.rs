// A sleep saga.lock does not know, in a locked workflow, outside any
// `ctx.patched` branch (the patched branch holds another, which is fine).
use saga_runtime::prelude::*;

#[workflow(name = "lock-engrave")]
async fn lock_engrave(ctx: WorkflowContext, text: String) -> Result<String, WorkflowError> {
    if ctx.patched("cool-down") {
        ctx.sleep("cool-down", "1 hour").await?;
    }
    ctx.sleep("dry-ink", "1 hour").await?;
    Ok(text)
}

fn main() {}
