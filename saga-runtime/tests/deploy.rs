//! Deploy safety at run time: a step renamed with `renamed_from` finds the
//! history recorded under its old name, so it is not run again and keeps
//! its old idempotency key; an undeclared change parks the instance
//! `Blocked` until a decision; payloads of every serde shape survive a
//! restart.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::Mutex;

use helpers::{until_status, within};
use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::{Error, FailureKind};

/// The keys the quality check ran with, across both releases.
static RAN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The keys the quality check ran with for the rename test's articles:
/// another test of this binary runs `release_1` at the same time.
fn ran_for_articles() -> Vec<String> {
    RAN.lock()
        .unwrap()
        .iter()
        .filter(|key| key.starts_with("article-"))
        .cloned()
        .collect()
}

mod release_1 {
    use super::*;

    #[step(name = "qa-check")]
    pub(super) async fn qa_check(key: IdempotencyKey, article: u64) -> Result<u64, StepError> {
        RAN.lock().unwrap().push(key.to_string());
        Ok(article * 10)
    }

    #[workflow(name = "publish")]
    pub(super) async fn publish(ctx: WorkflowContext, article: u64) -> Result<u64, WorkflowError> {
        let score = qa_check(&ctx, article).await?;
        let bonus: u64 = ctx
            .wait_for_event("wait-approval", "approval", "7 days")
            .await?;
        Ok(score + bonus)
    }
}

mod release_2 {
    use super::*;

    #[step(name = "quality-check", renamed_from = "qa-check")]
    pub(super) async fn quality_check(key: IdempotencyKey, article: u64) -> Result<u64, StepError> {
        RAN.lock().unwrap().push(key.to_string());
        Ok(article * 100)
    }

    #[workflow(name = "publish")]
    pub(super) async fn publish(ctx: WorkflowContext, article: u64) -> Result<u64, WorkflowError> {
        let score = quality_check(&ctx, article).await?;
        let bonus: u64 = ctx
            .wait_for_event("wait-approval", "approval", "7 days")
            .await?;
        Ok(score + bonus)
    }
}

