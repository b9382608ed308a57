use saga_runtime::prelude::*;

#[step(name = "send-email")]
async fn send_email(key: IdempotencyKey, to: String) -> Result<(), StepError> {
    let _ = (key.as_str(), to);
    Ok(())
}

#[workflow(name = "welcome")]
async fn welcome(ctx: WorkflowContext, user: String) -> Result<(), WorkflowError> {
    if user.is_empty() {
        send_email(&ctx, "admin".to_owned()).await?;
    }
    send_email(&ctx, user).await?;
    Ok(())
}

fn main() {}
