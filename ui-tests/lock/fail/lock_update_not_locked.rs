// An update saga.lock does not know, taken in a locked workflow outside
// any `ctx.patched` branch: an instance that went past this point would
// replay into a take its history never recorded.
use saga_runtime::prelude::*;

#[workflow(name = "lock-refunds", updates = ["refund"])]
async fn lock_refunds(ctx: WorkflowContext, total: u64) -> Result<u64, WorkflowError> {
    let refund = ctx.take_update::<u64>("refund", "7 days").await?;
    refund.reply(&total).await?;
    Ok(total - refund.request)
}

fn main() {}
