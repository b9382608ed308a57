use saga_runtime::prelude::*;

#[rollback]
fn refund(ctx: RollbackContext<'_, u64>, amount: u64) -> Result<(), StepError> {
    let _ = (ctx.key().as_str(), amount);
    Ok(())
}

fn main() {}
