use saga_runtime::prelude::*;

#[workflow(name = "notify")]
async fn notify(_ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    Ok(user)
}

#[workflow(name = "sign-up")]
async fn sign_up(ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    let old = "notify";
    ctx.child("welcome", notify, user.clone()).renamed_from("Welcome Mail").await?;
    ctx.child("remind", notify, user.clone()).no_rollback().renamed_from(old).await?;
    ctx.child("thank", notify, user.clone()).renamed_from("thank").await?;
    ctx.sleep("settle", "1 day").await?;
    ctx.child("follow-up", notify, user).renamed_from("settle").await?;
    Ok(String::new())
}

fn main() {}
