//! The PostgreSQL store against faults and hostile setups: cancelled
//! statements, a server that never answers, readers that must not change
//! the database, schemas that are not saga's to take, and system schemas.

#[path = "support/helpers.rs"]
mod helpers;
#[path = "support/postgres.rs"]
mod postgres;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saga_runtime::Error;
use saga_runtime::prelude::*;

use helpers::within;

/// How often each idempotency key's step body ran.
#[derive(Default)]
struct Runs(Mutex<HashMap<String, u32>>);

impl Runs {
    fn count(&self, key: &IdempotencyKey) {
        *self
            .0
            .lock()
            .unwrap()
            .entry(key.as_str().to_owned())
            .or_default() += 1;
    }
}

#[step(name = "first")]
async fn first(key: IdempotencyKey, runs: Service<Runs>, n: u64) -> Result<u64, StepError> {
    runs.count(&key);
    Ok(n + 1)
}

#[step(name = "second")]
async fn second(key: IdempotencyKey, runs: Service<Runs>, n: u64) -> Result<u64, StepError> {
    runs.count(&key);
    Ok(n * 2)
}

#[step(name = "third")]
async fn third(key: IdempotencyKey, runs: Service<Runs>, n: u64) -> Result<u64, StepError> {
    runs.count(&key);
    Ok(n + 3)
}

#[workflow(name = "three-steps")]
async fn three_steps(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let a = first(&ctx, n).await?;
    let b = second(&ctx, a).await?;
    Ok(third(&ctx, b).await?)
}

/// Cancels the running statements of `schema`'s connections (they carry
/// the application name `saga:<schema>`) every 150 ms, until dropped, and
/// counts the statements it cancelled. So that there are statements to
/// cancel, each round first holds the tables that writes and flushes
/// take (reads go on), and cancels the statements queued behind them,
/// inside their transactions too.
struct Canceller {
    task: tokio::task::JoinHandle<()>,
    hits: Arc<std::sync::atomic::AtomicU64>,
}

impl Canceller {
    async fn start(schema: &str) -> Canceller {
        let admin = postgres::admin().await;
        // One message, so the server runs it whole (the lock is never left
        // held by a test that stops halfway).
        let round = format!(
            "BEGIN;
             LOCK TABLE {schema}.instances, {schema}.workers IN EXCLUSIVE MODE;
             SELECT pg_sleep(0.02);
             SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity
             WHERE application_name = 'saga:{schema}' AND state = 'active'
               AND pid <> pg_backend_pid();
             COMMIT"
        );
        let hits = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = hits.clone();
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(150));
            loop {
                every.tick().await;
                let messages = admin.simple_query(&round).await.unwrap();
                // The last row: the count (before it, pg_sleep's).
                let cancelled = messages
                    .iter()
                    .filter_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0),
                        _ => None,
                    })
                    .last();
                let n: u64 = cancelled.and_then(|n| n.parse().ok()).unwrap_or(0);
                counted.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
        });
        Canceller { task, hits }
    }
}

impl Drop for Canceller {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_statements_are_retried_and_no_step_runs_twice() {
    const INSTANCES: u64 = 200;
    let schema = postgres::fresh_schema("cancel").await;
    let runs = Arc::new(Runs::default());
    let engine = Engine::builder()
        .postgres_schema(&schema)
        .provide_arc(runs.clone())
        .register(three_steps)
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e));
    let canceller = Canceller::start(&schema).await;
    let mut results = tokio::task::JoinSet::new();
    let mut started = 0;
    for n in 0..INSTANCES {
        let run = match engine.start(three_steps, &format!("cancel-{n}"), n).await {
            Ok(run) => run,
            Err(e) => {
                eprintln!("cancel-{n} did not start: {e}");
                continue;
            }
        };
        started += 1;
        results.spawn(async move { run.result().await.map(|out| (n, out)) });
    }
    let mut completed = 0;
    let all = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(result) = results.join_next().await {
            match result.unwrap() {
                Ok((n, out)) => {
                    assert_eq!(out, (n + 1) * 2 + 3);
                    completed += 1;
                }
                Err(e) => eprintln!("an instance failed: {e}"),
            }
        }
    })
    .await;
    let hits = canceller.hits.load(std::sync::atomic::Ordering::Relaxed);
    drop(canceller);
    eprintln!(
        "{completed} of {INSTANCES} completed ({started} started, {hits} statements cancelled)"
    );
    assert!(
        hits > 0,
        "no statement was cancelled: the test tested nothing"
    );
    assert!(
        all.is_ok(),
        "instances still running after 60 s: {completed} of {INSTANCES} completed"
    );
    assert_eq!(completed, INSTANCES, "{completed} of {INSTANCES} completed");
    let runs = runs.0.lock().unwrap().clone();
    assert_eq!(runs.len() as u64, INSTANCES * 3);
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "steps ran more than once: {twice:?}");
    engine.close().await;
    postgres::drop_schema(&schema).await;
}
