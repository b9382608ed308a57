use saga_runtime::prelude::*;

#[step(name = "charge-card", rollback(retries = 3))]
async fn charge_card(key: IdempotencyKey, amount: u64) -> Result<u64, StepError> {
    let _ = key.as_str();
    Ok(amount)
}

fn main() {}
