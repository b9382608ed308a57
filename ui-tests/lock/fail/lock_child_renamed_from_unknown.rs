// `.renamed_from(..)` names a child call saga.lock never had for the workflow.
use saga_runtime::prelude::*;

/// The child workflow the cases call.
#[workflow(name = "lock-courier")]
async fn lock_courier(_ctx: WorkflowContext, parcel: u64) -> Result<u64, WorkflowError> {
    Ok(parcel)
}

#[workflow(name = "lock-dispatch")]
async fn lock_dispatch(ctx: WorkflowContext, parcel: u64) -> Result<u64, WorkflowError> {
    let shipped = ctx
        .child("ship-parcel", lock_courier, parcel)
        .renamed_from("post-parcel")
        .await?;
    Ok(shipped)
}

fn main() {}
