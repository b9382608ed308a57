use saga_runtime::prelude::*;

/// Serializable, so the step records it; not `Deserialize`, so a Blocked
/// instance's compensation could not read it back.
#[derive(Clone, serde::Serialize)]
struct Order {
    id: u64,
}

#[step(name = "reserve", rollback = release)]
async fn reserve(key: IdempotencyKey, order: Order) -> Result<u64, StepError> {
    Ok(order.id + key.as_str().len() as u64)
}

#[rollback]
async fn release(ctx: RollbackContext<'_, u64>, order: Order) -> Result<(), StepError> {
    let _ = (ctx.key().as_str(), order.id);
    Ok(())
}

fn main() {}
