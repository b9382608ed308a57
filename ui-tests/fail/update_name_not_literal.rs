// An update name computed at run time: callers send updates by their name,
// and the workflow declares the names it takes.
use saga_runtime::prelude::*;

#[workflow(name = "order", updates = ["approve"])]
async fn order(ctx: WorkflowContext, id: u64) -> Result<u64, WorkflowError> {
    let name = format!("approve-{id}");
    let approved = ctx.take_update::<u64>(&name, "7 days").await?;
    approved.reply(&id).await?;
    Ok(approved.request)
}

fn main() {}
