//! A step renamed in a later release keeps its old name for replay.

#![deny(warnings)]

use saga_runtime::prelude::*;

#[step(name = "quality-check", renamed_from = "qa-check", read_only)]
async fn quality_check(article: u64) -> Result<bool, StepError> {
    Ok(article > 0)
}

#[workflow(name = "publish")]
async fn publish(ctx: WorkflowContext, article: u64) -> Result<bool, WorkflowError> {
    Ok(quality_check(&ctx, article).await?)
}

fn main() {
    assert_eq!(publish.name(), "publish");
}
