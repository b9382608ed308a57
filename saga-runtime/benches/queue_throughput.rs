//! Queues: workflows/s of 3-step workflows started on a queue whose limit
//! is never hit, beside the same workflows started with plain `start`, on
//! sled, in the same run on the same disk; and one row with the limit hit
//! (concurrency 8), for scale.
//!
//! `cargo bench -p saga-runtime --bench queue_throughput`

mod support;

use std::time::Instant;

use saga_runtime::prelude::*;
use saga_runtime::queue::Queue;
use saga_runtime::workflow;
use support::{Scratch, charge, confirm, header, reserve, row, thousands};

/// Concurrent callers, and workflows each round.
const CALLERS: usize = 64;
const WORKFLOWS: usize = 4_000;
/// Rounds of each workload; the median is printed.
const ROUNDS: usize = 3;

#[workflow(name = "bench-queued")]
async fn three_steps(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let reserved = reserve(&ctx, n).await?;
    let charged = charge(&ctx, reserved).await?;
    Ok(confirm(&ctx, charged).await?)
}

/// How the workload starts its instances.
#[derive(Clone, Copy)]
enum Start {
    Plain,
    /// On the queue `bench`, of this concurrency.
    Queued(u32),
}

/// Workflows/s of one round.
async fn round(start: Start, round: usize) -> f64 {
    let scratch = Scratch::new(&format!("queues-{round}"));
    let mut builder = Engine::builder().register(three_steps);
    if let Start::Queued(concurrency) = start {
        builder = builder.queue(Queue::new("bench").concurrency(concurrency));
    }
    let engine = builder.open(scratch.path()).expect("the store opens");
    let began = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..CALLERS {
        let engine = engine.clone();
        callers.spawn(async move {
            for n in (caller..WORKFLOWS).step_by(CALLERS) {
                let id = format!("w-{n}");
                let run = match start {
                    Start::Plain => engine.start(three_steps, &id, n as u64).await,
                    Start::Queued(_) => engine.start_on("bench", three_steps, &id, n as u64).await,
                }
                .expect("the start");
                run.result().await.expect("the workflow");
            }
        });
    }
    while let Some(done) = callers.join_next().await {
        done.expect("a caller");
    }
    let rate = WORKFLOWS as f64 / began.elapsed().as_secs_f64();
    engine.close().await;
    rate
}

async fn median(start: Start) -> f64 {
    let mut rates = Vec::new();
    for r in 0..ROUNDS {
        rates.push(round(start, r).await);
    }
    rates.sort_by(f64::total_cmp);
    rates[ROUNDS / 2]
}

fn main() {
    if !support::wanted("queue_throughput") {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime");
    runtime.block_on(async {
        header(&format!(
            "queues on sled: {WORKFLOWS} workflows of 3 steps from {CALLERS} callers, median of {ROUNDS} rounds"
        ));
        let plain = median(Start::Plain).await;
        row("plain start", "workflows/s", &thousands(plain), "1.00x");
        let open = median(Start::Queued(u32::MAX)).await;
        row(
            "start_on, limit never hit",
            "workflows/s",
            &thousands(open),
            &format!("{:.2}x plain start", open / plain),
        );
        let limited = median(Start::Queued(8)).await;
        row(
            "start_on, concurrency 8",
            "workflows/s",
            &thousands(limited),
            &format!("{:.2}x plain start", limited / plain),
        );
    });
}
