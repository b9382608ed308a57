//! Durable steps: throughput, step latency, flushes and disk use of 3-step
//! workflows, each beside a raw sled insert+flush loop measured in the same
//! run on the same disk. `waiting_memory` adds the memory of sleeping
//! instances to the same table.
//!
//! `cargo bench -p saga-runtime` (with the other benches), or `--bench durable_steps`.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use saga_runtime::prelude::*;
use saga_runtime::{rollback, step, workflow};
use support::{
    Laps, Raw, STEPS, Scratch, StepNanos, charge, confirm, cpu_time, dir_bytes, header, raw_loop,
    reserve, row, thousands,
};

/// Workflows run one after another by a single caller. The row for 1
/// concurrent instance runs the same again with its latencies: the two
/// differ by the run-to-run noise.
const BACK_TO_BACK: usize = 2_000;
/// Concurrency levels, with the workflows run at each: a few thousand steps.
const CONCURRENT: [(usize, usize); 4] = [(1, 2_000), (8, 4_000), (64, 6_000), (512, 6_144)];
/// The concurrency whose store is measured for bytes on disk.
const DISK_AT: usize = 64;
/// Macro-defined against inline steps: concurrency, workflows per round,
/// and rounds of each.
const MACRO_VS_INLINE: (usize, usize, usize) = (64, 3_000, 7);
/// The failing saga: concurrency and instances.
const FAILING: (usize, usize) = (64, 2_000);
/// Workflows run before measuring (at least one per caller), so the store
/// and the runtime are past their first allocations.
const WARM_UP: usize = 64;
/// Rounds of the raw loop and of each workload; the median round is
/// printed. The disk of the VM these figures come from varies by 1.5x from
/// one round to the next.
const ROUNDS: usize = 3;

fn inline_steps() -> impl Workflow<Input = u64, Output = StepNanos> + Copy {
    workflow_fn("bench-inline", |ctx: WorkflowContext, n: u64| async move {
        let mut laps = Laps::start();
        let reserved: u64 = ctx
            .step("reserve", StepConfig::default(), move |key| async move {
                Ok(n + key.as_str().len() as u64)
            })
            .await?;
        laps.lap();
        let charged: u64 = ctx
            .step("charge", StepConfig::default(), move |_| async move {
                Ok(reserved * 2)
            })
            .await?;
        laps.lap();
        let _confirmed: u64 = ctx
            .step("confirm", StepConfig::default(), move |key| async move {
                Ok(charged + key.as_str().len() as u64)
            })
            .await?;
        laps.lap();
        Ok::<_, WorkflowError>(laps.nanos())
    })
}

/// The same workload as [`inline_steps`], as users write it with macros.
#[workflow(name = "bench-macro")]
async fn macro_steps(ctx: WorkflowContext, n: u64) -> Result<StepNanos, WorkflowError> {
    let mut laps = Laps::start();
    let reserved = reserve(&ctx, n).await?;
    laps.lap();
    let charged = charge(&ctx, reserved).await?;
    laps.lap();
    confirm(&ctx, charged).await?;
    laps.lap();
    Ok(laps.nanos())
}

/// Compensations run by the failing saga, to check every one ran.
static COMPENSATIONS: AtomicU64 = AtomicU64::new(0);

#[step(name = "hold-seat", rollback = release_seat)]
async fn hold_seat(key: IdempotencyKey, n: u64) -> Result<u64, StepError> {
    Ok(n + key.as_str().len() as u64)
}

