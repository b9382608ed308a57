use saga_runtime::prelude::*;

#[step(name = "create-approval")]
async fn create_approval(_key: IdempotencyKey, article: u64) -> Result<u64, StepError> {
    Ok(article)
}

fn main() {}
