//! Crash harness: for each seed, a child process (this binary, re-executed)
//! runs a few saga instances against a real store and a fake callee; the
//! parent SIGKILLs it 1–5 times at moments drawn from the seed (some while
//! `Engine::open` runs), restarts it, lets the last run finish, and checks
//! the invariants of issue 6 (see `crash_world/check.rs`).
//!
//! ```text
//! cargo test -p saga-runtime --test crash                      # 200 seeds
//! SAGA_CRASH_SEED=123 cargo test -p saga-runtime --test crash  # replay one seed
//! SAGA_CRASH_SEEDS=1000 SAGA_CRASH_FIRST=5000 ...              # more / other seeds
//! SAGA_CRASH_JOBS=1 ...                                        # seeds run side by side (default 2)
//! SAGA_CRASH_MAX_KILLS=5 ...                                   # kills per seed, drawn in 1..=max
//! ```
//!
//! The plan of a seed (instances, failures, kill points) is a function of
//! the seed; where exactly a kill lands depends on timing, so a replay
//! repeats the plan, not the same instruction.

mod crash_world;

use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crash_world::parent::{self, Launch, Trigger};
use crash_world::{Rng, Scenario, check};

#[derive(Default)]
struct Totals {
    seeds: usize,
    kills: u64,
    kills_in_open: u64,
    complete: usize,
    errored: usize,
    failures: Vec<String>,
}

fn env_number(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> ExitCode {
    if let Some(code) = crash_world::child::main_if_child() {
        return code;
    }
    let seeds: Vec<u64> = match std::env::var("SAGA_CRASH_SEED") {
        Ok(seed) => vec![seed.parse().expect("SAGA_CRASH_SEED must be a number")],
        Err(_) => {
            let first = env_number("SAGA_CRASH_FIRST", 0);
            (first..first + env_number("SAGA_CRASH_SEEDS", 200)).collect()
        }
    };
    let max_kills = env_number("SAGA_CRASH_MAX_KILLS", 5).max(1);
    let jobs = env_number("SAGA_CRASH_JOBS", 2).max(1) as usize;
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let totals = Mutex::new(Totals::default());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a Tokio runtime");
                while let Some(&seed) = seeds.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let result = run_seed(seed, max_kills, &runtime);
                    let mut totals = totals.lock().unwrap_or_else(|p| p.into_inner());
                    totals.seeds += 1;
                    match result {
                        Ok(seed) => {
                            totals.kills += seed.kills;
                            totals.kills_in_open += seed.kills_in_open;
                            totals.complete += seed.ended.complete;
                            totals.errored += seed.ended.errored;
                        }
                        Err(failure) => {
                            eprintln!("{failure}\n");
                            totals.failures.push(failure);
                        }
                    }
                    if totals.seeds % 25 == 0 {
                        eprintln!(
                            "crash: {}/{} seeds, {} kills, {:.1?}",
                            totals.seeds,
                            seeds.len(),
                            totals.kills,
                            started.elapsed()
                        );
                    }
                }
            });
        }
    });
    parent::remove_stable_exe();
    let totals = totals.into_inner().unwrap_or_else(|p| p.into_inner());
    println!(
        "crash: {} seeds, {} kills survived ({} during Engine::open), {} instances complete, {} errored and compensated, in {:.1?}",
        totals.seeds,
        totals.kills,
        totals.kills_in_open,
        totals.complete,
        totals.errored,
        started.elapsed()
    );
    let failed = totals.failures.len();
    println!("seeds: {} passed, {failed} failed", totals.seeds - failed);
    if totals.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("crash: {} seed(s) FAILED", totals.failures.len());
        ExitCode::FAILURE
    }
}

struct SeedResult {
    kills: u64,
    kills_in_open: u64,
    ended: check::Ended,
}

/// One seed: `kills` killed runs, a final run, then the checks.
fn run_seed(
    seed: u64,
    max_kills: u64,
    runtime: &tokio::runtime::Runtime,
) -> Result<SeedResult, String> {
    let dir = parent::fresh_dir(&format!("crash-{seed}"));
    let scenario = Scenario::random(seed);
    let mut rng = Rng::new(seed);
    let kills = 1 + rng.below(max_kills);
    let launch = |run: u64| Launch {
        dir: &dir,
        seed,
        scenario: scenario.name,
        run: run as u32,
        last: run == kills,
        env: &[],
    };
    let result = (|| -> Result<SeedResult, String> {
        let mut acks = Vec::new();
        let mut kills_in_open = 0;
        for run in 0..kills {
            let trigger = Trigger::draw(&mut rng);
            let killed = parent::run_and_kill(&launch(run), trigger)
                .map_err(|e| format!("run {run} (to be killed at {trigger:?}): {e}"))?;
            kills_in_open += u64::from(killed.during_open);
            acks.extend(parent::acks(run as u32, &killed.lines));
        }
        let lines = parent::run_to_end(&launch(kills))?;
        acks.extend(parent::acks(kills as u32, &lines));
        let ended = runtime.block_on(check::verify(&scenario, &dir, &acks))?;
        Ok(SeedResult {
            kills,
            kills_in_open,
            ended,
        })
    })();
    match result {
        Ok(result) => {
            if std::env::var_os("SAGA_CRASH_KEEP").is_none() {
                let _ = std::fs::remove_dir_all(&dir);
            }
            Ok(result)
        }
        Err(e) => Err(format!(
            "crash seed {seed} FAILED ({kills} kills planned):\n{e}\n  replay: SAGA_CRASH_SEED={seed} cargo test -p saga-runtime --test crash\n  data kept in {}",
            dir.display()
        )),
    }
}
