use saga_runtime::prelude::*;

#[step(name = "quality-check", renamed_from = "QA check", read_only)]
async fn quality_check(article: u64) -> Result<bool, StepError> {
    Ok(article > 0)
}

#[step(name = "publish", renamed_from = "publish", read_only)]
async fn publish(article: u64) -> Result<bool, StepError> {
    Ok(article > 0)
}

fn main() {}
