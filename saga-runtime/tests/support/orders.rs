//! The `order` workflow as the release in production runs it, and the
//! releases a team might write next (steps reordered, inserted, removed,
//! with and without `ctx.patched`), for the replay-check tests of both
//! crates (`tests/replay_check.rs`, `saga-cli/tests/replay.rs`), and
//! `approve`, whose event may not decode. Each step notes the key it ran
//! with, so a test sees which steps of an instance ran, and that a replay
//! runs none.

#![allow(dead_code)]

use std::sync::Mutex;

use saga_runtime::prelude::*;

/// The keys of the steps that ran, in order: `order-7:charge-card`.
static RAN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Notes that a step ran with `key`.
pub(crate) fn note(key: &IdempotencyKey) {
    RAN.lock().unwrap().push(key.as_str().to_owned());
}

/// The steps instance `id` ran, in order.
pub(crate) fn ran(id: &str) -> Vec<String> {
    let prefix = format!("{id}:");
    RAN.lock()
        .unwrap()
        .iter()
        .filter_map(|key| key.strip_prefix(&prefix).map(str::to_owned))
        .collect()
}

#[step(name = "reserve")]
pub(crate) async fn reserve(key: IdempotencyKey) -> Result<(), StepError> {
    note(&key);
    Ok(())
}

#[step(name = "fraud-check")]
pub(crate) async fn fraud_check(key: IdempotencyKey) -> Result<(), StepError> {
    note(&key);
    Ok(())
}

#[step(name = "charge-card")]
pub(crate) async fn charge_card(key: IdempotencyKey) -> Result<(), StepError> {
    note(&key);
    Ok(())
}

/// The release in production: reserve, charge, wait to be shipped.
#[workflow(name = "order")]
pub(crate) async fn order(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    reserve(&ctx).await?;
    charge_card(&ctx).await?;
    let _: u64 = ctx
        .wait_for_event("wait-shipped", "shipped", "30 days")
        .await?;
    Ok(())
}

/// Charges before it reserves.
#[workflow(name = "order")]
pub(crate) async fn reordered(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    charge_card(&ctx).await?;
    reserve(&ctx).await?;
    let _: u64 = ctx
        .wait_for_event("wait-shipped", "shipped", "30 days")
        .await?;
    Ok(())
}

/// A fraud check inserted before the charge, for every instance.
#[workflow(name = "order")]
pub(crate) async fn inserted(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    reserve(&ctx).await?;
    fraud_check(&ctx).await?;
    charge_card(&ctx).await?;
    let _: u64 = ctx
        .wait_for_event("wait-shipped", "shipped", "30 days")
        .await?;
    Ok(())
}

/// The charge removed.
#[workflow(name = "order")]
pub(crate) async fn removed(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    reserve(&ctx).await?;
    let _: u64 = ctx
        .wait_for_event("wait-shipped", "shipped", "30 days")
        .await?;
    Ok(())
}

/// The fraud check inserted behind a patch.
#[workflow(name = "order")]
pub(crate) async fn patched_insertion(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    reserve(&ctx).await?;
    if ctx.patched("fraud-check") {
        fraud_check(&ctx).await?;
    }
    charge_card(&ctx).await?;
    let _: u64 = ctx
        .wait_for_event("wait-shipped", "shipped", "30 days")
        .await?;
    Ok(())
}

/// The charge removed behind a patch.
#[workflow(name = "order")]
pub(crate) async fn patched_removal(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    reserve(&ctx).await?;
    if !ctx.patched("no-charge") {
        charge_card(&ctx).await?;
    }
    let _: u64 = ctx
        .wait_for_event("wait-shipped", "shipped", "30 days")
        .await?;
    Ok(())
}

/// A decision an approver sends (`approve` waits for one).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Decision {
    pub(crate) approved: bool,
}

/// Waits a day for a decision, and returns it: a wait whose event may not
/// decode.
#[workflow(name = "approve")]
pub(crate) async fn approve(ctx: WorkflowContext, (): ()) -> Result<bool, WorkflowError> {
    let decision: Decision = ctx
        .wait_for_event("wait-decision", "decision", "1 day")
        .await?;
    Ok(decision.approved)
}
