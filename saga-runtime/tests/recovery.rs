//! Recovery after a real process is killed: a completed step never runs
//! again, unfinished instances resume on `Engine::open`, and a store in use
//! by another process is refused with `StoreLocked`, and a second open in
//! this process with `StoreOpenInThisProcess`.

#[path = "support/child.rs"]
mod child;
#[path = "support/helpers.rs"]
mod helpers;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use saga_runtime::Error;
use saga_runtime::inspect::ListFilter;
use saga_runtime::prelude::*;

use child::{DataDir, child_dir, report};
use helpers::within;

/// The callee the steps call: a log file beside the store, outside the
/// engine. Each line is appended and fsynced, so it survives the SIGKILL
/// that the engine's records are tested against.
struct CallLog {
    dir: PathBuf,
    /// Set in the first process: `notify` never returns, so the process is
    /// killed with two steps completed and one in flight.
    hang_notify: bool,
}

impl CallLog {
    fn record(&self, step: &str, key: &IdempotencyKey) {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("calls.log"))
            .expect("open call log");
        writeln!(log, "{step} {key}").expect("append to call log");
        log.sync_all().expect("fsync call log");
    }
}

fn calls(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// An engine on `store` whose steps call the log in `dir`.
fn engine(store: &Path, dir: &Path, hang_notify: bool) -> Engine {
    let log = CallLog {
        dir: dir.to_owned(),
        hang_notify,
    };
    Engine::builder().provide(log).open(store).unwrap()
}

#[step(name = "debit")]
async fn debit(key: IdempotencyKey, log: Service<CallLog>, amount: u64) -> Result<u64, StepError> {
    log.record("debit", &key);
    Ok(amount)
}

#[step(name = "credit")]
async fn credit(key: IdempotencyKey, log: Service<CallLog>, amount: u64) -> Result<u64, StepError> {
    log.record("credit", &key);
    Ok(amount)
}

#[step(name = "notify")]
async fn notify(key: IdempotencyKey, log: Service<CallLog>, amount: u64) -> Result<u64, StepError> {
    log.record("notify", &key);
    if log.hang_notify {
        report("in-notify");
        std::future::pending::<()>().await;
    }
    Ok(amount)
}

/// Three steps, each calling the log with its key.
#[workflow(name = "transfer")]
async fn transfer(ctx: WorkflowContext, amount: u64) -> Result<u64, WorkflowError> {
    let mut done = debit(&ctx, amount).await?;
    done += credit(&ctx, amount).await?;
    done += notify(&ctx, amount).await?;
    Ok(done)
}

/// A fresh data directory for `name`, removed when dropped.
fn data_dir(name: &str) -> DataDir {
    let dir = DataDir::new(&format!("recovery-{name}"));
    std::fs::create_dir_all(dir.path()).expect("create test dir");
    dir
}

#[tokio::test]
async fn a_step_completed_before_sigkill_never_runs_again() {
    if let Some(dir) = child_dir() {
        let engine = engine(&dir.join("store"), &dir, true);
        engine.start(transfer, "t-1", 5).await.unwrap();
        std::future::pending::<()>().await;
    }
    let dir = data_dir("sigkill");
    let dir = dir.path();
    let mut child = child::spawn("a_step_completed_before_sigkill_never_runs_again", dir);
    child.wait_for("in-notify");
    child.kill();

    let engine = engine(&dir.join("store"), dir, false);
    let instance = engine.instance("t-1").await.unwrap();
    assert!(!instance.status().await.unwrap().is_terminal());
    engine.register(transfer).unwrap();
    let total: u64 = within("the recovered instance", instance.result())
        .await
        .unwrap();
    assert_eq!(total, 15);
    let calls = calls(dir);
    let count = |prefix: &str| calls.iter().filter(|c| c.starts_with(prefix)).count();
    assert_eq!(count("debit t-1:debit"), 1, "{calls:?}");
    assert_eq!(count("credit t-1:credit"), 1, "{calls:?}");
    // The step in flight at the kill runs again, with the same key.
    assert_eq!(count("notify t-1:notify"), 2, "{calls:?}");
    engine.close().await;
}

#[tokio::test]
async fn a_second_open_of_a_directory_in_use_says_who_holds_it() {
    if let Some(dir) = child_dir() {
        match Engine::open(dir.join("store")) {
            Err(Error::StoreLocked { .. }) => report("open: locked"),
            Err(other) => report(&format!("open: {other}")),
            Ok(_) => report("open: opened"),
        }
        return;
    }
    let dir = data_dir("locked");
    let dir = dir.path();
    let engine = Engine::open(dir.join("store")).unwrap();
    // Another process…
    let mut child = child::spawn("a_second_open_of_a_directory_in_use_says_who_holds_it", dir);
    assert_eq!(child.wait_for("open: "), "locked");
    drop(child);
    // …and this one, a second time: it says this process has it open.
    match Engine::open(dir.join("store")) {
        Err(e @ Error::StoreOpenInThisProcess { .. }) => {
            assert!(
                e.to_string().contains("already open in this process"),
                "{e}"
            )
        }
        other => panic!("expected StoreOpenInThisProcess, got {other:?}"),
    }
    engine.close().await;
    // Released on close.
    Engine::open(dir.join("store")).unwrap().close().await;
}

#[tokio::test]
async fn an_instance_of_an_unregistered_workflow_waits_and_says_so() {
    if let Some(dir) = child_dir() {
        let engine = engine(&dir.join("store"), &dir, true);
        engine.start(transfer, "t-2", 1).await.unwrap();
        report("started");
        std::future::pending::<()>().await;
    }
    let dir = data_dir("unregistered");
    let dir = dir.path();
    let mut child = child::spawn(
        "an_instance_of_an_unregistered_workflow_waits_and_says_so",
        dir,
    );
    child.wait_for("started");
    child.kill();

    let engine = Engine::open(dir.join("store")).unwrap();
    let listed = engine
        .list(&ListFilter::all().unregistered())
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, "t-2");
    assert!(!listed[0].workflow_registered);
    assert!(!listed[0].status.is_terminal());
    match engine.instance("t-2").await.unwrap().result::<u64>().await {
        Err(Error::WorkflowNotRegistered { workflow, .. }) => assert_eq!(workflow, "transfer"),
        other => panic!("expected WorkflowNotRegistered, got {other:?}"),
    }
    engine.close().await;
}

#[tokio::test]
async fn subscribers_see_each_event_once_in_history_order() {
    let dir = data_dir("subscribe");
    let log = CallLog {
        dir: dir.path().to_owned(),
        hang_notify: false,
    };
    let engine = Engine::builder().provide(log).temporary().unwrap();
    let mut events = engine.subscribe();
    let run = engine.start(transfer, "t-3", 2).await.unwrap();
    assert_eq!(run.result().await.unwrap(), 6);
    let history = run.history().await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < history.len() {
        let event = within("the next event", events.recv()).await.unwrap();
        seen.push(event);
    }
    assert_eq!(seen, history);
    let seqs: Vec<u64> = seen.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..history.len() as u64).collect::<Vec<_>>());
}
