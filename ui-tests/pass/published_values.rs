// A workflow publishes values under literal names; a step may share a
// published name, since a publish is not a call site.
use saga_runtime::prelude::*;

#[derive(Clone, Serialize, Deserialize)]
struct Progress {
    done: u32,
    total: u32,
}

#[step(name = "progress", read_only)]
async fn import_row(row: u32) -> Result<u32, StepError> {
    Ok(row)
}

#[workflow(name = "import")]
async fn import(ctx: WorkflowContext, total: u32) -> Result<(), WorkflowError> {
    for row in 0..total {
        import_row(&ctx, row).await?;
        ctx.publish("progress", &Progress { done: row + 1, total })?;
    }
    ctx.publish("stage", "done")?;
    Ok(())
}

fn main() {}
