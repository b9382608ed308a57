use saga_runtime::prelude::*;

#[step(name = "charge-the-customers-card-for-the-full-amount-of-the-order-right-now")]
async fn charge_card(key: IdempotencyKey, amount: u64) -> Result<u64, StepError> {
    let _ = key.as_str();
    Ok(amount)
}

fn main() {}
