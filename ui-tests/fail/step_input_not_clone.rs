use saga_runtime::prelude::*;

#[derive(Serialize, Deserialize)]
struct Card {
    number: String,
}

#[step(name = "charge-card")]
async fn charge_card(key: IdempotencyKey, card: Card) -> Result<u64, StepError> {
    let _ = (key.as_str(), card.number);
    Ok(1)
}

fn main() {}
