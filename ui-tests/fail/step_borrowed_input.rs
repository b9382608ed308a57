use saga_runtime::prelude::*;

#[step(name = "charge-card")]
async fn charge_card(key: IdempotencyKey, card: &str) -> Result<u64, StepError> {
    let _ = (key.as_str(), card);
    Ok(1)
}

fn main() {}
