use saga_runtime::prelude::*;
use std::time::SystemTime;

#[workflow(name = "invoice")]
async fn invoice(ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    let _ = ctx;
    let issued = SystemTime::now();
    let _ = issued;
    Ok(order)
}

fn main() {}
