// A workflow saga.lock does not list: one error, not one per name.
use saga_runtime::prelude::*;

#[workflow(name = "lock-unknown")]
async fn lock_unknown(ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    ctx.sleep("wait", "1 hour").await?;
    Ok(order)
}

fn main() {}
