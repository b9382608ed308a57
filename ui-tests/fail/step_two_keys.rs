use saga_runtime::prelude::*;

#[step(name = "charge-card")]
async fn charge_card(key: IdempotencyKey, amount: u64, other: IdempotencyKey) -> Result<u64, StepError> {
    let _ = (key.as_str(), other.as_str());
    Ok(amount)
}

fn main() {}
