use saga_runtime::prelude::*;

#[workflow(name = "trip", rollback = "parallel")]
async fn trip(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let _ = ctx;
    Ok(n)
}

fn main() {}