#[rollback]
async fn release_seat(ctx: RollbackContext<'_, u64>, n: u64) -> Result<(), StepError> {
    let _ = (ctx.key().as_str(), n);
    COMPENSATIONS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

#[step(name = "charge-fare", rollback = refund_fare)]
async fn charge_fare(key: IdempotencyKey, seat: u64) -> Result<u64, StepError> {
    Ok(seat + key.as_str().len() as u64)
}

#[rollback]
async fn refund_fare(ctx: RollbackContext<'_, u64>, seat: u64) -> Result<(), StepError> {
    let _ = (ctx.key().as_str(), seat);
    COMPENSATIONS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

#[step(name = "issue-ticket", read_only)]
async fn issue_ticket(fare: u64) -> Result<u64, StepError> {
    Err(StepError::fatal(format!("no ticket for fare {fare}")))
}

/// Steps 1 and 2 succeed, step 3 fails for good: both are compensated.
#[workflow(name = "bench-failing-saga")]
async fn failing_saga(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let seat = hold_seat(&ctx, n).await?;
    let fare = charge_fare(&ctx, seat).await?;
    Ok(issue_ticket(&ctx, fare).await?)
}

/// What one run of a workload produced.
struct Round<O> {
    elapsed: Duration,
    /// The process's CPU time (user and system) over the round.
    cpu: Duration,
    flushes: u64,
    results: Vec<saga_runtime::Result<O>>,
}

/// Runs instances `0..total` of `workflow`, `concurrency` at a time: each
/// caller starts an instance, waits for its end, then starts the next.
async fn closed_loop<W>(
    engine: &Engine,
    workflow: W,
    concurrency: usize,
    total: usize,
    prefix: &str,
) -> Round<W::Output>
where
    W: Workflow<Input = u64> + Copy,
{
    let flushes = engine.flush_count();
    let started = Instant::now();
    let cpu = cpu_time();
    let mut callers = tokio::task::JoinSet::new();
    let prefix: std::sync::Arc<str> = prefix.into();
    for caller in 0..concurrency {
        let engine = engine.clone();
        let prefix = prefix.clone();
        callers.spawn(async move {
            let mut results = Vec::new();
            for n in (caller..total).step_by(concurrency) {
                let id = format!("{prefix}-{n}");
                let run = engine.start(workflow, &id, n as u64).await;
                results.push(run.expect("start an instance").result().await);
            }
            results
        });
    }
    let mut results = Vec::with_capacity(total);
    while let Some(done) = callers.join_next().await {
        results.extend(done.expect("a caller task"));
    }
    Round {
        elapsed: started.elapsed(),
        cpu: cpu_time().saturating_sub(cpu),
        flushes: engine.flush_count() - flushes,
        results,
    }
}

/// A completed workload of 3-step workflows.
struct Throughput {
    workflows_per_second: f64,
    steps_per_second: f64,
    flushes_per_step: f64,
    /// The process's CPU time per workflow, in microseconds: the engine's
    /// own cost, which does not swing with the disk.
    cpu_micros_per_workflow: f64,
    /// Every step's latency, sorted.
    step_nanos: Vec<u64>,
    disk_bytes_per_instance: f64,
    instances: usize,
}

/// Runs `total` workflows at `concurrency` on a fresh store, after a
/// warm-up, [`ROUNDS`] times; keeps the median round. Then closes the store
/// and weighs it.
async fn throughput<W>(name: &str, workflow: W, concurrency: usize, total: usize) -> Throughput
where
    W: Workflow<Input = u64, Output = StepNanos> + Copy,
{
    let scratch = Scratch::new(name);
    let engine = Engine::open(scratch.path()).expect("open the store");
    engine.register(workflow).unwrap();
    let warm_up = concurrency.max(WARM_UP);
    for result in closed_loop(&engine, workflow, concurrency, warm_up, "warm-up")
        .await
        .results
    {
        result.expect("a warm-up workflow completes");
    }
    let mut rounds = Vec::with_capacity(ROUNDS);
    for n in 0..ROUNDS {
        let prefix = format!("measured-{n}");
        rounds.push(closed_loop(&engine, workflow, concurrency, total, &prefix).await);
    }
    rounds.sort_by_key(|round| round.elapsed);
    let round = rounds.swap_remove(ROUNDS / 2);
    for result in rounds.into_iter().flat_map(|round| round.results) {
        result.expect("a workflow completes");
    }
    let mut step_nanos: Vec<u64> = round
        .results
        .into_iter()
        .flat_map(|result| result.expect("a workflow completes"))
        .collect();
    step_nanos.sort_unstable();
    engine.close().await;
    let instances = warm_up + ROUNDS * total;
    let seconds = round.elapsed.as_secs_f64();
    Throughput {
        workflows_per_second: total as f64 / seconds,
        steps_per_second: (total * STEPS) as f64 / seconds,
        flushes_per_step: round.flushes as f64 / (total * STEPS) as f64,
        cpu_micros_per_workflow: round.cpu.as_secs_f64() * 1e6 / total as f64,
        step_nanos,
        disk_bytes_per_instance: dir_bytes(scratch.path()) as f64 / instances as f64,
        instances,
    }
}

/// The `q` quantile of `sorted`, in milliseconds.
fn quantile_ms(sorted: &[u64], q: f64) -> f64 {
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index] as f64 / 1e6
}

/// `figure` over the raw loop's figure of the same kind, this run.
fn ratio(figure: f64, raw: f64) -> String {
    format!("({:.2}x raw)", figure / raw)
}

fn ms(value: f64) -> String {
    format!("{value:.3} ms")
}

fn print_raw(raw: &Raw) {
    let workload = "raw sled insert+flush, 1 writer";
    let rate = raw.writes_per_second;
    let p50 = quantile_ms(&raw.write_nanos, 0.50);
    let p99 = quantile_ms(&raw.write_nanos, 0.99);
    row(workload, "writes/s", &thousands(rate), &ratio(rate, rate));
    row(workload, "p50 write latency", &ms(p50), &ratio(p50, p50));
    row(workload, "p99 write latency", &ms(p99), &ratio(p99, p99));
    row(workload, "flushes/write", "1.00", &ratio(1.0, 1.0));
    let disk = raw.disk_bytes_per_write;
    row(
        workload,
        "bytes on disk/64 B write",
        &thousands(disk),
        &ratio(disk, disk),
    );
}

fn print_throughput(workload: &str, run: &Throughput, raw: &Raw) {
    let rate = raw.writes_per_second;
    let workflows = run.workflows_per_second;
    let steps = run.steps_per_second;
    row(
        workload,
        "workflows/s",
        &thousands(workflows),
        &ratio(workflows, rate),
    );
    row(workload, "steps/s", &thousands(steps), &ratio(steps, rate));
    row(
        workload,
        "CPU us/workflow",
        &format!("{:.0}", run.cpu_micros_per_workflow),
        "user+system, whole process",
    );
}

fn print_latency(workload: &str, run: &Throughput, raw: &Raw) {
    for (label, q) in [("p50 step latency", 0.50), ("p99 step latency", 0.99)] {
        let step = quantile_ms(&run.step_nanos, q);
        let write = quantile_ms(&raw.write_nanos, q);
        row(workload, label, &ms(step), &ratio(step, write));
    }
    let flushes = run.flushes_per_step;
    // Every flush of the round: instances' starts and ends flush too.
    let label = "flushes/step (all)";
    row(
        workload,
        label,
        &format!("{flushes:.3}"),
        &ratio(flushes, 1.0),
    );
}

/// Inline and macro-defined steps in adjacent rounds, which goes first
/// alternating: each kind's median, and the ratio of each pair of rounds,
/// which cancels most of the drift of a shared machine.
async fn macro_against_inline(raw: &Raw) {
    let (concurrency, total, rounds) = MACRO_VS_INLINE;
    let mut inline = Vec::new();
    let mut macros = Vec::new();
    for round in 0..rounds {
        let inline_first = round % 2 == 0;
        if inline_first {
            inline.push(steps_per_second(inline_steps(), concurrency, total).await);
        }
        macros.push(steps_per_second(macro_steps, concurrency, total).await);
        if !inline_first {
            inline.push(steps_per_second(inline_steps(), concurrency, total).await);
        }
    }
    let mut paired: Vec<f64> = macros.iter().zip(&inline).map(|(m, i)| m / i).collect();
    let rate = raw.writes_per_second;
    let workload = format!("{concurrency} instances, {rounds} rounds each");
    let inline = median(&mut inline);
    let macros = median(&mut macros);
    row(
        &workload,
        "inline ctx.step: steps/s",
        &thousands(inline),
        &ratio(inline, rate),
    );
    row(
        &workload,
        "#[step] macros: steps/s",
        &thousands(macros),
        &ratio(macros, rate),
    );
    let relative = median(&mut paired);
    let range = format!(
        "(1.00 = no cost; pairs {:.2}..{:.2})",
        paired[0],
        paired[paired.len() - 1]
    );
    row(
        &workload,
        "#[step] / inline, paired",
        &format!("{relative:.3}"),
        &range,
    );
}

async fn steps_per_second<W>(workflow: W, concurrency: usize, total: usize) -> f64
where
    W: Workflow<Input = u64, Output = StepNanos> + Copy,
{
    throughput("macro-or-inline", workflow, concurrency, total)
        .await
        .steps_per_second
}

/// The median of `values`, which it sorts.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The failing saga: every instance must end failed, compensated in full.
async fn failing(raw: &Raw) {
    let (concurrency, total) = FAILING;
    let scratch = Scratch::new("failing");
    let engine = Engine::open(scratch.path()).expect("open the store");
    engine.register(failing_saga).unwrap();
    closed_loop(&engine, failing_saga, concurrency, WARM_UP, "warm-up").await;
    let compensations = COMPENSATIONS.load(Ordering::Relaxed);
    let round = closed_loop(&engine, failing_saga, concurrency, total, "failing").await;
    for result in round.results {
        match result {
            Err(saga_runtime::Error::WorkflowFailed {
                rollback_failure: None,
                ..
            }) => {}
            other => panic!("expected a compensated failure, got {other:?}"),
        }
    }
    let compensated = COMPENSATIONS.load(Ordering::Relaxed) - compensations;
    assert_eq!(compensated, 2 * total as u64, "both steps compensated");
    engine.close().await;
    let workload = format!("failing 3-step saga, {concurrency} instances");
    let instances = total as f64 / round.elapsed.as_secs_f64();
    let per_instance = round.flushes as f64 / total as f64;
    let rate = raw.writes_per_second;
    row(
        &workload,
        "compensated instances/s",
        &thousands(instances),
        &ratio(instances, rate),
    );
    row(
        &workload,
        "flushes/instance (all)",
        &format!("{per_instance:.3}"),
        &ratio(per_instance, 1.0),
    );
}

async fn measure() {
    let raw = raw_loop(ROUNDS);
    print_raw(&raw);
    let back_to_back = throughput("back-to-back", inline_steps(), 1, BACK_TO_BACK).await;
    print_throughput("1 instance, back to back", &back_to_back, &raw);
    let mut disk = None;
    for (concurrency, total) in CONCURRENT {
        let run = throughput("concurrent", inline_steps(), concurrency, total).await;
        let plural = if concurrency == 1 { "" } else { "s" };
        let workload = format!("{concurrency} concurrent instance{plural}");
        print_throughput(&workload, &run, &raw);
        print_latency(&workload, &run, &raw);
        if concurrency == DISK_AT {
            disk = Some(run);
        }
    }
    macro_against_inline(&raw).await;
    failing(&raw).await;
    let disk = disk.expect("a run at the disk concurrency");
    let completed = thousands(disk.instances as f64);
    let workload = format!("{completed} completed, {DISK_AT} at a time");
    let bytes = disk.disk_bytes_per_instance;
    let raw_bytes = raw.disk_bytes_per_write;
    row(
        &workload,
        "bytes on disk/instance",
        &thousands(bytes),
        &ratio(bytes, raw_bytes),
    );
}

fn main() {
    if !support::wanted("durable_steps") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    header(
        "durable steps, 3 sequential steps per workflow, the median of 3 rounds. \
         (N.NNx raw) = the figure / the raw loop's figure of that kind, this run",
    );
    runtime.block_on(measure());
}
