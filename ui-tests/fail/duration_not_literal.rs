use saga_runtime::prelude::*;

const TIMEOUT: &str = "30 seconds";

#[step(name = "charge-card", timeout = TIMEOUT)]
async fn charge_card(key: IdempotencyKey, amount: u64) -> Result<u64, StepError> {
    let _ = key.as_str();
    Ok(amount)
}

fn main() {}
