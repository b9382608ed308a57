use saga_runtime::prelude::*;

struct NotAnError;

#[step(name = "charge-card")]
async fn charge_card(key: IdempotencyKey, amount: u64) -> Result<u64, NotAnError> {
    let _ = key.as_str();
    if amount == 0 {
        return Err(NotAnError);
    }
    Ok(amount)
}

fn main() {}
