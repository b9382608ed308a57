//! Recovery after a real process is killed: a completed step never runs
//! again, unfinished instances resume on `Engine::open`, and a store in use
//! by another process is refused with `StoreLocked`.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use saga_runtime::prelude::*;
use saga_runtime::{Error, ListFilter};

const ROLE: &str = "SAGA_RECOVERY_ROLE";
const DIR: &str = "SAGA_RECOVERY_DIR";

/// Appends one line to the callee's log, outside the engine, and fsyncs it:
/// it survives the SIGKILL that the engine's records are tested against.
fn record_call(dir: &Path, line: &str) {
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("calls.log"))
        .expect("open call log");
    writeln!(log, "{line}").expect("append to call log");
    log.sync_all().expect("fsync call log");
}

fn calls(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Three steps; in the first process the third hangs, so the process is
/// killed with two steps completed and one in flight.
fn transfer(dir: PathBuf, hang_last: bool) -> impl Workflow<Input = u64, Output = u64> + Copy {
    let dir: &'static Path = Box::leak(dir.into_boxed_path());
    workflow_fn(
        "transfer",
        move |ctx: WorkflowContext, amount: u64| async move {
            let mut done = 0;
            for name in ["debit", "credit", "notify"] {
                done += ctx
                    .step(name, StepConfig::default(), move |key| async move {
                        record_call(dir, &format!("{name} {key}"));
                        if name == "notify" && hang_last {
                            std::future::pending::<()>().await;
                        }
                        Ok(amount)
                    })
                    .await?;
            }
            Ok::<_, WorkflowError>(done)
        },
    )
}

fn data_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("saga-recovery-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create test dir");
    dir
}

fn spawn_child(test: &str, role: &str, dir: &Path) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(DIR, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child")
}

/// Waits (bounded) until the child prints `line`.
fn wait_for_line(child: &mut Child, line: &str) {
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let wanted = line.to_owned();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            if l.contains(&wanted) {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("child never printed {line:?}"));
}

fn child_role() -> Option<(String, PathBuf)> {
    let role = std::env::var(ROLE).ok()?;
    let dir = PathBuf::from(std::env::var(DIR).ok()?);
    Some((role, dir))
}

#[tokio::test]
async fn a_step_completed_before_sigkill_never_runs_again() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "transfer");
        let engine = Engine::open(dir.join("store")).unwrap();
        engine
            .start(transfer(dir.clone(), true), "t-1", 5)
            .await
            .unwrap();
        loop {
            if calls(&dir).iter().any(|c| c.starts_with("notify")) {
                println!("IN-NOTIFY");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let dir = data_dir("sigkill");
    let mut child = spawn_child(
        "a_step_completed_before_sigkill_never_runs_again",
        "transfer",
        &dir,
    );
    wait_for_line(&mut child, "IN-NOTIFY");
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");

    let engine = Engine::open(dir.join("store")).unwrap();
    let instance = engine.instance("t-1").await.unwrap();
    assert!(!instance.status().await.unwrap().is_terminal());
    engine.register(transfer(dir.clone(), false)).unwrap();
    let total: u64 = tokio::time::timeout(Duration::from_secs(30), instance.result())
        .await
        .expect("recovered instance finished")
        .unwrap();
    assert_eq!(total, 15);
    let calls = calls(&dir);
    let count = |prefix: &str| calls.iter().filter(|c| c.starts_with(prefix)).count();
    assert_eq!(count("debit t-1:debit"), 1, "{calls:?}");
    assert_eq!(count("credit t-1:credit"), 1, "{calls:?}");
    // The step in flight at the kill runs again, with the same key.
    assert_eq!(count("notify t-1:notify"), 2, "{calls:?}");
    engine.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_second_open_of_a_directory_in_use_is_store_locked() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "second-open");
        match Engine::open(dir.join("store")) {
            Err(Error::StoreLocked { .. }) => println!("LOCKED"),
            Err(other) => println!("OTHER {other}"),
            Ok(_) => println!("OPENED"),
        }
        return;
    }
    let dir = data_dir("locked");
    let engine = Engine::open(dir.join("store")).unwrap();
    // Another process…
    let mut child = spawn_child(
        "a_second_open_of_a_directory_in_use_is_store_locked",
        "second-open",
        &dir,
    );
    wait_for_line(&mut child, "LOCKED");
    child.wait().expect("reap the child");
    // …and this one, a second time.
    match Engine::open(dir.join("store")) {
        Err(e @ Error::StoreLocked { .. }) => {
            assert!(e.to_string().contains("locked by another process"), "{e}")
        }
        other => panic!("expected StoreLocked, got {other:?}"),
    }
    engine.close().await;
    // Released on close.
    Engine::open(dir.join("store")).unwrap().close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_instance_of_an_unregistered_workflow_waits_and_says_so() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "unregistered");
        let engine = Engine::open(dir.join("store")).unwrap();
        engine
            .start(transfer(dir.clone(), true), "t-2", 1)
            .await
            .unwrap();
        println!("STARTED");
        std::future::pending::<()>().await;
    }
    let dir = data_dir("unregistered");
    let mut child = spawn_child(
        "an_instance_of_an_unregistered_workflow_waits_and_says_so",
        "unregistered",
        &dir,
    );
    wait_for_line(&mut child, "STARTED");
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");

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
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn subscribers_see_each_event_once_in_history_order() {
    let engine = Engine::temporary().unwrap();
    let mut events = engine.subscribe();
    let dir = data_dir("subscribe");
    let run = engine
        .start(transfer(dir.clone(), false), "t-3", 2)
        .await
        .unwrap();
    assert_eq!(run.result().await.unwrap(), 6);
    let history = run.history().await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < history.len() {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("event delivered")
            .unwrap();
        seen.push(event);
    }
    assert_eq!(seen, history);
    let seqs: Vec<u64> = seen.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..history.len() as u64).collect::<Vec<_>>());
    let _ = std::fs::remove_dir_all(&dir);
}
