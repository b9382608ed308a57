//! A process killed in the middle of compensation resumes it exactly where
//! it stopped.
//!
//! Each test re-executes its own test binary as a child process (the child
//! role is selected by an environment variable naming the data directory).
//! The child runs a workflow whose steps all have compensations, fails it,
//! and blocks inside a chosen compensation, which tells the parent so; the
//! parent SIGKILLs it there, opens the same directory, registers the
//! workflow and checks how the rollback finished. The workflows are
//! written with `#[workflow]`, `#[step]` and `#[rollback]`; the callee is
//! a service the engine provides to them.
//!
//! The side effects go to a fake callee outside the engine: append-only
//! files, fsynced, that record every call (`calls`) and apply each
//! idempotency key once (`applied`), as a payment provider would.

#[path = "support/child.rs"]
mod child;
#[path = "support/helpers.rs"]
mod helpers;

use std::fs::OpenOptions;
use std::future::pending;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use saga_runtime::inspect::{EventKind, ListFilter};
use saga_runtime::prelude::*;
use saga_runtime::{Error, FailureKind};

use child::{DataDir, child_dir, report};
use helpers::{kinds, within};

const INSTANCE: &str = "order-1";

/// Which process is calling the callee.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// The process that is killed.
    BeforeCrash,
    /// The process that recovers.
    AfterCrash,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::BeforeCrash => "before",
            Phase::AfterCrash => "after",
        }
    }
}

/// The fake service the workflow talks to, living in files beside the
/// store; provided to the engine, taken by the steps and compensations.
struct Callee {
    dir: PathBuf,
    phase: Phase,
    /// The compensation (by step name) that blocks forever before the
    /// crash, after it applied its effect and told the parent.
    blocks_in: String,
}

/// One line of the `calls` file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CallLine {
    phase: String,
    kind: String,
    key: String,
    /// What the compensation saw: output and cause.
    seen: String,
}

impl Callee {
    /// Records the call, then applies `key`'s effect unless it was applied
    /// before.
    fn call(&self, kind: &str, key: &str, seen: &str) {
        append(
            &self.dir.join("calls"),
            &format!("{}|{kind}|{key}|{seen}", self.phase.as_str()),
        );
        if !applied(&self.dir).iter().any(|k| k == key) {
            append(&self.dir.join("applied"), key);
        }
    }

    /// A forward step's call: with its key, returning `value`.
    fn forward(&self, key: &IdempotencyKey, value: u64) -> u64 {
        self.call("forward", key.as_str(), "");
        value
    }

    /// A compensation's call, with its own key; before the crash, the one
    /// of step `blocks_in` then tells the parent and blocks forever.
    async fn compensate(&self, step: &str, ctx: &RollbackContext<'_, u64>) {
        let seen = format!("output={:?} cause={}", ctx.output(), ctx.cause());
        self.call("rollback", ctx.key().as_str(), &seen);
        if self.phase == Phase::BeforeCrash && self.blocks_in == step {
            report(&format!("blocked in {step}"));
            pending::<()>().await;
        }
    }
}

fn append(path: &Path, line: &str) {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
    file.sync_all().unwrap();
}

fn lines(path: &Path) -> Vec<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.lines().map(str::to_owned).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("reading {path:?}: {e}"),
    }
}

fn applied(dir: &Path) -> Vec<String> {
    lines(&dir.join("applied"))
}

fn calls(dir: &Path) -> Vec<CallLine> {
    lines(&dir.join("calls"))
        .into_iter()
        .map(|line| {
            let mut parts = line.splitn(4, '|').map(str::to_owned);
            let mut next = || parts.next().unwrap_or_default();
            CallLine {
                phase: next(),
                kind: next(),
                key: next(),
                seen: next(),
            }
        })
        .collect()
}

#[step(name = "reserve-stock", rollback = undo_reserve_stock)]
async fn reserve_stock(
    key: IdempotencyKey,
    callee: Service<Callee>,
    value: u64,
) -> Result<u64, StepError> {
    Ok(callee.forward(&key, value))
}

