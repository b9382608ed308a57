use saga_runtime::prelude::*;

#[step(name = "create-approval", retry = 3)]
async fn create_approval(key: IdempotencyKey, article: u64) -> Result<u64, StepError> {
    let _ = key.as_str();
    Ok(article)
}

#[workflow(name = "review")]
async fn review(ctx: WorkflowContext, article: u64) -> Result<u64, WorkflowError> {
    Ok(create_approval(&ctx, article).await?)
}

fn main() {}
