//! Stores for the `saga` binary to read: written by the real examples
//! (`cargo run -p saga-examples --example ..` with `SAGA_DATA`), or, for
//! instances still in flight, by a workflow here, through the public API.

#![allow(dead_code, unreachable_pub)]

pub mod webdriver;

// The runtime's harness, written once: its bounded waits.
// It names the runtime's `postgres` feature, which this crate has not: off here.
#[allow(unexpected_cfgs)]
#[path = "../../../saga-runtime/tests/support/helpers.rs"]
mod helpers;
pub(crate) use helpers::wait_until;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use saga_runtime::prelude::*;
use saga_runtime::queue::Queue;
use saga_runtime::schedule::{Schedule, Tick};
use saga_runtime::testing::TestClock;
use saga_runtime::{BoxFuture, Engine, RollbackInput, RollbackRegistration};

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let path =
            std::env::temp_dir().join(format!("saga-cli-test-{what}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh copy of the store `cargo run --example bank_transfer` writes
/// (the example runs once per test binary).
pub fn bank_transfer_store() -> TempDir {
    static TEMPLATE: OnceLock<TempDir> = OnceLock::new();
    let template = TEMPLATE.get_or_init(|| {
        // The example races: on its auto-advancing clock, transfer-42 can
        // sleep 7 days and time out its 7-day wait before `main` sends the
        // approval (then the transfer errors, or `send_event` finds it
        // finished and the example exits with an error); about 1 run in 7
        // here. These tests need the run the example means to show, so they
        // run it again when it lost.
        let mut last = String::new();
        for _ in 0..10 {
            let dir = TempDir::new("bank-transfer-template");
            match run_example("bank_transfer", dir.path()) {
                Ok(stdout) if stdout.contains("complete: Receipt") => return dir,
                Ok(stdout) => last = stdout,
                Err(stderr) => last = stderr,
            }
        }
        panic!("the bank_transfer example never completed transfer-42 in 10 runs; last:\n{last}");
    });
    let copy = TempDir::new("bank-transfer");
    copy_dir(template.path(), copy.path());
    copy
}

/// Runs `cargo run -p saga-examples --example <name>` with its store in
/// `dir`: what it printed, or its errors when it failed.
fn run_example(name: &str, dir: &Path) -> Result<String, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["run", "-q", "-p", "saga-examples", "--example", name])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .env("SAGA_DATA", dir)
        .output()
        .expect("cargo runs");
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Order {
    pub item: String,
}

/// Workflow `fulfil`: step `reserve`, sleep `cool-off` (1 hour), wait
/// `wait-payment` for an event `payment` (30 days).
pub fn fulfil() -> impl Workflow<Input = Order, Output = String> + Copy {
    workflow_fn("fulfil", |ctx: WorkflowContext, order: Order| async move {
        let item = order.item.clone();
        let reserved: String = ctx
            .step("reserve", StepConfig::default(), move |key| {
                let item = item.clone();
                async move { Ok(format!("reserved {item} ({key})")) }
            })
            .await?;
        ctx.sleep("cool-off", "1 hour").await?;
        let paid: u64 = ctx
            .wait_for_event("wait-payment", "payment", "30 days")
            .await?;
        Ok::<_, WorkflowError>(format!("{reserved}, paid {paid}"))
    })
}

/// A store where `order-7` of [`fulfil`] reserved, slept, and waits for
/// its payment. The store is closed when this returns.
pub fn waiting_store() -> TempDir {
    let dir = TempDir::new("waiting");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let fulfil = fulfil();
        let clock = TestClock::new();
        let engine = Engine::builder()
            .clock(clock.clone())
            .open(dir.path())
            .unwrap();
        let run = engine
            .start(
                fulfil,
                "order-7",
                Order {
                    item: "lamp".into(),
                },
            )
            .await
            .unwrap();
        clock.wait_for_sleepers(1).await;
        clock.advance(Duration::from_secs(3600));
        // The wait's timer is the second sleeper.
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let slots = run.inspect().await.unwrap().slots.len();
                if slots == 3 && run.status().await.unwrap() == Status::Waiting {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await
        .expect("the instance waits");
        drop(run);
        engine.close().await;
    });
    dir
}

/// Whether the refund of [`refund_order`] fails.
pub static REFUND_DOWN: AtomicBool = AtomicBool::new(true);

/// Workflow `refund-order`: step `charge` (compensated by a refund that
/// fails fatally while [`REFUND_DOWN`]), then the workflow fails.
pub fn refund_order() -> impl Workflow<Input = (), Output = ()> + Copy {
    workflow_fn("refund-order", |ctx: WorkflowContext, (): ()| async move {
        let refund = RollbackRegistration::new(
            StepConfig::default().retries(0),
            |input: RollbackInput<u64>| {
                let key = input.context().key().to_string();
                Box::pin(async move {
                    if REFUND_DOWN.load(Ordering::SeqCst) {
                        return Err(StepError::fatal(format!("the refund API is down ({key})")));
                    }
                    Ok(())
                }) as BoxFuture<Result<(), StepError>>
            },
        );
        ctx.step_with_rollback(
            "charge",
            StepConfig::default(),
            |_key| async { Ok(5u64) },
            refund,
        )
        .await?;
        Err::<(), _>(WorkflowError::new("out of stock"))
    })
}

