//! Durable steps on PostgreSQL: workflows/s of 3-step workflows on one
//! worker, then on 1, 2 and 4 worker processes (this binary, re-executed)
//! at 64 at once each, beside a raw loop of synchronously committed
//! single-row inserts on the same database, and DBOS 3.4's figures for the
//! same workload on this machine class (from issue 12: 66 workflows/s one
//! at a time, 62 at 32 at once).
//!
//! `cargo bench -p saga-runtime --features postgres --bench postgres_steps`
//! (database: `SAGA_TEST_DATABASE_URL`, default the local test database).

mod support;

use std::time::Instant;

use saga_runtime::prelude::*;
use saga_runtime::workflow;
use support::postgres::{Workers, admin, drop_schema, fresh_schema, next_order, raw_commits, url};
use support::{Laps, STEPS, StepNanos, charge, confirm, cpu_time, header, reserve, row, thousands};

/// DBOS 3.4 (Python) on PostgreSQL 15, this machine class, the same
/// workload: one at a time, and 32 at once.
const DBOS_SEQUENTIAL: f64 = 66.0;
const DBOS_AT_32: f64 = 62.0;
/// (concurrency, workflows)
const ROUNDS: [(usize, usize); 3] = [(1, 500), (32, 3_000), (64, 4_000)];
/// Worker processes, each with 64 at once, and the workflows each runs.
const PROCESSES: [usize; 3] = [1, 2, 4];
const PER_PROCESS: usize = 3_000;
/// Set in a worker process: `schema:name`.
const WORKER_ENV: &str = "SAGA_BENCH_PG_WORKER";

#[workflow(name = "bench-pg")]
async fn three_steps(ctx: WorkflowContext, n: u64) -> Result<StepNanos, WorkflowError> {
    let mut laps = Laps::start();
    let reserved = reserve(&ctx, n).await?;
    laps.lap();
    let charged = charge(&ctx, reserved).await?;
    laps.lap();
    confirm(&ctx, charged).await?;
    laps.lap();
    Ok(laps.nanos())
}

/// What one round measured.
struct Round {
    workflows_per_second: f64,
    /// The process's CPU time per workflow (user and system), in
    /// microseconds: the engine's own cost, not the database's.
    cpu_micros_per_workflow: f64,
    /// Every step's latency, sorted.
    step_nanos: Vec<u64>,
}

impl Round {
    fn step_ms(&self, q: f64) -> f64 {
        let index = ((self.step_nanos.len() - 1) as f64 * q).round() as usize;
        self.step_nanos[index] as f64 / 1e6
    }
}

async fn workflows_per_second(
    engine: &Engine,
    concurrency: usize,
    total: usize,
    round: &str,
) -> Round {
    let started = Instant::now();
    let cpu = cpu_time();
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..concurrency {
        let engine = engine.clone();
        let round = round.to_owned();
        callers.spawn(async move {
            let mut nanos = Vec::new();
            for n in (caller..total).step_by(concurrency) {
                let run = engine
                    .start(three_steps, &format!("r{round}-{n}"), n as u64)
                    .await
                    .expect("start");
                nanos.extend(run.result().await.expect("a workflow completes"));
            }
            nanos
        });
    }
    let mut step_nanos = Vec::with_capacity(total * STEPS);
    while let Some(done) = callers.join_next().await {
        step_nanos.extend(done.expect("a caller"));
    }
    step_nanos.sort_unstable();
    Round {
        workflows_per_second: total as f64 / started.elapsed().as_secs_f64(),
        cpu_micros_per_workflow: cpu_time().saturating_sub(cpu).as_secs_f64() * 1e6 / total as f64,
        step_nanos,
    }
}

async fn connect(schema: &str) -> Engine {
    Engine::builder()
        .postgres_schema(schema)
        .register(three_steps)
        .connect(&url())
        .await
        .expect("connect")
}

/// A worker process: connects, warms up, says `ready`, waits for a line
/// on stdin, runs its share at 64 at once, says `done`.
fn worker_process(spec: &str) {
    let (schema, name) = spec.split_once(':').expect("schema:name");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = connect(schema).await;
        workflows_per_second(&engine, 32, 320, &format!("{name}-warm")).await;
        println!("ready");
        assert_eq!(next_order(), "go");
        workflows_per_second(&engine, 64, PER_PROCESS, name).await;
        engine.close().await;
        println!("done");
    });
}

/// Workflows/s of `processes` worker processes at once, 64 at once each:
/// from the moment all are ready and told to go to the last one done.
fn processes_per_second(schema: &str, processes: usize) -> f64 {
    let specs = (0..processes).map(|i| format!("{schema}:p{processes}w{i}"));
    let mut workers = Workers::spawn(WORKER_ENV, specs);
    workers.expect("ready");
    let started = Instant::now();
    workers.tell("go");
    workers.expect("done");
    let elapsed = started.elapsed();
    workers.wait();
    (processes * PER_PROCESS) as f64 / elapsed.as_secs_f64()
}

fn main() {
    if let Ok(spec) = std::env::var(WORKER_ENV) {
        worker_process(&spec);
        return;
    }
    if !support::wanted("postgres_steps") {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let schema = format!("saga_bench_{}", std::process::id());
        let client = admin().await;
        fresh_schema(&client, &schema).await;
        let raw = raw_commits(&client, &schema).await;
        let engine = connect(&schema).await;
        // Warm-up: connections, prepared statements, the runtime.
        workflows_per_second(&engine, 32, 320, "r0").await;

        header("PostgreSQL: 3-step workflows on one worker (workflows/s)");
        row(
            "raw: 1-row insert, synchronous commit",
            "commits/s",
            &thousands(raw),
            "1 durable write per round trip",
        );
        for (i, (concurrency, total)) in ROUNDS.into_iter().enumerate() {
            let round =
                workflows_per_second(&engine, concurrency, total, &format!("r{}", i + 1)).await;
            let figure = round.workflows_per_second;
            let dbos = match concurrency {
                1 => format!("{:.1}x DBOS ({DBOS_SEQUENTIAL})", figure / DBOS_SEQUENTIAL),
                32 => format!(
                    "{:.1}x DBOS ({DBOS_AT_32}); goal >= 10x",
                    figure / DBOS_AT_32
                ),
                _ => format!("{:.2} commits per workflow at raw speed", raw / figure),
            };
            let workload = format!("saga, 1 worker, {concurrency} at once");
            row(&workload, "workflows/s", &thousands(figure), &dbos);
            row(
                &workload,
                "CPU us/workflow",
                &format!("{:.0}", round.cpu_micros_per_workflow),
                "user+system of this process",
            );
            for (label, q) in [("p50 step latency", 0.5), ("p99 step latency", 0.99)] {
                row(&workload, label, &format!("{:.3} ms", round.step_ms(q)), "");
            }
        }
        engine.close().await;
        let mut one = 0.0;
        for processes in PROCESSES {
            let schema = schema.clone();
            let figure =
                tokio::task::spawn_blocking(move || processes_per_second(&schema, processes))
                    .await
                    .unwrap();
            if processes == 1 {
                one = figure;
            }
            row(
                &format!("saga, {processes} worker processes, 64 at once each"),
                "workflows/s",
                &thousands(figure),
                &format!("{:.2}x 1 process", figure / one),
            );
        }
        drop_schema(&client, &schema).await;
    });
}