#[rollback]
async fn undo_reserve_stock(
    ctx: RollbackContext<'_, u64>,
    callee: Service<Callee>,
) -> Result<(), StepError> {
    callee.compensate("reserve-stock", &ctx).await;
    Ok(())
}

#[step(name = "charge-card", rollback = undo_charge_card)]
async fn charge_card(
    key: IdempotencyKey,
    callee: Service<Callee>,
    amount: u64,
) -> Result<u64, StepError> {
    Ok(callee.forward(&key, amount))
}

#[rollback]
async fn undo_charge_card(
    ctx: RollbackContext<'_, u64>,
    callee: Service<Callee>,
) -> Result<(), StepError> {
    callee.compensate("charge-card", &ctx).await;
    Ok(())
}

#[step(name = "create-shipment", rollback = undo_create_shipment)]
async fn create_shipment(
    key: IdempotencyKey,
    callee: Service<Callee>,
    value: u64,
) -> Result<u64, StepError> {
    Ok(callee.forward(&key, value))
}

#[rollback]
async fn undo_create_shipment(
    ctx: RollbackContext<'_, u64>,
    callee: Service<Callee>,
) -> Result<(), StepError> {
    callee.compensate("create-shipment", &ctx).await;
    Ok(())
}

#[step(name = "send-confirmation", read_only, retries = 0)]
async fn send_confirmation() -> Result<(), StepError> {
    Err(StepError::fatal("the mailer rejected the address"))
}

/// Three steps with compensations, then a step that fails for good.
#[workflow(name = "order")]
async fn order(ctx: WorkflowContext, amount: u64) -> Result<u64, WorkflowError> {
    let stock = reserve_stock(&ctx, 1).await?;
    let charge = charge_card(&ctx, amount).await?;
    let shipment = create_shipment(&ctx, 3).await?;
    send_confirmation(&ctx).await?;
    Ok(stock + charge + shipment)
}

/// One step with a compensation that completes, then a second one that is
/// called and not awaited: the workflow fails before its body ever runs.
#[workflow(name = "hasty")]
async fn hasty(ctx: WorkflowContext, amount: u64) -> Result<u64, WorkflowError> {
    reserve_stock(&ctx, amount).await?;
    let _called = charge_card(&ctx, amount);
    Err(WorkflowError::new("the cart expired"))
}

/// A fresh directory for `test`, removed when dropped.
fn data_dir(test: &str) -> DataDir {
    let dir = DataDir::new(&format!("rollback-crash-{test}"));
    std::fs::create_dir_all(dir.path()).unwrap();
    dir
}

/// Runs the test `test` as a child in `dir` until its compensation of
/// `step` blocks, then SIGKILLs it.
fn run_child_until_blocked(test: &str, dir: &Path, step: &str) {
    std::fs::write(dir.join("blocks-in"), step).unwrap();
    let mut child = child::spawn(test, dir);
    assert_eq!(child.wait_for("blocked in "), step);
    // SIGKILL: no destructor, no flush, no goodbye.
    child.kill();
}

/// The child role: start the instance and let it run until it is killed.
fn run_child<W: Workflow<Input = u64, Output = u64>>(dir: &Path, workflow: W) {
    // Never outlive a parent that died.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(120));
        std::process::exit(3);
    });
    let callee = Callee {
        dir: dir.to_owned(),
        phase: Phase::BeforeCrash,
        blocks_in: std::fs::read_to_string(dir.join("blocks-in")).unwrap(),
    };
    // One thread: the order of the driver and of step tasks is fixed.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcome = runtime.block_on(async move {
        let engine = Engine::builder()
            .provide(callee)
            .open(dir.join("store"))
            .unwrap();
        let run = engine.start(workflow, INSTANCE, 100).await.unwrap();
        run.result().await
    });
    eprintln!("the child finished instead of blocking: {outcome:?}");
    std::process::exit(2);
}

