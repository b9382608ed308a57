use saga_runtime::prelude::*;

#[step(name = "charge-card", redact = ["card", "cvc", "key"])]
async fn charge(key: IdempotencyKey, card: String, cents: u64) -> Result<String, StepError> {
    Ok(format!("{key}: {cents} from {}", card.len()))
}

fn main() {}
