//! The inline forms and the recorded values a workflow may use.

#![deny(warnings)]

use saga_runtime::prelude::*;

#[workflow(name = "inline-steps")]
async fn inline_steps(ctx: WorkflowContext, user: String) -> Result<String, WorkflowError> {
    let created: String = ctx
        .step("create-account", StepConfig::default().retries(3), {
            let user = user.clone();
            move |key| {
                let user = user.clone();
                async move { Ok(format!("{user}:{}", key.as_str())) }
            }
        })
        .await?;
    let attempt: u32 = ctx
        .step_with_context("audit", StepConfig::new(), |step| async move {
            let _ = step.key();
            Ok(step.attempt())
        })
        .await?;
    let checked: bool = ctx
        .step("check-nothing", StepConfig::default(), |_| async move { Ok(true) })
        .await?;
    let now = ctx.now().await;
    let dice = ctx.random().await % 6;
    ctx.sleep_until("wake-up", now).await?;
    ctx.sleep("short-nap", std::time::Duration::from_millis(10)).await?;
    Ok(format!("{created} {attempt} {checked} {dice}"))
}

fn main() {
    assert_eq!(inline_steps.name(), "inline-steps");
}
