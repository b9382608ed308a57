use saga_runtime::prelude::*;

#[step(name = "send-email")]
async fn send_email(key: IdempotencyKey, to: String) -> Result<(), StepError> {
    let _ = (key.as_str(), to);
    Ok(())
}

#[workflow(name = "welcome")]
async fn welcome(ctx: WorkflowContext, user: String) -> Result<(), WorkflowError> {
    send_email(&ctx, user.clone()).await?;
    ctx.sleep("wait-a-week", "7 days").await?;
    send_email(&ctx, user).await?;
    Ok(())
}

fn main() {}
