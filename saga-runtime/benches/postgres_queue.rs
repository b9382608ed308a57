//! Queues on PostgreSQL: workflows/s of 3-step workflows that one process
//! starts on a queue, taken by 1, 2 and 4 worker processes (this binary,
//! re-executed), beside the same workflows started with plain `start` on
//! one worker (which drives them itself: a plain start does not spread).
//!
//! In each round, worker 0 starts all the round's workflows from 64
//! callers without waiting for them, and every worker takes from the
//! queue (worker 0 too): the service that receives the traffic and its
//! replicas. The figure is the workflows over the time from `go` to the
//! last one ended, which the parent reads from the index (`ended_at`)
//! every few milliseconds. The queue has no limit (none is ever hit), or
//! a concurrency of 8, for scale. A raw loop of synchronously committed
//! single-row inserts runs first, for the disk of the day.
//!
//! `cargo bench -p saga-runtime --features postgres --bench postgres_queue`
//! (database: `SAGA_TEST_DATABASE_URL`, default the local test database).

mod support;

use std::time::{Duration, Instant};

use saga_runtime::prelude::*;
use saga_runtime::queue::Queue;
use saga_runtime::workflow;
use support::postgres::{Workers, admin, drop_schema, fresh_schema, next_order, raw_commits, url};
use support::{charge, confirm, header, reserve, row, thousands};

/// Workflows each round, and the callers that start them.
const WORKFLOWS: usize = 2_000;
const CALLERS: usize = 64;
const QUEUE: &str = "bench";
/// Passes over every workload; the median of each is printed.
const PASSES: usize = 3;
/// Set in a worker process: `schema:round:worker:mode`.
const WORKER_ENV: &str = "SAGA_BENCH_PG_QUEUE_WORKER";

#[workflow(name = "bench-pg-queued")]
async fn three_steps(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let reserved = reserve(&ctx, n).await?;
    let charged = charge(&ctx, reserved).await?;
    Ok(confirm(&ctx, charged).await?)
}

/// How a round starts its workflows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Plain,
    /// On the queue, without a limit.
    Open,
    /// On the queue, of concurrency 8.
    Eight,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Open => "open",
            Mode::Eight => "eight",
        }
    }

    fn parse(name: &str) -> Mode {
        match name {
            "plain" => Mode::Plain,
            "open" => Mode::Open,
            "eight" => Mode::Eight,
            other => panic!("no mode {other:?}"),
        }
    }
}

/// A worker process: connects, warms up, says `ready`; on `go`, worker 0
/// starts the round's workflows; on `stop`, it closes and says `done`.
fn worker_process(spec: &str) {
    let parts: Vec<&str> = spec.split(':').collect();
    let [schema, round, worker, mode] = parts[..] else {
        panic!("a spec schema:round:worker:mode, not {spec:?}");
    };
    let mode = Mode::parse(mode);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let queue = match mode {
            Mode::Eight => Queue::new(QUEUE).concurrency(8),
            Mode::Plain | Mode::Open => Queue::new(QUEUE),
        };
        let engine = Engine::builder()
            .postgres_schema(schema)
            .queue(queue)
            .register(three_steps)
            .connect(&url())
            .await
            .expect("connect");
        // Connections, prepared statements, the runtime.
        for n in 0..32 {
            let run = engine
                .start(three_steps, &format!("warm-{round}-{worker}-{n}"), n)
                .await
                .expect("a start");
            run.result().await.expect("a warm-up workflow");
        }
        println!("ready");
        assert_eq!(next_order(), "go");
        if worker == "0" {
            let mut callers = tokio::task::JoinSet::new();
            for caller in 0..CALLERS {
                let engine = engine.clone();
                let round = round.to_owned();
                callers.spawn(async move {
                    for n in (caller..WORKFLOWS).step_by(CALLERS) {
                        let id = format!("{round}-{n}");
                        match mode {
                            Mode::Plain => engine.start(three_steps, &id, n as u64).await.map(drop),
                            Mode::Open | Mode::Eight => engine
                                .start_on(QUEUE, three_steps, &id, n as u64)
                                .await
                                .map(drop),
                        }
                        .expect("a start");
                    }
                });
            }
            while let Some(done) = callers.join_next().await {
                done.expect("a caller");
            }
        }
        assert_eq!(next_order(), "stop");
        engine.close().await;
        println!("done");
    });
}

