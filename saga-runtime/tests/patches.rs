//! Patches: `ctx.patched(name)` lets a workflow gain a call while
//! instances of it are in flight. An instance whose history went past the
//! patch's place replays without it; new instances, and one that waits
//! before the place, take it; the patch takes no slot, so retiring it
//! later replays instances that took it. The workflows are written with
//! `#[workflow]` and `#[step]`, as users write them, in three releases of
//! one workflow.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::{Arc, Mutex};

use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::{Engine, Error};

use helpers::{Reopenable, until_status, within};

/// The keys of the steps that ran, in order.
#[derive(Default)]
struct Ran(Mutex<Vec<String>>);

impl Ran {
    fn note(&self, key: &IdempotencyKey) {
        self.0.lock().unwrap().push(key.as_str().to_owned());
    }

    fn of(&self, id: &str) -> Vec<String> {
        let prefix = format!("{id}:");
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|k| k.strip_prefix(&prefix).map(str::to_owned))
            .collect()
    }
}

#[step(name = "reserve")]
async fn reserve(key: IdempotencyKey, ran: Service<Ran>) -> Result<(), StepError> {
    ran.note(&key);
    Ok(())
}

#[step(name = "fraud-check")]
async fn fraud_check(key: IdempotencyKey, ran: Service<Ran>) -> Result<(), StepError> {
    ran.note(&key);
    Ok(())
}

#[step(name = "charge-card")]
async fn charge_card(key: IdempotencyKey, ran: Service<Ran>) -> Result<(), StepError> {
    ran.note(&key);
    Ok(())
}

/// The first release: reserve, charge, then wait to be shipped.
#[workflow(name = "order")]
async fn order_v1(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    reserve(&ctx).await?;
    charge_card(&ctx).await?;
    let _: u64 = ctx
        .wait_for_event("wait-shipped", "shipped", "30 days")
        .await?;
    Ok(())
}

/// The second: a fraud check before the charge, behind a patch.
#[workflow(name = "order")]
async fn order_v2(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
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

/// The third: the patch retired, its call kept.
#[workflow(name = "order")]
async fn order_v3(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    reserve(&ctx).await?;
    fraud_check(&ctx).await?;
    charge_card(&ctx).await?;
    let _: u64 = ctx
        .wait_for_event("wait-shipped", "shipped", "30 days")
        .await?;
    Ok(())
}

/// A first release that waits for approval before it charges.
#[workflow(name = "approved-order")]
async fn approved_v1(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    let _: bool = ctx
        .wait_for_event("wait-approval", "approval", "30 days")
        .await?;
    charge_card(&ctx).await?;
    Ok(())
}

/// Its second release checks for fraud first, behind a patch.
#[workflow(name = "approved-order")]
async fn approved_v2(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    let _: bool = ctx
        .wait_for_event("wait-approval", "approval", "30 days")
        .await?;
    if ctx.patched("fraud-check") {
        fraud_check(&ctx).await?;
    }
    charge_card(&ctx).await?;
    Ok(())
}

fn builder(ran: &Arc<Ran>) -> impl Fn() -> saga_runtime::EngineBuilder + '_ {
    move || Engine::builder().provide_arc(ran.clone())
}

/// The store opened by the release that runs `workflow`.
async fn release<W: Workflow>(store: &Reopenable, ran: &Arc<Ran>, workflow: W) -> Engine {
    let engine = store.open(builder(ran)).await;
    engine.register(workflow).unwrap();
    engine
}

/// Starts `id` under the release of `workflow`, leaves it waiting for an
/// event, and closes the store.
async fn left_waiting<W: Workflow<Input = ()> + Copy>(
    store: &Reopenable,
    ran: &Arc<Ran>,
    workflow: W,
    ids: &[&str],
) {
    let engine = release(store, ran, workflow).await;
    for id in ids {
        let run = engine.start(workflow, id, ()).await.unwrap();
        until_status(&run, Status::Waiting).await;
    }
    engine.close().await;
}

/// Sends `id` the event it waits for, and waits for its end.
async fn finish<P: Serialize>(engine: &Engine, id: &str, event_type: &str, payload: &P) {
    engine.send_event(id, event_type, payload).await.unwrap();
    let run = engine.instance(id).await.unwrap();
    within("the order's end", run.result::<()>()).await.unwrap();
}

async fn patched(engine: &Engine, id: &str) -> bool {
    let history = engine.instance(id).await.unwrap().history().await.unwrap();
    history
        .iter()
        .any(|e| matches!(&e.kind, EventKind::Patched { name } if name == "fraud-check"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_instances_replay_without_the_patch_and_new_ones_take_it() {
    let ran = Arc::new(Ran::default());
    let store = Reopenable::new("patches").await;
    left_waiting(&store, &ran, order_v1, &["order-old", "order-unpatched"]).await;

    // The release with the patch: the old instance went past its place.
    left_waiting(&store, &ran, order_v2, &["order-new"]).await;
    let engine = release(&store, &ran, order_v2).await;
    for id in ["order-old", "order-new"] {
        finish(&engine, id, "shipped", &1u64).await;
    }
    assert_eq!(ran.of("order-old"), ["reserve", "charge-card"]);
    assert_eq!(
        ran.of("order-new"),
        ["reserve", "fraud-check", "charge-card"]
    );
    assert!(!patched(&engine, "order-old").await);
    assert!(patched(&engine, "order-new").await);
    engine.close().await;

    // Without the patch the old instance could not go on: the release
    // that calls the new step unconditionally parks it when it wakes (a
    // sleeping instance is not replayed before).
    let engine = release(&store, &ran, order_v3).await;
    let unpatched = engine.instance("order-unpatched").await.unwrap();
    engine
        .send_event("order-unpatched", "shipped", &1u64)
        .await
        .unwrap();
    let blocked = within("the block", unpatched.result::<()>()).await;
    assert!(
        matches!(&blocked, Err(Error::Blocked { .. })),
        "{blocked:?}"
    );
    drop(unpatched);
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_patch_replays_the_instances_that_took_it() {
    let ran = Arc::new(Ran::default());
    let store = Reopenable::new("patchesretired").await;
    left_waiting(&store, &ran, order_v2, &["order-7"]).await;
    // The release after: no `patched` call, the fraud check kept. The
    // patch took no slot, so the history replays as it was written.
    let engine = release(&store, &ran, order_v3).await;
    finish(&engine, "order-7", "shipped", &1u64).await;
    assert_eq!(ran.of("order-7"), ["reserve", "fraud-check", "charge-card"]);
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_waiting_before_the_patch_takes_it() {
    let ran = Arc::new(Ran::default());
    let store = Reopenable::new("patcheswaiting").await;
    left_waiting(&store, &ran, approved_v1, &["approved-1"]).await;
    let engine = release(&store, &ran, approved_v2).await;
    finish(&engine, "approved-1", "approval", &true).await;
    // Nothing in its history lay past the patch: it runs the new code.
    assert_eq!(ran.of("approved-1"), ["fraud-check", "charge-card"]);
    assert!(patched(&engine, "approved-1").await);
    engine.close().await;
}
