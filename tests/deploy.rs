//! Deploy safety at run time: a step renamed with `renamed_from` finds the
//! history recorded under its old name, so it is not run again and keeps
//! its old idempotency key.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::Mutex;
use std::time::Duration;

use helpers::within;
use saga_runtime::prelude::*;

/// The keys the quality check ran with, across both releases.
static RAN: Mutex<Vec<String>> = Mutex::new(Vec::new());

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
    within("the wait", async {
        while run.status().await.unwrap() != Status::Waiting {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
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
        *RAN.lock().unwrap(),
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
        RAN.lock().unwrap().last().unwrap(),
        "article-2:quality-check"
    );
    drop(run);
    engine.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
