use saga_runtime::prelude::*;

#[step(name = "charge-card")]
async fn charge_card<T: Clone + Send + 'static>(key: IdempotencyKey, card: T) -> Result<u64, StepError> {
    let _ = (key.as_str(), card);
    Ok(1)
}

fn main() {}
