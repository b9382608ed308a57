use saga_runtime::prelude::*;

#[step(name = "charge-card", rollback(handler = refund, retries = 3))]
async fn charge_card(key: IdempotencyKey, amount: u64) -> Result<u64, StepError> {
    let _ = key.as_str();
    Ok(amount)
}

#[rollback]
async fn refund(ctx: RollbackContext<'_, u64>, amount: u64) -> Result<(), StepError> {
    let _ = (ctx.key().as_str(), amount);
    Ok(())
}

fn main() {}
