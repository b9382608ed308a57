use saga_runtime::prelude::*;

mod card {
    use saga_runtime::prelude::*;

    #[step(name = "charge")]
    pub(crate) async fn charge(key: IdempotencyKey, cents: u64) -> Result<u64, StepError> {
        let _ = key.as_str();
        Ok(cents)
    }
}

#[step(name = "charge")]
async fn charge_wallet(key: IdempotencyKey, cents: u64) -> Result<u64, StepError> {
    let _ = key.as_str();
    Ok(cents)
}

#[workflow(name = "checkout")]
async fn checkout(ctx: WorkflowContext, cents: u64) -> Result<u64, WorkflowError> {
    let card = card::charge(&ctx, cents / 2).await?;
    let wallet = charge_wallet(&ctx, cents - card).await?;
    Ok(card + wallet)
}

fn main() {}
