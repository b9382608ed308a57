//! Two steps started together: the call order is the start order.

#![deny(warnings)]

use saga_runtime::prelude::*;

#[step(name = "reserve-stock")]
async fn reserve_stock(key: IdempotencyKey, sku: String, count: u32) -> Result<u32, StepError> {
    let _ = (key.as_str(), sku);
    Ok(count)
}

#[step(name = "charge-card")]
async fn charge_card(key: IdempotencyKey, cents: u64) -> Result<u64, StepError> {
    let _ = key;
    Ok(cents)
}

/// Lint attributes apply to the body, docs to the workflow value.
#[workflow(name = "checkout")]
#[expect(clippy::let_and_return, reason = "kept apart for reading")]
#[allow(unused_variables)]
async fn checkout(ctx: WorkflowContext, cents: u64) -> Result<(u32, u64), WorkflowError> {
    let (reserved, charged) = tokio::join!(
        reserve_stock(&ctx, "sku-1".to_owned(), 2),
        charge_card(&ctx, cents),
    );
    let unused = 1;
    let output = Ok((reserved?, charged?));
    output
}

fn main() {
    assert_eq!(checkout.name(), "checkout");
}
