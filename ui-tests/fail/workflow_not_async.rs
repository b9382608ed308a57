use saga_runtime::prelude::*;

#[workflow(name = "checkout")]
fn checkout(ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    let _ = ctx;
    Ok(order)
}

fn main() {}