/// The parent's second life: open the directory, check the instance waits
/// in `RollingBack`, register the workflow and wait for the rollback to
/// finish. Returns the result and the history.
fn recover<W: Workflow<Input = u64, Output = u64>>(
    dir: &Path,
    workflow: W,
) -> (Result<u64, Error>, Vec<EventKind>) {
    let callee = Callee {
        dir: dir.to_owned(),
        phase: Phase::AfterCrash,
        blocks_in: String::new(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let engine = Engine::builder()
            .provide(callee)
            .open(dir.join("store"))
            .unwrap();
        let instance = engine.instance(INSTANCE).await.unwrap();
        assert_eq!(instance.status().await.unwrap(), Status::RollingBack);
        let waiting = engine
            .list(&ListFilter::all().unregistered())
            .await
            .unwrap();
        assert_eq!(waiting.len(), 1);
        assert_eq!(waiting[0].status, Status::RollingBack);

        engine.register(workflow).unwrap();
        let result = within("the rollback after recovery", instance.result::<u64>()).await;
        let history = kinds(&instance).await;
        engine.close().await;
        (result, history)
    })
}

fn count(history: &[EventKind], wanted: impl Fn(&EventKind) -> bool) -> usize {
    history.iter().filter(|k| wanted(k)).count()
}

fn rollback_steps_completed(history: &[EventKind]) -> Vec<String> {
    history
        .iter()
        .filter_map(|k| match k {
            EventKind::RollbackStepCompleted { step, .. } => Some(step.clone()),
            _ => None,
        })
        .collect()
}

fn key(step: &str) -> String {
    format!("{INSTANCE}:{step}")
}

fn rollback_key(step: &str) -> String {
    format!("{INSTANCE}:rollback:{step}")
}

/// The crash test: three compensations; the first to run (the
/// third step's) completes, the process dies in the second; after restart
/// the completed one is not called again, the other two run once each in
/// reverse start order, no forward step runs again, and the keys are the
/// same as before the crash.
#[test]
fn a_crash_in_the_second_compensation_resumes_after_the_completed_one() {
    const TEST: &str = "a_crash_in_the_second_compensation_resumes_after_the_completed_one";
    if let Some(dir) = child_dir() {
        return run_child(&dir, order);
    }
    let dir = data_dir("second");
    let dir = dir.path();
    run_child_until_blocked(TEST, dir, "charge-card");

    // Before the crash: every forward step ran once, the third step's
    // compensation completed, the second's applied its effect and hung.
    let forward_keys = [
        key("reserve-stock"),
        key("charge-card"),
        key("create-shipment"),
    ];
    let mut expected_applied: Vec<String> = forward_keys.to_vec();
    expected_applied.push(rollback_key("create-shipment"));
    expected_applied.push(rollback_key("charge-card"));
    assert_eq!(applied(dir), expected_applied);
    let before = calls(dir);

    let (result, history) = recover(dir, order);

    // The instance ends Errored with the original error.
    match result {
        Err(Error::WorkflowFailed {
            failure,
            rollback_failure: None,
            ..
        }) => {
            assert_eq!(
                failure.kind(),
                &FailureKind::Step {
                    step: "send-confirmation".into()
                }
            );
            assert!(
                failure
                    .message()
                    .contains("the mailer rejected the address"),
                "{failure}"
            );
        }
        other => panic!("expected the original failure, got {other:?}"),
    }

    // Every call the callee saw, across both processes.
    let all = calls(dir);
    assert_eq!(all[..before.len()], before[..]);
    let summary: Vec<_> = all
        .iter()
        .map(|c| (c.phase.as_str(), c.kind.as_str(), c.key.clone()))
        .collect();
    assert_eq!(
        summary,
        [
            ("before", "forward", key("reserve-stock")),
            ("before", "forward", key("charge-card")),
            ("before", "forward", key("create-shipment")),
            ("before", "rollback", rollback_key("create-shipment")),
            ("before", "rollback", rollback_key("charge-card")),
            // After the crash: the completed compensation is not called
            // again, no forward step runs, the interrupted compensation
            // runs again with the same key, then the first step's.
            ("after", "rollback", rollback_key("charge-card")),
            ("after", "rollback", rollback_key("reserve-stock")),
        ]
    );
    // The interrupted compensation saw the same output and cause both times.
    assert_eq!(all[4].seen, all[5].seen);
    assert!(
        all[5].seen.starts_with("output=Some(100) cause="),
        "{}",
        all[5].seen
    );
    assert!(all[5].seen.contains("the mailer rejected the address"));
    assert!(
        all[6].seen.starts_with("output=Some(1) cause="),
        "{}",
        all[6].seen
    );

    // The callee applied every key once, in order.
    expected_applied.push(rollback_key("reserve-stock"));
    assert_eq!(applied(dir), expected_applied);

    // History: each forward step started once, one rollback, each
    // compensation completed once in reverse start order, the end last.
    for step in [
        "reserve-stock",
        "charge-card",
        "create-shipment",
        "send-confirmation",
    ] {
        assert_eq!(
            count(
                &history,
                |k| matches!(k, EventKind::StepStarted { step: s, .. } if s == step)
            ),
            1,
            "{step}: {history:?}"
        );
    }
    assert_eq!(
        count(&history, |k| matches!(k, EventKind::RollbackStarted { .. })),
        1
    );
    assert_eq!(
        rollback_steps_completed(&history),
        ["create-shipment", "charge-card", "reserve-stock"]
    );
    // Each compensation's start is recorded once: the interrupted one
    // resumed after the crash, it did not start over.
    for step in ["create-shipment", "charge-card", "reserve-stock"] {
        assert_eq!(
            count(&history, |k| matches!(
                k,
                EventKind::RollbackStepStarted { step: s, .. } if s == step
            )),
            1,
            "{step}: {history:?}"
        );
    }
    assert!(history.contains(&EventKind::RollbackCompleted));
    assert!(
        matches!(history.last(), Some(EventKind::InstanceErrored { error }) if error.contains("mailer")),
        "{history:?}"
    );

    let _ = std::fs::remove_dir_all(dir);
}

