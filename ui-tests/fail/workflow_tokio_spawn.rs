use saga_runtime::prelude::*;

#[workflow(name = "fan-out")]
async fn fan_out(ctx: WorkflowContext, count: u64) -> Result<u64, WorkflowError> {
    let _ = ctx;
    let task = tokio::spawn(async move { count * 2 });
    let doubled = task.await.map_err(WorkflowError::new)?;
    Ok(doubled)
}

fn main() {}
