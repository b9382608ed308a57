use saga_runtime::prelude::*;

#[workflow]
async fn nightly_import(ctx: WorkflowContext, day: u32) -> Result<u32, WorkflowError> {
    let _ = ctx;
    Ok(day)
}

fn main() {}
