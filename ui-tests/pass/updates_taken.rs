// A workflow declares the updates it takes and answers them.
use saga_runtime::prelude::*;

#[derive(Serialize, Deserialize)]
struct Approval {
    discount: u64,
}

#[workflow(name = "order", updates = ["approve", "cancel"])]
async fn order(ctx: WorkflowContext, total: u64) -> Result<u64, WorkflowError> {
    let approved = ctx.take_update::<Approval>("approve", "7 days").await?;
    let total = total - approved.request.discount;
    approved.reply(&total).await?;
    let cancel = ctx.take_update::<()>("cancel", "1 day").await;
    if let Ok(cancel) = cancel {
        cancel.reply("too late").await?;
    }
    Ok(total)
}

fn main() {}
