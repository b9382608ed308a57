use saga_runtime::prelude::*;

#[workflow(name = "checkout")]
async fn checkout(ctx: WorkflowContext, order: u64) -> u64 {
    let _ = ctx;
    order
}

fn main() {}
