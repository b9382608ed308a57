// saga.lock lists `call lock-dropped ship` and the step `ship`; the
// workflow no longer calls it.
use saga_runtime::prelude::*;

#[workflow(name = "lock-dropped")]
async fn lock_dropped(ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    let _ = ctx;
    Ok(order)
}

fn main() {}
