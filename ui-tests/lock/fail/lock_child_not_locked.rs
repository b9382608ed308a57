// A child call saga.lock does not list for the workflow.
use saga_runtime::prelude::*;

/// The child workflow the cases call.
#[workflow(name = "lock-courier")]
async fn lock_courier(_ctx: WorkflowContext, parcel: u64) -> Result<u64, WorkflowError> {
    Ok(parcel)
}

#[workflow(name = "lock-notify")]
async fn lock_notify(ctx: WorkflowContext, parcel: u64) -> Result<u64, WorkflowError> {
    Ok(ctx.child("notify-courier", lock_courier, parcel).await?)
}

fn main() {}
