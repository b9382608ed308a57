use saga_runtime::prelude::*;
use std::thread;

#[workflow(name = "reminder")]
async fn reminder(ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    let _ = ctx;
    thread::sleep(std::time::Duration::from_secs(1));
    Ok(user)
}

fn main() {}