/// A step that was called (so it started, and is eligible) but whose body
/// never ran when the workflow failed: its compensation must survive a
/// crash too, although the step left no record of its own.
#[test]
fn a_crash_in_the_compensation_of_a_step_that_never_ran_resumes_it() {
    const TEST: &str = "a_crash_in_the_compensation_of_a_step_that_never_ran_resumes_it";
    if let Some(dir) = child_dir() {
        return run_child(&dir, hasty);
    }
    let dir = data_dir("never-ran");
    let dir = dir.path();
    run_child_until_blocked(TEST, dir, "charge-card");
    let before = calls(dir);
    let summary: Vec<_> = before
        .iter()
        .map(|c| (c.kind.as_str(), c.key.clone()))
        .collect();
    assert_eq!(
        summary,
        [
            ("forward", key("reserve-stock")),
            ("rollback", rollback_key("charge-card")),
        ],
        "the child's single thread never ran the second step's body"
    );

    let (result, history) = recover(dir, hasty);
    match result {
        Err(Error::WorkflowFailed {
            failure,
            rollback_failure: None,
            ..
        }) => assert_eq!(failure.message(), "the cart expired"),
        other => panic!("expected the original failure, got {other:?}"),
    }
    let after: Vec<_> = calls(dir)[before.len()..]
        .iter()
        .map(|c| (c.phase.clone(), c.key.clone(), c.seen.clone()))
        .collect();
    assert_eq!(
        after,
        [
            (
                "after".to_string(),
                rollback_key("charge-card"),
                "output=None cause=the cart expired".to_string()
            ),
            (
                "after".to_string(),
                rollback_key("reserve-stock"),
                "output=Some(100) cause=the cart expired".to_string()
            ),
        ]
    );
    assert_eq!(
        rollback_steps_completed(&history),
        ["charge-card", "reserve-stock"]
    );
    assert_eq!(
        applied(dir),
        [
            key("reserve-stock"),
            rollback_key("charge-card"),
            rollback_key("reserve-stock")
        ]
    );
    let _ = std::fs::remove_dir_all(dir);
}
