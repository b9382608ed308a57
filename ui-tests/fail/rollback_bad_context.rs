use saga_runtime::prelude::*;

#[rollback]
async fn refund(amount: u64, key: IdempotencyKey) -> Result<(), StepError> {
    let _ = (key.as_str(), amount);
    Ok(())
}

fn main() {}
