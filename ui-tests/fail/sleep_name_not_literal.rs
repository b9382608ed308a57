use saga_runtime::prelude::*;

#[workflow(name = "reminder")]
async fn reminder(ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    let name = "wait-a-day";
    ctx.sleep(name, "1 day").await?;
    Ok(user)
}

fn main() {}
