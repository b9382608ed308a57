//! A database restarted under load loses no acknowledged step.
//!
//! One worker runs 3-step workflows, 32 at once, while the test restarts
//! the PostgreSQL server in immediate mode: it stops without a checkpoint
//! and without writing what it held in memory, as a crash would, and
//! recovers from its WAL. Writes the worker made without waiting for the
//! disk may be lost; none that a flush covered. A step's output reaches
//! the workflow only after a flush, so a step whose next step had started
//! before the restart (or whose workflow's `result()` had returned) was
//! acknowledged: it must never run again. And every workflow completes:
//! the worker reconnects, applies its unflushed writes again, and goes on.
//!
//! It restarts the server this machine's tests share, so it is a test
//! binary of its own (cargo runs test binaries one at a time), and needs
//! the right to restart it (root and `pg_ctlcluster`, as on the test
//! machines and in CI; elsewhere it says so and does not run, and with
//! `CI` set that is a failure).
#![cfg(feature = "postgres")]

#[path = "support/helpers.rs"]
mod helpers;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use saga_runtime::prelude::*;

use helpers::postgres;

const WORKFLOWS: u64 = 600;
const AT_ONCE: u64 = 32;

/// Every step execution: key, step, when it began.
#[derive(Default)]
struct Log {
    ran: Mutex<Vec<(String, &'static str, Instant)>>,
}

impl Log {
    fn ran(&self, key: &IdempotencyKey, step: &'static str) {
        let mut ran = self.ran.lock().unwrap();
        ran.push((key.as_str().to_owned(), step, Instant::now()));
    }
}

#[step(name = "one")]
async fn one(key: IdempotencyKey, log: Service<Log>, n: u64) -> Result<u64, StepError> {
    log.ran(&key, "one");
    Ok(n + 1)
}

#[step(name = "two")]
async fn two(key: IdempotencyKey, log: Service<Log>, n: u64) -> Result<u64, StepError> {
    log.ran(&key, "two");
    Ok(n + 1)
}

#[step(name = "three")]
async fn three(key: IdempotencyKey, log: Service<Log>, n: u64) -> Result<u64, StepError> {
    log.ran(&key, "three");
    Ok(n + 1)
}

#[workflow(name = "restart-load")]
async fn load(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let a = one(&ctx, n).await?;
    let b = two(&ctx, a).await?;
    Ok(three(&ctx, b).await?)
}

/// The local cluster's version, when this test may restart it: the test
/// database is the local server, `pg_ctlcluster` manages it, and this
/// process runs as root (as on the test machines and in CI).
fn restartable_cluster() -> Result<String, String> {
    let url = postgres::database_url();
    if !["@127.0.0.1", "@localhost", "@[::1]"]
        .iter()
        .any(|h| url.contains(h))
    {
        return Err(format!("the test database {url} is not the local server"));
    }
    let uid = std::process::Command::new("id").arg("-u").output();
    if !uid.is_ok_and(|o| o.stdout.trim_ascii() == b"0") {
        return Err("restarting the local PostgreSQL needs root".into());
    }
    let versions = std::fs::read_dir("/etc/postgresql")
        .map_err(|e| format!("no PostgreSQL cluster under /etc/postgresql ({e})"))?;
    versions
        .filter_map(|v| v.ok()?.file_name().into_string().ok())
        .next()
        .ok_or_else(|| "no PostgreSQL cluster under /etc/postgresql".into())
}

/// Restarts the local server in immediate mode; returns once it answers
/// again.
fn restart_the_server(version: &str) {
    let status = std::process::Command::new("pg_ctlcluster")
        .args([
            "--skip-systemctl-redirect",
            "-m",
            "immediate",
            version,
            "main",
            "restart",
        ])
        .status()
        .expect("pg_ctlcluster runs");
    assert!(status.success(), "pg_ctlcluster restart failed: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restarted_under_load_loses_no_acknowledged_step() {
    let version = match restartable_cluster() {
        Ok(version) => version,
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{why}: CI must run this test"
            );
            eprintln!(
                "NOT RUN: {why}; run it as root on a machine whose test database is the local PostgreSQL (CI does)"
            );
            return;
        }
    };
    let schema = postgres::fresh_schema("restart").await;
    let log = Arc::new(Log::default());
    let engine = Engine::builder()
        .postgres_schema(&schema)
        .provide_arc(log.clone())
        .register(load)
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e));
    let done = Arc::new(Mutex::new(HashMap::<String, Instant>::new()));
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..AT_ONCE {
        let (engine, done) = (engine.clone(), done.clone());
        callers.spawn(async move {
            for n in (caller..WORKFLOWS).step_by(AT_ONCE as usize) {
                let id = format!("w{n}");
                let run = engine.start(load, &id, n).await.expect("a start");
                assert_eq!(run.result().await.expect("a result"), n + 3, "{id}");
                done.lock().unwrap().insert(id, Instant::now());
            }
        });
    }
    // Under load: a third of the workflows are done.
    helpers::within("a third of the workflows", async {
        while done.lock().unwrap().len() < (WORKFLOWS / 3) as usize {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let restarted = Instant::now();
    tokio::task::spawn_blocking(move || restart_the_server(&version))
        .await
        .unwrap();
    helpers::within("every workflow", async {
        while let Some(caller) = callers.join_next().await {
            caller.expect("a caller");
        }
    })
    .await;

    let mut violations = acknowledged_steps_ran_again(&log, &done.lock().unwrap(), restarted);
    engine.close().await;
    // What the database kept: every journal whole, every workflow
    // complete, for a worker that reads it afresh.
    let fresh = Engine::builder()
        .postgres_schema(&schema)
        .connect_read_only(&postgres::database_url())
        .await
        .unwrap();
    for n in 0..WORKFLOWS {
        let id = format!("w{n}");
        match fresh.instance(&id).await {
            Ok(run) => match run.status().await {
                Ok(Status::Complete) => {}
                other => violations.push(format!("{id} is {other:?} in the database")),
            },
            Err(e) => violations.push(format!("{id} does not read back: {e}")),
        }
    }
    fresh.close().await;
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    postgres::drop_schema(&schema).await;
}

/// The steps that ran again after they were acknowledged: once the step
/// after them began, or their workflow's result returned (`done`), before
/// the restart.
fn acknowledged_steps_ran_again(
    log: &Log,
    done: &HashMap<String, Instant>,
    restarted: Instant,
) -> Vec<String> {
    let ran = log.ran.lock().unwrap();
    let mut runs: HashMap<&str, Vec<Instant>> = HashMap::new();
    let mut began: HashMap<(String, &str), Instant> = HashMap::new();
    for (key, step, at) in ran.iter() {
        runs.entry(key).or_default().push(*at);
        let instance = instance_of(key, step);
        began.entry((instance, *step)).or_insert(*at);
    }
    let mut violations: Vec<String> = Vec::new();
    for (key, step, _) in ran.iter() {
        let times = &runs[key.as_str()];
        if times.len() < 2 {
            continue;
        }
        let instance = instance_of(key, step);
        let acknowledged = match *step {
            "one" => began.get(&(instance.clone(), "two")),
            "two" => began.get(&(instance.clone(), "three")),
            _ => done.get(&instance),
        }
        .is_some_and(|at| *at < restarted);
        if acknowledged {
            violations.push(format!("{instance}: step {step} ran {} times", times.len()));
        }
    }
    violations.sort();
    violations.dedup();
    let reruns = runs.values().filter(|t| t.len() > 1).count();
    println!(
        "restart under load: {WORKFLOWS} workflows, {} done before the restart, {reruns} unacknowledged steps ran again",
        done.values().filter(|at| **at < restarted).count()
    );
    violations
}

/// The instance a key of `step` belongs to: keys are `instance:step`.
fn instance_of(key: &str, step: &str) -> String {
    match key.split_once(':') {
        Some((instance, _)) => instance.to_owned(),
        None => panic!("no instance in key {key:?} of step {step}"),
    }
}
