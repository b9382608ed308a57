use saga_runtime::prelude::*;

#[workflow(name = "nightly-import-1706659200")]
async fn nightly_import(ctx: WorkflowContext, day: u32) -> Result<u32, WorkflowError> {
    let _ = ctx;
    Ok(day)
}

fn main() {}
