use saga_runtime::prelude::*;

#[step(name = "create-approval")]
async fn create_approval(key: IdempotencyKey, article: u64) -> Result<u64, StepError> {
    Ok(article)
}

#[workflow(name = "review")]
async fn review(ctx: WorkflowContext, article: u64) -> Result<u64, WorkflowError> {
    Ok(create_approval(&ctx, article).await?)
}

fn main() {}
