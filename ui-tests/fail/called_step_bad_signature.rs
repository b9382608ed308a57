use saga_runtime::prelude::*;

#[step(name = "create-approval")]
async fn create_approval(key: &IdempotencyKey, article: &str) -> Result<u64, StepError> {
    let _ = key.as_str();
    Ok(article.len() as u64)
}

#[step(name = "publish")]
fn publish<T: Clone>(key: IdempotencyKey, article: T) -> u64 {
    let _ = (key.as_str(), article);
    1
}

#[workflow(name = "review")]
async fn review(ctx: WorkflowContext, article: u64) -> Result<u64, WorkflowError> {
    let approval = create_approval(&ctx, "x").await?;
    let published: u64 = publish(&ctx, article).await?;
    Ok(approval + published)
}

fn main() {}
