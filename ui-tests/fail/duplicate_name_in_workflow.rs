use saga_runtime::prelude::*;

#[workflow(name = "reminder")]
async fn reminder(ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    ctx.sleep("wait", "1 day").await?;
    let _answer: bool = ctx.wait_for_event("wait", "answer", "7 days").await?;
    Ok(user)
}

fn main() {}
