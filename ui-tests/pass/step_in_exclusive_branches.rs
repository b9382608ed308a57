//! The same step in exclusive branches (`if`/`else` arms, `match` arms) is
//! one call per run: allowed.

#![deny(warnings)]

use saga_runtime::prelude::*;

#[step(name = "charge-card")]
async fn charge_card(key: IdempotencyKey, cents: u64) -> Result<u64, StepError> {
    let _ = key.as_str();
    Ok(cents)
}

#[step(name = "notify", read_only)]
async fn notify(text: String) -> Result<(), StepError> {
    let _ = text;
    Ok(())
}

#[workflow(name = "pay")]
async fn pay(ctx: WorkflowContext, cents: u64) -> Result<u64, WorkflowError> {
    let charged = if cents > 1000 {
        ctx.sleep("review", "1 hour").await?;
        charge_card(&ctx, cents).await?
    } else if cents > 0 {
        charge_card(&ctx, cents).await?
    } else {
        0
    };
    match charged {
        0 => notify(&ctx, "nothing charged".to_owned()).await?,
        1..=1000 => notify(&ctx, "small charge".to_owned()).await?,
        _ => {
            let text = format!("charged {charged}");
            notify(&ctx, text).await?
        }
    }
    Ok(charged)
}

fn main() {
    assert_eq!(pay.name(), "pay");
}
