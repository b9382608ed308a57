// A workflow whose updates saga.lock records as `update` lines.
use saga_runtime::prelude::*;

#[workflow(name = "lock-approvals", updates = ["approve"])]
async fn lock_approvals(ctx: WorkflowContext, total: u64) -> Result<u64, WorkflowError> {
    let approved = ctx.take_update::<u64>("approve", "7 days").await?;
    let total = total - approved.request;
    approved.reply(&total).await?;
    Ok(total)
}

fn main() {}
