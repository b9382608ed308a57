//! A child call renamed with `.renamed_from(..)`: saga.lock lists it under
//! its old name `pass-on`, which satisfies the new name `hand-over`.

#![deny(warnings)]

use saga_runtime::prelude::*;

/// The child workflow the cases call.
#[workflow(name = "lock-courier")]
async fn lock_courier(_ctx: WorkflowContext, parcel: u64) -> Result<u64, WorkflowError> {
    Ok(parcel)
}

#[workflow(name = "lock-relay")]
async fn lock_relay(ctx: WorkflowContext, parcel: u64) -> Result<u64, WorkflowError> {
    let handed = ctx
        .child("hand-over", lock_courier, parcel)
        .no_rollback()
        .renamed_from("pass-on")
        .await?;
    Ok(handed)
}

fn main() {
    assert_eq!(lock_relay.children().len(), 1);
    assert_eq!(lock_relay.children()[0].workflow, "lock-courier");
}
