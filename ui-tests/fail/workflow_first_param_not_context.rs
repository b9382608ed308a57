use saga_runtime::prelude::*;

#[workflow(name = "checkout")]
async fn checkout(order: u64, ctx: WorkflowContext) -> Result<u64, WorkflowError> {
    let _ = ctx;
    Ok(order)
}

fn main() {}