#[tokio::test]
async fn a_declared_rename_replays_the_old_history_without_running_the_step_again() {
    let dir = std::env::temp_dir().join(format!("saga-deploy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);

    let engine = Engine::open(&dir).unwrap();
    let run = engine
        .start(release_1::publish, "article-1", 4)
        .await
        .unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    engine.close().await;

    let engine = Engine::open(&dir).unwrap();
    engine.register(release_2::publish).unwrap();
    engine
        .send_event("article-1", "approval", &1u64)
        .await
        .unwrap();
    let run = engine.instance("article-1").await.unwrap();
    assert_eq!(
        within("the result", run.result::<u64>()).await.unwrap(),
        41,
        "the output recorded under the old name is replayed"
    );
    assert_eq!(
        ran_for_articles(),
        ["article-1:qa-check"],
        "ran once, with its old key"
    );

    // A new instance runs the step under its new name.
    let run = engine
        .start(release_2::publish, "article-2", 5)
        .await
        .unwrap();
    engine
        .send_event("article-2", "approval", &1u64)
        .await
        .unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 501);
    assert_eq!(
        ran_for_articles(),
        ["article-1:qa-check", "article-2:quality-check"]
    );
    drop(run);
    engine.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the compensations of the reordered workflow saw, in order.
static UNDONE: Mutex<Vec<(String, Option<u64>, u64)>> = Mutex::new(Vec::new());
/// How often a step body of the second release ran.
static RELEASE_B_RAN: Mutex<u32> = Mutex::new(0);

mod reorder_a {
    use super::*;

    #[step(name = "reserve", rollback = release_stock)]
    pub(super) async fn reserve(key: IdempotencyKey, n: u64) -> Result<u64, StepError> {
        let _ = key;
        Ok(n + 1)
    }

    #[rollback]
    pub(super) async fn release_stock(
        ctx: RollbackContext<'_, u64>,
        n: u64,
    ) -> Result<(), StepError> {
        let _ = ctx.key();
        UNDONE
            .lock()
            .unwrap()
            .push(("reserve".into(), ctx.output().copied(), n));
        Ok(())
    }

    #[step(name = "charge", rollback = refund)]
    pub(super) async fn charge(key: IdempotencyKey, n: u64) -> Result<u64, StepError> {
        let _ = key;
        Ok(n * 100)
    }

    #[rollback]
    pub(super) async fn refund(ctx: RollbackContext<'_, u64>, n: u64) -> Result<(), StepError> {
        let _ = ctx.key();
        UNDONE
            .lock()
            .unwrap()
            .push(("charge".into(), ctx.output().copied(), n));
        Ok(())
    }

    #[workflow(name = "order")]
    pub(super) async fn order(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
        let reserved = reserve(&ctx, n).await?;
        let charged = charge(&ctx, n).await?;
        let _: u64 = ctx.wait_for_event("wait-ship", "shipped", "7 days").await?;
        Ok(reserved + charged)
    }
}

mod reorder_b {
    use super::reorder_a::{refund, release_stock};
    use super::*;

    #[step(name = "charge", rollback = refund)]
    pub(super) async fn charge(key: IdempotencyKey, n: u64) -> Result<u64, StepError> {
        let _ = key;
        *RELEASE_B_RAN.lock().unwrap() += 1;
        Ok(n * 100)
    }

    #[step(name = "reserve", rollback = release_stock)]
    pub(super) async fn reserve(key: IdempotencyKey, n: u64) -> Result<u64, StepError> {
        let _ = key;
        *RELEASE_B_RAN.lock().unwrap() += 1;
        Ok(n + 1)
    }

    #[workflow(name = "order")]
    pub(super) async fn order(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
        let charged = charge(&ctx, n).await?;
        let reserved = reserve(&ctx, n).await?;
        let _: u64 = ctx.wait_for_event("wait-ship", "shipped", "7 days").await?;
        Ok(reserved + charged)
    }
}

/// Runs instance `id` of `reorder_a::order` (input `n`) up to its wait in
/// one process, then opens the store again with `next` registered and
/// sends the event it waits for: the store's directory, the engine, the
/// instance, and what its `result()` answered (the instance no longer
/// matches `next`).
async fn next_release(
    tag: &str,
    id: &str,
    n: u64,
    next: impl Workflow<Input = u64, Output = u64>,
) -> (std::path::PathBuf, Engine, Instance, Error) {
    let dir = std::env::temp_dir().join(format!("saga-deploy-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Engine::open(&dir).unwrap();
    let run = engine.start(reorder_a::order, id, n).await.unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    engine.close().await;

    let engine = Engine::open(&dir).unwrap();
    engine.register(next).unwrap();
    // A waiting instance is not replayed until something wakes it: the
    // event it waits for does, and its replay meets the new code.
    engine.send_event(id, "shipped", &1u64).await.unwrap();
    let run = engine.instance(id).await.unwrap();
    let blocked = within("the block", run.result::<u64>()).await.unwrap_err();
    (dir, engine, run, blocked)
}

#[tokio::test]
async fn an_undeclared_reorder_blocks_the_instance_and_terminate_with_rollback_compensates_from_history()
 {
    // The next release calls the steps in the other order.
    let (dir, engine, run, blocked) = next_release("reorder", "order-1", 4, reorder_b::order).await;
    match &blocked {
        Error::Blocked { failure, .. } => {
            assert!(
                matches!(failure.kind(), FailureKind::NonDeterminism { .. }),
                "{failure:?}"
            );
        }
        other => panic!("expected Blocked, got {other:?}"),
    }
    assert_eq!(run.status().await.unwrap(), Status::Blocked);
    assert_eq!(
        *RELEASE_B_RAN.lock().unwrap(),
        0,
        "nothing after the divergence ran"
    );
    assert!(
        UNDONE.lock().unwrap().is_empty(),
        "no compensation without a decision"
    );
    let info = run.info().await.unwrap();
    assert_eq!(info.status, Status::Blocked);
    assert!(info.failure.is_some(), "the error is in info()");
    let listed = engine
        .list(&ListFilter::all().status(Status::Blocked))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);

    within("the rollback", run.terminate_with_rollback())
        .await
        .unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    assert_eq!(
        *UNDONE.lock().unwrap(),
        [
            ("charge".to_owned(), Some(400), 4),
            ("reserve".to_owned(), Some(5), 4)
        ],
        "both started steps, in reverse start order of the history, with their stored outputs and inputs"
    );
    assert_eq!(*RELEASE_B_RAN.lock().unwrap(), 0, "no forward step ran");
    drop(run);
    engine.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the compensations of the release without `charge` saw.
static UNDONE_C: Mutex<Vec<(String, u64)>> = Mutex::new(Vec::new());

mod reorder_c {
    use super::*;

    #[step(name = "reserve", rollback = release_stock)]
    pub(super) async fn reserve(key: IdempotencyKey, n: u64) -> Result<u64, StepError> {
        let _ = key;
        Ok(n + 1)
    }

    #[rollback]
    pub(super) async fn release_stock(
        ctx: RollbackContext<'_, u64>,
        n: u64,
    ) -> Result<(), StepError> {
        let _ = ctx.key();
        UNDONE_C.lock().unwrap().push(("reserve".into(), n));
        Ok(())
    }

    /// `charge` is gone from this release, and the wait moved first.
    #[workflow(name = "order")]
    pub(super) async fn order(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
        let _: u64 = ctx.wait_for_event("wait-ship", "shipped", "7 days").await?;
        Ok(reserve(&ctx, n).await?)
    }
}

#[tokio::test]
async fn a_step_gone_from_the_code_is_recorded_for_a_person_and_the_others_are_compensated() {
    let (dir, engine, run, blocked) = next_release("gone", "order-2", 9, reorder_c::order).await;
    assert!(matches!(blocked, Error::Blocked { .. }), "{blocked:?}");

    within("the rollback", run.terminate_with_rollback())
        .await
        .unwrap();
    match run.result::<u64>().await {
        Err(Error::Terminated {
            rollback_failure: Some(failure),
            ..
        }) => assert!(failure.message().contains("charge"), "{failure}"),
        other => panic!("expected Terminated with the charge's failure, got {other:?}"),
    }
    // Its step is gone from the code, but `reserve`'s handler is there:
    // it ran, with the input stored in history.
    assert_eq!(*UNDONE_C.lock().unwrap(), [("reserve".to_owned(), 9)]);
    let history = run.history().await.unwrap();
    let failed = history.iter().find_map(|e| match &e.kind {
        EventKind::RollbackStepFailed { step, error, .. } if step == "charge" => {
            Some(error.clone())
        }
        _ => None,
    });
    let failed = failed.expect("the compensation of charge is recorded as failed");
    assert!(
        failed.contains("no longer calls a step named \"charge\""),
        "{failed}"
    );
    drop(run);
    engine.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Amount {
    Cents(u64),
    Text(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Meta {
    region: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
enum Outcome {
    Paid { amount: Amount },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Shapes {
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    #[serde(flatten)]
    meta: Meta,
    amount: Amount,
    outcome: Outcome,
    raw: serde_json::Value,
}

fn shapes() -> Shapes {
    Shapes {
        note: None,
        meta: Meta {
            region: "eu".into(),
        },
        amount: Amount::Text("12.50".into()),
        outcome: Outcome::Paid {
            amount: Amount::Cents(1250),
        },
        raw: serde_json::json!({"id": "ch_1", "tags": [1, 2]}),
    }
}

#[step(name = "fetch-shapes", read_only)]
async fn fetch_shapes() -> Result<Shapes, StepError> {
    Ok(shapes())
}

#[workflow(name = "shapes")]
async fn shapes_workflow(ctx: WorkflowContext, (): ()) -> Result<Shapes, WorkflowError> {
    let shapes = fetch_shapes(&ctx).await?;
    let _: u64 = ctx.wait_for_event("wait-go", "go", "7 days").await?;
    Ok(shapes)
}

#[tokio::test]
async fn payload_shapes_bincode_cannot_hold_survive_a_restart() {
    let dir = std::env::temp_dir().join(format!("saga-deploy-shapes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Engine::open(&dir).unwrap();
    let run = engine.start(shapes_workflow, "shapes-1", ()).await.unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    engine.close().await;

    let engine = Engine::open(&dir).unwrap();
    engine.register(shapes_workflow).unwrap();
    engine.send_event("shapes-1", "go", &1u64).await.unwrap();
    let run = engine.instance("shapes-1").await.unwrap();
    assert_eq!(
        within("the result", run.result::<Shapes>()).await.unwrap(),
        shapes()
    );
    drop(run);
    engine.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A journal record of a kind this release does not know, as a newer
/// release would write it: the format version, the time, then a record
/// kind past the last one this release knows.
fn record_of_a_newer_release() -> Vec<u8> {
    // Version 2; `at` = 1000 ms (varint 251, 232, 3); kind 45; a body.
    vec![2, 251, 232, 3, 45, 1, 7]
}

#[tokio::test]
async fn an_instance_a_newer_release_wrote_to_is_left_alone_not_parked() {
    let dir = std::env::temp_dir().join(format!("saga-deploy-newer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Engine::open(&dir).unwrap();
    let run = engine
        .start(release_1::publish, "from-the-future", 3)
        .await
        .unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    engine.close().await;

    // A newer release ran it on and recorded a kind of record this one
    // does not know (its journal, as it wrote it).
    let newer = {
        use saga_runtime::store::Store;
        let store = helpers::when_released(|| saga_runtime::store::SledStore::open(&dir))
            .await
            .unwrap();
        let last = store.last_seq("from-the-future").await.unwrap().unwrap();
        store
            .append("from-the-future", last + 1, &record_of_a_newer_release())
            .unwrap();
        store.flush().unwrap();
        last + 1
    };

    // This release neither runs it nor parks it, and says why.
    let engine = helpers::when_released(|| Engine::open(&dir)).await.unwrap();
    engine.register(release_1::publish).unwrap();
    let error = engine
        .instance("from-the-future")
        .await
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(&error, Error::NewerRelease { id, .. } if id == "from-the-future"),
        "{error}"
    );
    assert!(error.to_string().contains("newer release"), "{error}");
    let sent = engine
        .send_event("from-the-future", "approval", &1u64)
        .await
        .unwrap_err();
    assert!(matches!(sent, Error::NewerRelease { .. }), "{sent}");
    // Listed as it was, not as Blocked; nothing written after its record.
    let listed = engine.list(&ListFilter::all()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, Status::Waiting);
    engine.close().await;
    {
        use saga_runtime::store::Store;
        let store = helpers::when_released(|| saga_runtime::store::SledStore::open(&dir))
            .await
            .unwrap();
        assert_eq!(
            store.last_seq("from-the-future").await.unwrap(),
            Some(newer)
        );
        let journal = store.journal("from-the-future").await.unwrap();
        assert_eq!(journal.last().unwrap().1, record_of_a_newer_release());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The replay check of the next release on sled, before its deploy: an
/// engine opened to read registers the new code and replays the stored
/// instances against it, and drives none of them. Opened to write, the
/// same registration would park the instance `Blocked`
/// (`an_undeclared_reorder_blocks_the_instance...` above).
#[tokio::test]
async fn an_engine_opened_to_read_replays_the_next_release_and_drives_nothing() {
    use saga_runtime::testing::{History, Replayer};

    let dir = std::env::temp_dir().join(format!("saga-deploy-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let missing = Engine::builder().open_read_only(&dir).unwrap_err();
    assert!(matches!(missing, Error::InvalidArgument(_)), "{missing:?}");
    let engine = Engine::open(&dir).unwrap();
    let run = engine
        .start(reorder_a::order, "order-check", 4)
        .await
        .unwrap();
    until_status(&run, Status::Waiting).await;
    let recorded = run.history().await.unwrap().len();
    drop(run);
    engine.close().await;

    let engine = Engine::builder()
        .register(reorder_b::order)
        .open_read_only(&dir)
        .unwrap();
    assert!(engine.reads_only());
    let history = History::export(&engine, "order-check").await.unwrap();
    let error = Replayer::of(&engine)
        .replay_registered(&history)
        .await
        .expect_err("the next release reorders the steps");
    assert!(error.non_determinism().is_some(), "{error}");
    helpers::quiet(&engine).await;
    let run = engine.instance("order-check").await.unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    let refused = engine
        .start(reorder_b::order, "order-new", 1)
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::ReadOnly { .. }), "{refused:?}");
    let refused = run.terminate().await.unwrap_err();
    assert!(matches!(refused, Error::ReadOnly { .. }), "{refused:?}");
    drop(run);
    engine.close().await;

    // The release in production finds its instance as it left it.
    let engine = Engine::open(&dir).unwrap();
    let run = engine.instance("order-check").await.unwrap();
    assert_eq!(run.history().await.unwrap().len(), recorded);
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    engine.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
