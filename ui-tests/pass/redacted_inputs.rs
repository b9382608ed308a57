use saga_runtime::prelude::*;

#[step(name = "charge-card", redact = ["card"], rollback = refund)]
async fn charge(key: IdempotencyKey, card: String, cents: u64) -> Result<String, StepError> {
    Ok(format!("{key}: {cents} from {}", card.len()))
}

#[rollback]
async fn refund(ctx: RollbackContext<'_, String>, card: String, _cents: u64) -> Result<(), StepError> {
    let _ = (ctx.key(), card);
    Ok(())
}

#[workflow(name = "pay")]
async fn pay(ctx: WorkflowContext, card: String) -> Result<String, WorkflowError> {
    Ok(charge(&ctx, card, 100).await?)
}

fn main() {
    let _ = pay;
}
