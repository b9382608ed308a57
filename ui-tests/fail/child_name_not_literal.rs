use saga_runtime::prelude::*;

#[workflow(name = "notify")]
async fn notify(_ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    Ok(user)
}

#[workflow(name = "sign-up")]
async fn sign_up(ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    let call = "notify-user";
    ctx.child(call, notify, user).await?;
    Ok(String::new())
}

fn main() {}
