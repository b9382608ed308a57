use saga_runtime::prelude::*;

#[step(name = "charge-card")]
async fn charge_card(key: IdempotencyKey, amount: u64) -> u64 {
    let _ = key.as_str();
    amount
}

fn main() {}
