use saga_runtime::prelude::*;

#[step(name = "migrate-accounts-2024-01-31")]
async fn migrate_accounts(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key.as_str();
    Ok(())
}

fn main() {}
