use saga_runtime::prelude::*;

#[step(name = "notify", read_only)]
async fn log_sign_up(user: String) -> Result<(), StepError> {
    let _ = user;
    Ok(())
}

#[workflow(name = "notify")]
async fn notify(_ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    Ok(user)
}

#[workflow(name = "sign-up")]
async fn sign_up(ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    ctx.child("notify", notify, user.clone()).await?;
    log_sign_up(&ctx, user).await?;
    Ok(String::new())
}

fn main() {}
