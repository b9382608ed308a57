// saga.lock lists the patch `fraud-check` of `lock-retired`; the code
// dropped its `if ctx.patched(..)`.
use saga_runtime::prelude::*;

#[workflow(name = "lock-retired")]
async fn lock_retired(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

fn main() {}