/// Workflows/s of one round: `processes` workers, worker 0 starting.
async fn round(
    client: &tokio_postgres::Client,
    schema: &str,
    round: &str,
    mode: Mode,
    processes: usize,
) -> f64 {
    let specs = (0..processes).map(|i| format!("{schema}:{round}:{i}:{}", mode.name()));
    let mut workers = Workers::spawn(WORKER_ENV, specs);
    let mut workers = tokio::task::spawn_blocking(move || {
        workers.expect("ready");
        workers
    })
    .await
    .unwrap();
    let ended = client
        .prepare(&format!(
            "SELECT count(*) FROM {schema}.instances WHERE ended_at IS NOT NULL AND id LIKE $1"
        ))
        .await
        .unwrap();
    let pattern = format!("{round}-%");
    let began = Instant::now();
    workers.tell("go");
    loop {
        let count: i64 = client.query_one(&ended, &[&pattern]).await.unwrap().get(0);
        if count as usize >= WORKFLOWS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rate = WORKFLOWS as f64 / began.elapsed().as_secs_f64();
    workers.tell("stop");
    tokio::task::spawn_blocking(move || {
        workers.expect("done");
        workers.wait();
    })
    .await
    .unwrap();
    rate
}

fn main() {
    if let Ok(spec) = std::env::var(WORKER_ENV) {
        worker_process(&spec);
        return;
    }
    if !support::wanted("postgres_queue") {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let schema = format!("saga_bench_queue_{}", std::process::id());
        let client = admin().await;
        fresh_schema(&client, &schema).await;
        // The schema's tables, before the first round polls them.
        Engine::builder()
            .postgres_schema(&schema)
            .connect(&url())
            .await
            .expect("connect")
            .close()
            .await;

        let raw = raw_commits(&client, &schema).await;
        // Each workload once per pass, the passes one after the other, so
        // a slow minute of the disk touches every workload alike.
        let workloads = [
            (Mode::Plain, 1),
            (Mode::Open, 1),
            (Mode::Open, 2),
            (Mode::Open, 4),
            (Mode::Eight, 1),
            (Mode::Eight, 4),
        ];
        let mut figures = vec![Vec::new(); workloads.len()];
        for pass in 0..PASSES {
            for (i, (mode, processes)) in workloads.into_iter().enumerate() {
                let name = format!("p{pass}w{i}");
                figures[i].push(round(&client, &schema, &name, mode, processes).await);
            }
        }
        let median = |figures: &mut Vec<f64>| {
            figures.sort_by(f64::total_cmp);
            figures[figures.len() / 2]
        };
        header(&format!(
            "PostgreSQL queues: {WORKFLOWS} workflows of 3 steps started by one process from {CALLERS} callers, median of {PASSES}"
        ));
        row(
            "raw: 1-row insert, synchronous commit",
            "commits/s",
            &thousands(raw),
            "1 durable write per round trip",
        );
        let plain = median(&mut figures[0]);
        for (i, (mode, processes)) in workloads.into_iter().enumerate() {
            let figure = median(&mut figures[i]);
            let workload = match mode {
                Mode::Plain => format!("plain start, {processes} worker"),
                Mode::Open => format!("start_on, no limit hit, {processes} worker(s)"),
                Mode::Eight => format!("start_on, concurrency 8, {processes} worker(s)"),
            };
            row(
                &workload,
                "workflows/s",
                &thousands(figure),
                &format!("{:.2}x plain start", figure / plain),
            );
        }
        drop_schema(&client, &schema).await;
    });
}
