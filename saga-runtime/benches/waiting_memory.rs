//! Memory per waiting instance: 10,000 instances each sleeping "1 hour" on
//! a test clock (started 200 at a time), the process's resident memory
//! (VmRSS) measured before and after they all wait; then the clock moves on
//! and every one must wake. A sleeping instance holds no driver: it
//! hibernates, and is rebuilt from its journal when it wakes.
//!
//! Its own process, so that no other workload's freed memory is reused by
//! the instances measured; `durable_steps` prints the rest of the table.
//!
//! `cargo bench -p saga-runtime` (with the other benches), or `--bench waiting_memory`.

mod support;

use std::time::{Duration, Instant, SystemTime};

use saga_runtime::Instance;
use saga_runtime::inspect::ListFilter;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use support::{Scratch, header, row, thousands};

const INSTANCES: usize = 10_000;
/// Instances run before measuring, so the runtime, the store and the
/// allocator have their steady-state overhead already.
const WARM_UP: usize = 200;
/// Instances started at once.
const BATCH: usize = 200;

/// No raw loop runs in this process: these figures stand alone.
const NO_RAW: &str = "(no raw figure)";

/// The process's resident set size in bytes, from /proc/self/status.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("a VmRSS line (Linux only)");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kib * 1024
}

fn nap() -> impl Workflow<Input = (), Output = SystemTime> + Copy {
    workflow_fn("nap", |ctx: WorkflowContext, (): ()| async move {
        ctx.sleep("nap", "1 hour").await?;
        Ok::<_, WorkflowError>(ctx.now().await)
    })
}

/// Starts `ids` concurrently and returns their handles.
async fn start_all(engine: &Engine, ids: impl Iterator<Item = String>) -> Vec<Instance> {
    let mut starts = tokio::task::JoinSet::new();
    for id in ids {
        let engine = engine.clone();
        starts.spawn(async move { engine.start(nap(), &id, ()).await });
    }
    let mut runs = Vec::new();
    while let Some(started) = starts.join_next().await {
        let run = started.expect("start task").expect("start");
        runs.push(run.instance().clone());
    }
    runs
}

async fn wake_all(clock: &TestClock, runs: &[Instance]) -> Duration {
    let woke_at = Instant::now();
    let expected = saga_runtime::time::Clock::now(clock) + Duration::from_secs(60 * 60);
    clock.advance(Duration::from_secs(60 * 60));
    for run in runs {
        let at: SystemTime = run.result().await.expect("a woken instance completes");
        assert_eq!(at, expected, "{} woke at the hour", run.id());
    }
    woke_at.elapsed()
}

async fn measure() {
    let scratch = Scratch::new("waiting");
    let clock = TestClock::new();
    let engine = Engine::builder()
        .clock(clock.clone())
        .register(nap())
        .open(scratch.path())
        .expect("open the store");

    let warm = start_all(&engine, (0..WARM_UP).map(|i| format!("warm-{i}"))).await;
    clock.wait_for_sleepers(WARM_UP).await;
    wake_all(&clock, &warm).await;
    drop(warm);

    let before = rss_bytes();
    let started_at = Instant::now();
    // In batches, each asleep before the next starts: what is measured is
    // what a sleeping instance keeps, not the peak of 10,000 starting at
    // once (freed memory stays in the allocator, and in the RSS).
    let mut runs = Vec::with_capacity(INSTANCES);
    for batch in 0..INSTANCES / BATCH {
        let ids = (batch * BATCH..(batch + 1) * BATCH).map(|i| format!("nap-{i}"));
        runs.extend(start_all(&engine, ids).await);
        clock.wait_for_sleepers(runs.len()).await;
    }
    let start_time = started_at.elapsed();
    let waiting = engine
        .list(&ListFilter::all().status(Status::Waiting))
        .await
        .expect("list");
    assert_eq!(waiting.len(), INSTANCES, "every instance waits");
    drop(waiting);
    let after = rss_bytes();

    let workload = format!("{} asleep on a test clock", thousands(INSTANCES as f64));
    let per_instance = after.saturating_sub(before) / INSTANCES as u64;
    let mib = |bytes: u64| bytes as f64 / 1048576.0;
    row(
        &workload,
        "resident bytes/instance",
        &thousands(per_instance as f64),
        "(target < 2,048)",
    );
    let rss = format!("{:.1} -> {:.1} MiB", mib(before), mib(after));
    row(&workload, "RSS before -> asleep", &rss, NO_RAW);
    let started = INSTANCES as f64 / start_time.as_secs_f64();
    row(
        &workload,
        "started+asleep instances/s",
        &thousands(started),
        NO_RAW,
    );

    let wake_time = wake_all(&clock, &runs).await;
    let woken = INSTANCES as f64 / wake_time.as_secs_f64();
    row(
        &workload,
        "woken+completed instances/s",
        &thousands(woken),
        NO_RAW,
    );
    assert_eq!(clock.sleepers(), 0);
    drop(runs);
    engine.close().await;
}

fn main() {
    if !support::wanted("waiting_memory") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    header("sleeping instances: resident memory, measured in a process of its own");
    runtime.block_on(measure());
    runtime.block_on(event_cost());
}

#[workflow(name = "await-approval")]
async fn await_approval(ctx: WorkflowContext, (): ()) -> Result<String, WorkflowError> {
    let approval: String = ctx
        .wait_for_event("wait-approval", "approval", "7 days")
        .await?;
    Ok(approval)
}

/// What an event to a waiting instance costs as its events pile up: 10
/// batches of 200 events it does not wait for, the quickest of the first
/// three batches against the quickest of the last three (one slowed by a
/// neighbour's build does not decide). Its state stays cached, so the
/// 2,000th costs what the first did.
async fn event_cost() {
    const BATCH: usize = 200;
    const BATCHES: usize = 10;
    let engine = Engine::builder()
        .clock(TestClock::new())
        .temporary()
        .expect("a temporary store");
    let run = engine
        .start(await_approval, "busy", ())
        .await
        .expect("start");
    while run.status().await.expect("status") != Status::Waiting {
        tokio::task::yield_now().await;
    }
    let noise = "x".repeat(100);
    let mut batches = Vec::new();
    for _ in 0..BATCHES {
        let started = Instant::now();
        for _ in 0..BATCH {
            engine
                .send_event("busy", "noise", &noise)
                .await
                .expect("send");
        }
        batches.push(started.elapsed());
    }
    let first = *batches[..3].iter().min().expect("batches");
    let last = *batches[BATCHES - 3..].iter().min().expect("batches");
    let per_event = |batch: Duration| format!("{:.1} us", batch.as_secs_f64() * 1e6 / BATCH as f64);
    let workload = "2,000 events to a waiting instance";
    row(
        workload,
        "per event, events 1-600",
        &per_event(first),
        NO_RAW,
    );
    let ratio = last.as_secs_f64() / first.as_secs_f64();
    row(
        workload,
        "per event, events 1,401-2,000",
        &per_event(last),
        &format!("({ratio:.2}x the first; target <= 2.00x)"),
    );
    engine
        .send_event("busy", "approval", "yes")
        .await
        .expect("send");
    assert_eq!(run.result().await.expect("result"), "yes");
    engine.close().await;
}
