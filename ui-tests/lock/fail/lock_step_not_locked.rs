// A step saga.lock does not know, under a name no locked step had.
use saga_runtime::prelude::*;

#[step(name = "engrave")]
async fn engrave(key: IdempotencyKey, text: String) -> Result<String, StepError> {
    let _ = key.as_str();
    Ok(text)
}

fn main() {}
