//! Steps and rollback handlers take shared services as `Service<T>`
//! parameters, anywhere in their parameter list; callers do not pass them.

#![deny(warnings)]

use saga_runtime::prelude::*;

struct Payments;

impl Payments {
    async fn charge(&self, cents: u64, key: &str) -> Result<String, std::io::Error> {
        Ok(format!("{cents}:{key}"))
    }
}

struct Audit;

#[step(name = "charge", rollback = refund)]
async fn charge(
    payments: Service<Payments>,
    key: IdempotencyKey,
    cents: u64,
    audit: Service<Audit>,
) -> Result<String, std::io::Error> {
    let _: &Audit = &audit;
    payments.charge(cents, key.as_str()).await
}

#[rollback]
async fn refund(ctx: RollbackContext<'_, String>, cents: u64, payments: Service<Payments>) -> Result<(), std::io::Error> {
    payments.charge(cents, ctx.key().as_str()).await.map(drop)
}

#[workflow(name = "pay")]
async fn pay(ctx: WorkflowContext, cents: u64) -> Result<String, WorkflowError> {
    Ok(charge(&ctx, cents).await?)
}

fn main() {
    fn is_workflow<W: Workflow>(_: W) {}
    is_workflow(pay);
    let needs = pay.services();
    assert_eq!(needs.len(), 3, "{needs:?}");
}
