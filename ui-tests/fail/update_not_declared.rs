// A workflow takes an update it does not declare, and declares one it
// never takes.
use saga_runtime::prelude::*;

#[workflow(name = "order", updates = ["cancel"])]
async fn order(ctx: WorkflowContext, id: u64) -> Result<u64, WorkflowError> {
    let approved = ctx.take_update::<u64>("approve", "7 days").await?;
    approved.reply(&id).await?;
    Ok(approved.request)
}

fn main() {}
