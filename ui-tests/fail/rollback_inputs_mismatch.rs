use saga_runtime::prelude::*;

#[step(name = "charge-card", rollback = refund)]
async fn charge_card(key: IdempotencyKey, card: String, amount: u64) -> Result<u64, StepError> {
    let _ = (key.as_str(), card);
    Ok(amount)
}

// The handler takes the step's inputs: `card: String, amount: u64`.
#[rollback]
async fn refund(ctx: RollbackContext<'_, u64>, amount: u64) -> Result<(), StepError> {
    let _ = (ctx.key().as_str(), amount);
    Ok(())
}

fn main() {}
