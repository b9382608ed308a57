//! Durable steps per second: one instance stepping sequentially, and many
//! instances at once (group commit), beside a raw sled insert+flush loop
//! measured in the same run on the same disk.
//!
//! `cargo bench -p saga-runtime --bench durable_steps`

use std::path::PathBuf;
use std::time::Instant;

use saga_runtime::prelude::*;

const SEQUENTIAL_STEPS: u64 = 2_000;
/// Concurrency levels, with the steps each instance runs at that level.
const CONCURRENT: [(u64, u64); 3] = [(16, 200), (64, 100), (256, 25)];
const RAW_WRITES: u64 = 2_000;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("saga-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// What the engine is compared with: one insert and one flush per write,
/// the least a durable step costs on sled.
fn raw_sled_writes_per_second() -> f64 {
    let dir = scratch("raw");
    let db = sled::open(&dir).expect("open sled");
    let value = [7u8; 64];
    let start = Instant::now();
    for i in 0..RAW_WRITES {
        db.insert(i.to_be_bytes(), &value[..]).expect("insert");
        db.flush().expect("flush");
    }
    let rate = RAW_WRITES as f64 / start.elapsed().as_secs_f64();
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
    rate
}

fn counter(steps: u64) -> impl Workflow<Input = (), Output = u64> + Copy {
    workflow_fn("count", move |ctx: WorkflowContext, (): ()| async move {
        let mut total = 0u64;
        for i in 0..steps {
            total += ctx
                .step("add", StepConfig::default(), move |_| async move { Ok(i) })
                .await?;
        }
        Ok::<_, WorkflowError>(total)
    })
}

async fn engine_steps_per_second(instances: u64, steps: u64) -> f64 {
    let dir = scratch(&format!("engine-{instances}"));
    let engine = Engine::open(&dir).expect("open engine");
    let workflow = counter(steps);
    engine.register(workflow);
    let start = Instant::now();
    let mut runs = Vec::new();
    for i in 0..instances {
        runs.push(
            engine
                .start(workflow, &format!("bench-{i}"), ())
                .await
                .expect("start"),
        );
    }
    for run in runs {
        run.result().await.expect("instance completed");
    }
    let rate = (instances * steps) as f64 / start.elapsed().as_secs_f64();
    engine.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    rate
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let raw = raw_sled_writes_per_second();
    println!("raw sled insert+flush:            {raw:>10.0} writes/s");
    let sequential = runtime.block_on(engine_steps_per_second(1, SEQUENTIAL_STEPS));
    println!(
        "durable steps, 1 instance:        {sequential:>10.0} steps/s  ({:.2}x raw sled)",
        sequential / raw
    );
    for (instances, steps) in CONCURRENT {
        let concurrent = runtime.block_on(engine_steps_per_second(instances, steps));
        println!(
            "durable steps, {instances:>3} instances:    {concurrent:>10.0} steps/s  ({:.2}x raw sled, {:.2}x one instance)",
            concurrent / raw,
            concurrent / sequential
        );
    }
}
