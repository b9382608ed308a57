use saga_runtime::prelude::*;

#[derive(Clone)]
struct Card {
    number: String,
}

#[step(name = "charge-card")]
async fn charge_card(key: IdempotencyKey, amount: u64, card: Card) -> Result<u64, StepError> {
    let _ = (key.as_str(), card.number);
    Ok(amount)
}

fn main() {}
