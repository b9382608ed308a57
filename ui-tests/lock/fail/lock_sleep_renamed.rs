// saga.lock lists the sleep `nap` of `lock-naps`; the code renamed it.
use saga_runtime::prelude::*;

#[workflow(name = "lock-naps")]
async fn lock_naps(ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    ctx.sleep("siesta", "1 hour").await?;
    Ok(order)
}

fn main() {}
