use saga_runtime::prelude::*;

#[workflow(name = "reminder")]
async fn reminder(ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    let _ = ctx;
    tokio::time::sleep(std::time::Duration::from_secs(86_400)).await;
    Ok(user)
}

fn main() {}
