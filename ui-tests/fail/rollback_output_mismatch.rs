use saga_runtime::prelude::*;

#[step(name = "charge-card", rollback = refund)]
async fn charge_card(key: IdempotencyKey, amount: u64) -> Result<u64, StepError> {
    let _ = key.as_str();
    Ok(amount)
}

// The step's output is `u64`, not `String`.
#[rollback]
async fn refund(ctx: RollbackContext<'_, String>, amount: u64) -> Result<(), StepError> {
    let _ = (ctx.key().as_str(), amount);
    Ok(())
}

fn main() {}
