use saga_runtime::prelude::*;

struct Payments;

impl Payments {
    #[step(name = "charge-card")]
    async fn charge_card(&self, key: IdempotencyKey, amount: u64) -> Result<u64, StepError> {
        let _ = key.as_str();
        Ok(amount)
    }
}

fn main() {
    let _ = Payments;
}