/// A store where `order-9` of [`refund_order`] failed, and its refund
/// gave up.
pub fn rollback_failed_store() -> TempDir {
    let dir = TempDir::new("rollback-failed");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = Engine::builder()
            .clock(TestClock::auto_advancing())
            .open(dir.path())
            .unwrap();
        let run = engine.start(refund_order(), "order-9", ()).await.unwrap();
        let result = tokio::time::timeout(Duration::from_secs(30), run.result()).await;
        assert!(matches!(
            result,
            Ok(Err(saga_runtime::Error::WorkflowFailed {
                rollback_failure: Some(_),
                ..
            }))
        ));
        drop(run);
        engine.close().await;
    });
    dir
}

/// A store of three finished instances of workflow `echo`, tagged:
/// `tagged-1` and `tagged-2` with `customer=42`, `tagged-3` with
/// `customer=7` (and `tagged-2` started by `tagged-1`).
pub fn tagged_store() -> TempDir {
    let dir = TempDir::new("tagged");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let echo = workflow_fn("echo", |_ctx: WorkflowContext, n: u64| async move {
            Ok::<_, WorkflowError>(n)
        });
        let engine = Engine::open(dir.path()).unwrap();
        for (id, customer, parent) in [
            ("tagged-1", "42", None),
            ("tagged-2", "42", Some("tagged-1")),
            ("tagged-3", "7", None),
        ] {
            let mut options = saga_runtime::StartOptions::new().tag("customer", customer);
            if let Some(parent) = parent {
                options = options.parent(parent);
            }
            let run = engine.start_with(echo, id, 1, options).await.unwrap();
            tokio::time::timeout(Duration::from_secs(30), run.result())
                .await
                .unwrap()
                .unwrap();
        }
        engine.close().await;
    });
    dir
}

/// A store where `tour-1` (workflow `tour`) started child `tour-1.leg`
/// (workflow `leg`, step `fly` with a compensation), then failed: its
/// rollback undid the child, which ended `Compensated`.
pub fn nested_store() -> TempDir {
    let dir = TempDir::new("nested");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let leg = workflow_fn("leg", |ctx: WorkflowContext, (): ()| async move {
            let unfly =
                RollbackRegistration::new(StepConfig::default(), |input: RollbackInput<u64>| {
                    let _key = input.context().key().to_string();
                    Box::pin(async { Ok(()) }) as BoxFuture<Result<(), StepError>>
                });
            ctx.step_with_rollback(
                "fly",
                StepConfig::default(),
                |_key| async { Ok(1u64) },
                unfly,
            )
            .await?;
            Ok::<_, WorkflowError>(())
        });
        // A child that fails with nothing done: nothing to undo.
        let ship = workflow_fn("ship", |_ctx: WorkflowContext, (): ()| async move {
            Err::<(), _>(WorkflowError::new("the ship is cancelled"))
        });
        let tour = workflow_fn("tour", move |ctx: WorkflowContext, (): ()| async move {
            ctx.child("leg", leg, ()).await?;
            ctx.child("ship", ship, ()).await?;
            Ok::<(), WorkflowError>(())
        });
        let engine = Engine::builder()
            .clock(TestClock::auto_advancing())
            .register(leg)
            .register(ship)
            .register(tour)
            .open(dir.path())
            .unwrap();
        let run = engine.start(tour, "tour-1", ()).await.unwrap();
        let result = tokio::time::timeout(Duration::from_secs(30), run.result()).await;
        assert!(matches!(
            result,
            Ok(Err(saga_runtime::Error::WorkflowFailed { .. }))
        ));
        drop(run);
        engine.close().await;
    });
    dir
}

/// The admin endpoint of `engine` on a free loopback port, whose control
/// calls need `token`.
pub async fn serve_with_token(engine: &Engine, token: &str) -> saga_cli::AdminServer {
    saga_cli::Admin::new(engine)
        .token(token)
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

/// Returns the time of the tick that started it.
#[workflow(name = "remind")]
pub async fn remind(_ctx: WorkflowContext, at: i64) -> Result<i64, WorkflowError> {
    Ok(at)
}

/// Schedule `reminders`: [`remind`] every 15 minutes.
pub fn reminders() -> Schedule {
    Schedule::every("reminders", "15 minutes").start(remind, |tick: Tick| tick.unix_seconds())
}

/// Schedule `nightly`: [`remind`] at 02:00 UTC every day.
pub fn nightly() -> Schedule {
    Schedule::cron("nightly", "0 2 * * *").start(remind, |tick: Tick| tick.unix_seconds())
}

/// A store that keeps the schedules [`reminders`] and [`nightly`],
/// declared on a test clock from 2030-01-01T00:00:00Z, once `reminders`
/// fired its tick of 00:15 (`reminders.20300101T001500Z`, complete). The
/// store is closed when this returns.
pub fn schedules_store() -> TempDir {
    let dir = TempDir::new("schedules");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let clock = TestClock::new();
        let engine = Engine::builder()
            .clock(clock.clone())
            .schedule(reminders())
            .schedule(nightly())
            .open(dir.path())
            .unwrap();
        clock.advance(Duration::from_secs(15 * 60));
        wait_until("the tick of 00:15 to complete", || async {
            match engine.instance("reminders.20300101T001500Z").await {
                Ok(tick) => tick.status().await.unwrap() == Status::Complete,
                Err(_) => false,
            }
        })
        .await;
        wait_until("the schedule to note its last tick", || async {
            let listed = engine.schedules().list().await.unwrap();
            listed
                .iter()
                .all(|s| s.name != "reminders" || s.last_tick.is_some())
        })
        .await;
        engine.close().await;
    });
    dir
}

