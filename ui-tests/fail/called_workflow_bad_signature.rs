use saga_runtime::prelude::*;

#[workflow(name = "review")]
async fn review(ctx: WorkflowContext, article: u64, extra: u32) -> Result<u64, WorkflowError> {
    let _ = (ctx, extra);
    Ok(article)
}

fn main() {
    assert_eq!(review.name(), "review");
}
