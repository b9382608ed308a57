use saga_runtime::prelude::*;

#[workflow(name = "approval")]
async fn approval(ctx: WorkflowContext, article: u64) -> Result<u64, WorkflowError> {
    let id: u64 = ctx
        .step("create-approval", StepConfig::default(), move |_key| async move {
            Ok(article)
        })
        .await?;
    Ok(id)
}

fn main() {}
