use saga_runtime::prelude::*;

struct Payments;

#[step(name = "charge-card")]
async fn charge_card(key: IdempotencyKey, payments: &Service<Payments>, amount: u64) -> Result<u64, StepError> {
    let _ = (key.as_str(), payments);
    Ok(amount)
}

#[workflow(name = "checkout")]
async fn checkout(ctx: WorkflowContext, amount: u64) -> Result<u64, WorkflowError> {
    Ok(charge_card(&ctx, amount).await?)
}

fn main() {}
