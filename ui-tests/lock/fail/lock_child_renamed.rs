// saga.lock lists the child call `send-parcel` of `lock-dispatch`; the code
// renamed it without `.renamed_from(..)`.
use saga_runtime::prelude::*;

/// The child workflow the cases call.
#[workflow(name = "lock-courier")]
async fn lock_courier(_ctx: WorkflowContext, parcel: u64) -> Result<u64, WorkflowError> {
    Ok(parcel)
}

#[workflow(name = "lock-dispatch")]
async fn lock_dispatch(ctx: WorkflowContext, parcel: u64) -> Result<u64, WorkflowError> {
    Ok(ctx.child("ship-parcel", lock_courier, parcel).await?)
}

fn main() {}
