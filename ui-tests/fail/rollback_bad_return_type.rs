use saga_runtime::prelude::*;

#[rollback]
async fn refund(ctx: RollbackContext<'_, u64>, amount: u64) -> Result<u64, StepError> {
    let _ = ctx.key().as_str();
    Ok(amount)
}

fn main() {}
