//! What sealing every user value costs: 3-step workflows on sled with and
//! without a `Keyring` codec, in adjacent rounds that alternate which goes
//! first, so the ratio of each pair cancels most of a shared machine's
//! drift; and the codec alone, per value.
//!
//! `cargo bench -p saga-runtime --features encryption --bench encryption`.

mod support;

use std::time::Instant;

use saga_runtime::prelude::*;
use saga_runtime::{Codec, Keyring, workflow};
use support::{Scratch, charge, confirm, header, reserve, row, thousands};

/// Concurrency, workflows per round, rounds of each kind.
const PAIRED: (usize, usize, usize) = (32, 2_000, 5);
/// Values sealed and opened for the per-value figure, and their size.
const VALUES: (usize, usize) = (100_000, 200);

#[workflow(name = "bench-sealed")]
async fn three_steps(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let reserved = reserve(&ctx, n).await?;
    let charged = charge(&ctx, reserved).await?;
    Ok(confirm(&ctx, charged).await?)
}

fn keys() -> Keyring {
    Keyring::new("bench", [7; 32]).expect("a key")
}

/// Workflows per second of round `n` on a fresh store.
async fn round(sealed: bool, n: usize) -> f64 {
    let (concurrency, total, _) = PAIRED;
    let kind = if sealed { "sealed" } else { "plain" };
    let scratch = Scratch::new(&format!("encryption-{kind}-{n}"));
    let builder = Engine::builder().register(three_steps);
    let builder = if sealed {
        builder.codec(keys())
    } else {
        builder
    };
    let engine = builder.open(scratch.path()).expect("open the store");
    let started = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..concurrency {
        let engine = engine.clone();
        callers.spawn(async move {
            for n in (caller..total).step_by(concurrency) {
                let run = engine.start(three_steps, &format!("w-{n}"), n as u64).await;
                run.expect("start").result().await.expect("completes");
            }
        });
    }
    while let Some(done) = callers.join_next().await {
        done.expect("a caller");
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    engine.close().await;
    rate
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn measure() {
    let (concurrency, _, rounds) = PAIRED;
    let (mut plain, mut sealed) = (Vec::new(), Vec::new());
    for n in 0..rounds {
        if n % 2 == 0 {
            plain.push(round(false, n).await);
        }
        sealed.push(round(true, n).await);
        if n % 2 == 1 {
            plain.push(round(false, n).await);
        }
    }
    let mut paired: Vec<f64> = sealed.iter().zip(&plain).map(|(s, p)| s / p).collect();
    let workload = format!("{concurrency} instances, {rounds} rounds each");
    row(
        &workload,
        "no codec: workflows/s",
        &thousands(median(&mut plain)),
        "",
    );
    row(
        &workload,
        "Keyring: workflows/s",
        &thousands(median(&mut sealed)),
        "",
    );
    let ratio = median(&mut paired);
    let range = format!(
        "(1.00 = no cost; pairs {:.2}..{:.2})",
        paired[0],
        paired[paired.len() - 1]
    );
    row(
        &workload,
        "Keyring / none, paired",
        &format!("{ratio:.3}"),
        &range,
    );

    let (values, size) = VALUES;
    let keys = keys();
    let plain = vec![b'x'; size];
    let started = Instant::now();
    for _ in 0..values {
        let sealed = keys.encode(&plain).expect("seals");
        assert_eq!(keys.decode(&sealed).expect("opens").len(), size);
    }
    let nanos = started.elapsed().as_nanos() as f64 / values as f64;
    row(
        &format!("{size}-byte values"),
        "seal + open, per value",
        &format!("{:.2} µs", nanos / 1000.0),
        "",
    );
}

fn main() {
    if !support::wanted("encryption") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    header("sealing user values: 3-step workflows on sled, with and without a Keyring codec");
    runtime.block_on(measure());
}
