// A patch name computed at run time: a patch is found again by its name.
use saga_runtime::prelude::*;

#[workflow(name = "order")]
async fn order(ctx: WorkflowContext, region: String) -> Result<(), WorkflowError> {
    let patch: &'static str = if region == "eu" { "fraud-check-eu" } else { "fraud-check" };
    if ctx.patched(patch) {
        ctx.sleep("cool-down", "1 hour").await?;
    }
    Ok(())
}

fn main() {}
