use saga_runtime::prelude::*;

#[rollback]
async fn refund(ctx: RollbackContext<'_, u64>, amount: u64) -> Result<(), StepError> {
    let _charge = ctx.output();
    let _ = amount;
    Ok(())
}

fn main() {}