/// Holds its queue's slot until it receives "release" (7 days).
#[workflow(name = "hold-slot")]
pub async fn hold_slot(ctx: WorkflowContext, _n: u32) -> Result<(), WorkflowError> {
    let () = ctx.wait_for_event("release", "release", "7 days").await?;
    Ok(())
}

/// Returns at once.
#[workflow(name = "report")]
pub async fn report(_ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    Ok(n)
}

/// A store with two queues: on `bank-api` (concurrency 1), `transfer-1`
/// of [`hold_slot`] holds the slot and waits, `transfer-2` and
/// `transfer-3` are queued behind it; on `reports`, `report-1` of
/// [`report`] completed. The store is closed when this returns.
pub fn queued_store() -> TempDir {
    let dir = TempDir::new("queued");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = Engine::builder()
            .clock(TestClock::new())
            .queue(Queue::new("bank-api").concurrency(1))
            .queue(Queue::new("reports"))
            .register(hold_slot)
            .register(report)
            .open(dir.path())
            .unwrap();
        for (n, id) in (1..).zip(["transfer-1", "transfer-2", "transfer-3"]) {
            engine.start_on("bank-api", hold_slot, id, n).await.unwrap();
        }
        engine
            .start_on("reports", report, "report-1", 1)
            .await
            .unwrap();
        let status = |id: &'static str| {
            let engine = &engine;
            async move { engine.instance(id).await.unwrap().status().await.unwrap() }
        };
        wait_until(
            "transfer-1 to wait with the slot, report-1 to end",
            || async {
                status("transfer-1").await == Status::Waiting
                    && status("report-1").await == Status::Complete
            },
        )
        .await;
        assert_eq!(status("transfer-2").await, Status::Queued);
        assert_eq!(status("transfer-3").await, Status::Queued);
        engine.close().await;
    });
    dir
}

/// What one run of the binary did.
pub struct Saga {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `saga --db <db> <args..>`, in UTC.
pub fn saga(db: &Path, args: &[&str]) -> Saga {
    saga_in_zone(db, "UTC", args)
}

/// Runs `saga --db <db> <args..>` with `TZ` set to `zone`.
pub fn saga_in_zone(db: &Path, zone: &str, args: &[&str]) -> Saga {
    saga_with_env(db, &[("TZ", zone)], args)
}

/// Runs `saga --db <db> <args..>` in UTC, with these variables set (and
/// none of the color variables of the test's own environment).
pub fn saga_with_env(db: &Path, vars: &[(&str, &str)], args: &[&str]) -> Saga {
    let mut command = Command::new(env!("CARGO_BIN_EXE_saga"));
    command
        .arg("--db")
        .arg(db)
        .args(args)
        .env("TZ", "UTC")
        .env_remove("SAGA_DATABASE_URL");
    for var in ["NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE"] {
        command.env_remove(var);
    }
    let output = command
        .envs(vars.iter().copied())
        .output()
        .expect("the saga binary runs");
    Saga {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).expect("UTF-8 output"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 errors"),
    }
}

/// Runs `saga` and expects success.
pub fn ok(db: &Path, args: &[&str]) -> String {
    let run = saga(db, args);
    assert_eq!(
        run.code, 0,
        "saga {args:?} failed: {}{}",
        run.stdout, run.stderr
    );
    run.stdout
}

/// Runs `saga ... --json` and parses it.
pub fn json(db: &Path, args: &[&str]) -> serde_json::Value {
    let mut args = args.to_vec();
    args.push("--json");
    let out = ok(db, &args);
    let value: serde_json::Value = serde_json::from_str(&out).expect("--json output parses");
    assert_eq!(value["schema"], 1, "{out}");
    value
}

/// Runs `saga` and expects a one-line error with a non-zero exit.
pub fn fails(db: &Path, args: &[&str]) -> Saga {
    let run = saga(db, args);
    assert_ne!(run.code, 0, "saga {args:?} succeeded: {}", run.stdout);
    assert_eq!(
        run.stderr.lines().count(),
        1,
        "saga {args:?}: not one line: {:?}",
        run.stderr
    );
    assert!(run.stderr.starts_with("saga: "), "{:?}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{:?}", run.stderr);
    run
}
