use saga_runtime::prelude::*;

// Every mistake of one attribute is reported in the same build.
#[step(name = "Charge Card", retries = 20000, delay = "soon", backoff = "random", colour = "blue")]
async fn charge_card(key: IdempotencyKey, amount: u64) -> Result<u64, StepError> {
    let _ = key.as_str();
    Ok(amount)
}

fn main() {}
