//! The ten-step publishing pipeline of an autonomous media system (from
//! "Workflow step names must never change"): check-paused → load-topic →
//! write-draft → qa-check → save-draft → resolve-approval-policy →
//! create-approval → wait-approval → publish → index-kb → settle (7 days) →
//! measure.
//!
//! The article's bug: `create-approval` inserted a row with a fresh UUID on
//! every retry, so a retried INSERT made two pending approvals. Here the
//! step must take its `IdempotencyKey` (a compile error otherwise) and the
//! insert is keyed by it: the first attempt's response is "lost" after the
//! row committed, the retry finds the row, and there is one approval.
//!
//! `cargo run --example article_pipeline`

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{LazyLock, Mutex};

use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Topic {
    slug: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Draft {
    slug: String,
    body: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Decision {
    approved: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct Published {
    url: String,
    views: u64,
}

/// The approvals table, with a UNIQUE idempotency key column.
static APPROVALS: LazyLock<Mutex<BTreeMap<String, String>>> = LazyLock::new(Mutex::default);
static CREATE_APPROVAL_CALLS: AtomicU32 = AtomicU32::new(0);
static WRITE_DRAFT_CALLS: AtomicU32 = AtomicU32::new(0);

#[step(name = "check-paused", read_only)]
async fn check_paused() -> Result<bool, StepError> {
    Ok(false)
}

#[step(name = "load-topic", read_only)]
async fn load_topic(slug: String) -> Result<Topic, StepError> {
    Ok(Topic { slug })
}

#[step(
    name = "write-draft",
    retries = 2,
    delay = "30 seconds",
    backoff = "exponential"
)]
async fn write_draft(key: IdempotencyKey, topic: Topic) -> Result<Draft, StepError> {
    // The model API times out once; the retry (same key) succeeds.
    if WRITE_DRAFT_CALLS.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(StepError::retryable("model API timed out"));
    }
    Ok(Draft {
        slug: topic.slug.clone(),
        body: format!("Why step names never change ({})", key.as_str()),
    })
}

#[step(name = "qa-check", read_only)]
async fn qa_check(draft: Draft) -> Result<bool, StepError> {
    Ok(!draft.body.is_empty())
}

#[step(name = "save-draft")]
async fn save_draft(key: IdempotencyKey, draft: Draft) -> Result<String, StepError> {
    Ok(format!("drafts/{}?v={}", draft.slug, key.as_str().len()))
}

#[step(name = "resolve-approval-policy", read_only)]
async fn resolve_approval_policy(draft: Draft) -> Result<String, StepError> {
    Ok(if draft.body.len() > 10 {
        "editor"
    } else {
        "auto"
    }
    .to_owned())
}

#[step(name = "create-approval")]
async fn create_approval(
    key: IdempotencyKey,
    draft_id: String,
    policy: String,
) -> Result<String, StepError> {
    let call = CREATE_APPROVAL_CALLS.fetch_add(1, Ordering::SeqCst);
    let mut approvals = APPROVALS.lock().map_err(StepError::fatal)?;
    // INSERT ... ON CONFLICT (idempotency_key) DO NOTHING
    approvals
        .entry(key.as_str().to_owned())
        .or_insert_with(|| format!("pending approval of {draft_id} by {policy}"));
    if call == 0 {
        // The row committed, then the connection dropped before the reply.
        return Err(StepError::retryable("connection reset after commit"));
    }
    Ok(key.as_str().to_owned())
}

#[step(name = "publish")]
async fn publish(key: IdempotencyKey, draft: Draft) -> Result<String, StepError> {
    // The CMS dedupes publications on the key.
    println!("  publishing {} (key {key})", draft.slug);
    Ok(format!("https://example.invalid/{}", draft.slug))
}

#[step(name = "index-kb", retries = 2, delay = "10 seconds")]
async fn index_kb(key: IdempotencyKey, url: String) -> Result<(), StepError> {
    println!("  indexed {url} (key {key})");
    Ok(())
}

#[step(name = "measure", read_only)]
async fn measure(url: String) -> Result<u64, StepError> {
    Ok(url.len() as u64 * 100)
}

#[workflow(name = "article-pipeline")]
async fn article_pipeline(ctx: WorkflowContext, slug: String) -> Result<Published, WorkflowError> {
    if check_paused(&ctx).await? {
        return Err(WorkflowError::new("the pipeline is paused"));
    }
    let topic = load_topic(&ctx, slug).await?;
    let draft = write_draft(&ctx, topic).await?;
    if !qa_check(&ctx, draft.clone()).await? {
        return Err(WorkflowError::new("the draft failed QA"));
    }
    let draft_id = save_draft(&ctx, draft.clone()).await?;
    let policy = resolve_approval_policy(&ctx, draft.clone()).await?;
    let _approval = create_approval(&ctx, draft_id, policy).await?;
    let decision: Decision = ctx
        .wait_for_event("wait-approval", "editor-decision", "7 days")
        .await?;
    if !decision.approved {
        return Err(WorkflowError::new("the editor rejected the draft"));
    }
    let url = publish(&ctx, draft).await?;
    index_kb(&ctx, url.clone()).await?;
    ctx.sleep("settle", "7 days").await?;
    let views = measure(&ctx, url.clone()).await?;
    Ok(Published { url, views })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // The error as a person reads it, not its Debug form.
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), saga_runtime::Error> {
    let dir = saga_examples::StoreDir::for_example("article_pipeline");
    // A simulated clock: retry delays and the 7-day settle pass at once.
    let engine = Engine::builder()
        .clock(TestClock::auto_advancing())
        .register(article_pipeline)
        .open(&dir.path)?;
    let run = engine
        .start(
            article_pipeline,
            "article-163",
            "durable-execution".to_string(),
        )
        .await?;
    engine
        .send_event(
            "article-163",
            "editor-decision",
            &Decision { approved: true },
        )
        .await?;
    let published = run.result().await?;
    println!("published: {published:?}");
    println!(
        "create-approval ran {} times; approvals table: {:?}",
        CREATE_APPROVAL_CALLS.load(Ordering::SeqCst),
        APPROVALS.lock().expect("approvals lock")
    );
    engine.close().await;
    Ok(())
}
