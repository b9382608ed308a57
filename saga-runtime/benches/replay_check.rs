//! The replay check: histories/s of `History::export` and of
//! `testing::replay` (each replay folds its history in a temporary store
//! of its own), for instances in flight after three steps, on sled.
//!
//! `cargo bench -p saga-runtime --bench replay_check`

mod support;

use std::time::Instant;

use saga_runtime::prelude::*;
use saga_runtime::testing::{History, Replayer};
use saga_runtime::workflow;
use support::{Scratch, charge, confirm, header, reserve, row, thousands};

/// Instances in flight, exported and replayed each round.
const INSTANCES: usize = 500;
/// Rounds; the median is printed.
const ROUNDS: usize = 3;

#[workflow(name = "bench-replayed")]
async fn three_steps_then_wait(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let reserved = reserve(&ctx, n).await?;
    let charged = charge(&ctx, reserved).await?;
    let confirmed = confirm(&ctx, charged).await?;
    let _: bool = ctx
        .wait_for_event("wait-shipped", "shipped", "30 days")
        .await?;
    Ok(confirmed)
}

/// Histories/s of the export and of the replay, one round.
async fn round(round: usize) -> (f64, f64) {
    let scratch = Scratch::new(&format!("replay-{round}"));
    let engine = Engine::builder()
        .register(three_steps_then_wait)
        .open(scratch.path())
        .expect("the store opens");
    for n in 0..INSTANCES {
        let run = engine
            .start(three_steps_then_wait, &format!("w-{n}"), n as u64)
            .await
            .expect("the start");
        while run.status().await.expect("its status") != Status::Waiting {
            tokio::task::yield_now().await;
        }
    }
    let began = Instant::now();
    let mut histories = Vec::with_capacity(INSTANCES);
    for n in 0..INSTANCES {
        let history = History::export(&engine, &format!("w-{n}"))
            .await
            .expect("the export");
        histories.push(history);
    }
    let exported = INSTANCES as f64 / began.elapsed().as_secs_f64();
    let replayer = Replayer::new();
    let began = Instant::now();
    for history in &histories {
        replayer
            .replay(three_steps_then_wait, history)
            .await
            .expect("the replay fits");
    }
    let replayed = INSTANCES as f64 / began.elapsed().as_secs_f64();
    engine.close().await;
    (exported, replayed)
}

fn median(mut figures: Vec<f64>) -> f64 {
    figures.sort_by(f64::total_cmp);
    figures[figures.len() / 2]
}

#[tokio::main]
async fn main() {
    let mut exports = Vec::new();
    let mut replays = Vec::new();
    for n in 0..ROUNDS {
        let (exported, replayed) = round(n).await;
        exports.push(exported);
        replays.push(replayed);
    }
    header(&format!(
        "replay check: {INSTANCES} instances in flight after 3 steps, sled, median of {ROUNDS}"
    ));
    row(
        "History::export",
        "histories/s",
        &thousands(median(exports)),
        "",
    );
    row(
        "testing::replay",
        "histories/s",
        &thousands(median(replays)),
        "",
    );
}
