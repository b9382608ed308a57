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

use saga_runtime::prelude::*;
use saga_runtime::{Engine, Error, EventKind};

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
    let engine = store.open(builder(&ran)).await;
    engine.register(order_v1).unwrap();
    for id in ["order-old", "order-unpatched"] {
        let run = engine.start(order_v1, id, ()).await.unwrap();
        until_status(&run, Status::Waiting).await;
    }
    engine.close().await;

    // The release with the patch: the old instance went past its place.
    let engine = store.open(builder(&ran)).await;
    engine.register(order_v2).unwrap();
    let new = engine.start(order_v2, "order-new", ()).await.unwrap();
    until_status(&new, Status::Waiting).await;
    for id in ["order-old", "order-new"] {
        engine.send_event(id, "shipped", &1u64).await.unwrap();
        let run = engine.instance(id).await.unwrap();
        within("the order's end", run.result::<()>()).await.unwrap();
    }
    assert_eq!(ran.of("order-old"), ["reserve", "charge-card"]);
    assert_eq!(
        ran.of("order-new"),
        ["reserve", "fraud-check", "charge-card"]
    );
    assert!(!patched(&engine, "order-old").await);
    assert!(patched(&engine, "order-new").await);
    drop(new);
    engine.close().await;

    // Without the patch the old instance could not go on: the release
    // that calls the new step unconditionally parks it.
    let engine = store.open(builder(&ran)).await;
    engine.register(order_v3).unwrap();
    let unpatched = engine.instance("order-unpatched").await.unwrap();
    let blocked = within("the block", unpatched.result::<()>()).await;
    assert!(
        matches!(&blocked, Err(Error::Blocked { .. })),
        "{blocked:?}"
    );
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_patch_replays_the_instances_that_took_it() {
    let ran = Arc::new(Ran::default());
    let store = Reopenable::new("patchesretired").await;
    let engine = store.open(builder(&ran)).await;
    engine.register(order_v2).unwrap();
    let run = engine.start(order_v2, "order-7", ()).await.unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    engine.close().await;

    // The release after: no `patched` call, the fraud check kept. The
    // patch took no slot, so the history replays as it was written.
    let engine = store.open(builder(&ran)).await;
    engine.register(order_v3).unwrap();
    engine
        .send_event("order-7", "shipped", &1u64)
        .await
        .unwrap();
    let run = engine.instance("order-7").await.unwrap();
    within("the order's end", run.result::<()>()).await.unwrap();
    assert_eq!(ran.of("order-7"), ["reserve", "fraud-check", "charge-card"]);
    drop(run);
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_waiting_before_the_patch_takes_it() {
    let ran = Arc::new(Ran::default());
    let store = Reopenable::new("patcheswaiting").await;
    let engine = store.open(builder(&ran)).await;
    engine.register(approved_v1).unwrap();
    let run = engine.start(approved_v1, "approved-1", ()).await.unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    engine.close().await;

    let engine = store.open(builder(&ran)).await;
    engine.register(approved_v2).unwrap();
    engine
        .send_event("approved-1", "approval", &true)
        .await
        .unwrap();
    let run = engine.instance("approved-1").await.unwrap();
    within("the order's end", run.result::<()>()).await.unwrap();
    // Nothing in its history lay past the patch: it runs the new code.
    assert_eq!(ran.of("approved-1"), ["fraud-check", "charge-card"]);
    assert!(patched(&engine, "approved-1").await);
    drop(run);
    engine.close().await;
}
