use saga_runtime::prelude::*;

#[workflow(name = "report")]
async fn report(ctx: WorkflowContext, path: String) -> Result<usize, WorkflowError> {
    let _ = ctx;
    let text = std::fs::read_to_string(&path)?;
    Ok(text.len())
}

fn main() {}
