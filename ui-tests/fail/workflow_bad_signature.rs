use saga_runtime::prelude::*;

#[workflow(name = "checkout")]
async fn checkout(ctx: WorkflowContext, order: u64, coupon: String) -> Result<u64, WorkflowError> {
    let _ = (ctx, coupon);
    Ok(order)
}

fn main() {}
