use saga_runtime::prelude::*;

#[workflow(name = "invoice")]
async fn invoice(ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    let started = std::time::Instant::now();
    ctx.sleep("cool-down", "1 minute").await?;
    let _ = started.elapsed();
    Ok(order)
}

fn main() {}
