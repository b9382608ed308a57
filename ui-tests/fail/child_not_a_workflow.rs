use saga_runtime::prelude::*;

async fn notify(user: String) -> String {
    user
}

#[workflow(name = "sign-up")]
async fn sign_up(ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    ctx.child("notify", notify, user).await?;
    Ok(String::new())
}

fn main() {}
