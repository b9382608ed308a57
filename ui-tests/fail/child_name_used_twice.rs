use saga_runtime::prelude::*;

#[workflow(name = "notify")]
async fn notify(_ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    Ok(user)
}

#[workflow(name = "sign-up")]
async fn sign_up(ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    ctx.child("notify", notify, user.clone()).await?;
    ctx.sleep("wait", "1 day").await?;
    ctx.child("notify", notify, user.clone()).await?;
    ctx.child("wait", notify, user).await?;
    Ok(String::new())
}

fn main() {}
