use saga_runtime::prelude::*;

#[step(name = "create-approval")]
async fn create_approval(step: StepContext, article: u64) -> Result<u64, StepError> {
    Ok(article + u64::from(step.attempt()))
}

fn main() {}
