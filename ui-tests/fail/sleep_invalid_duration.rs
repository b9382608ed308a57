use saga_runtime::prelude::*;

#[workflow(name = "reminder")]
async fn reminder(ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    ctx.sleep("wait-a-while", "1 fortnight").await?;
    Ok(user)
}

fn main() {}
