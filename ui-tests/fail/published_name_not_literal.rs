// A published name computed at run time: readers outside ask for a value
// by its name.
use saga_runtime::prelude::*;

#[workflow(name = "import")]
async fn import(ctx: WorkflowContext, rows: u32) -> Result<(), WorkflowError> {
    let name = format!("progress-{rows}");
    ctx.publish(&name, &0u32)?;
    Ok(())
}

fn main() {}
