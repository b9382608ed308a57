use saga_runtime::prelude::*;

#[workflow(name = "approval")]
async fn approval(ctx: WorkflowContext, order: u64) -> Result<bool, WorkflowError> {
    let approved: bool = ctx
        .wait_for_event(format!("approve-{order}"), "approval", "7 days")
        .await?;
    Ok(approved)
}

fn main() {}
