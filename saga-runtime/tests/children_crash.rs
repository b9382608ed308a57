//! Crash test of child workflows: a child process (this binary, run
//! again) books trips on a sled store; each trip holds a booking, books a
//! flight and a hotel as children (the hotel with a breakfast child of its
//! own), then pays, and a seeded share of the payments is declined, so the
//! whole tree rolls back. The parent SIGKILLs the child process 1–4 times
//! at seeded moments (while children are created, run, or compensated),
//! restarts it, lets the last run finish, and checks:
//!
//! 1. every trip ends as planned (complete, or errored with its rollback
//!    completed) and its children end with it (complete, or compensated);
//! 2. there is exactly one child per call, found by filtering `list` by
//!    parent, with the documented derived ids;
//! 3. no step completed twice and no compensation completed twice, in
//!    any instance's history; every step that took effect was compensated
//!    when its trip rolled back, with the documented keys;
//! 4. the compensations began in reverse start order across the tree:
//!    breakfast, room, seat, charge, hold.
//!
//! ```text
//! cargo test -p saga-runtime --test children_crash                     # 60 seeds
//! SAGA_CRASH_SEED=7 cargo test -p saga-runtime --test children_crash   # one seed
//! ```

mod crash_world;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use crash_world::parent::{self, Launch, Trigger};
use crash_world::{ChildEnv, Rng, mix};
use saga_runtime::inspect::{EventKind, ListFilter};
use saga_runtime::prelude::*;

/// The callee: every call is a fsynced line of `calls.log` (`F key` or
/// `R key`), and each key takes effect once (a file created with
/// `O_EXCL` under `applied/`).
struct Callee {
    dir: PathBuf,
    log: Mutex<std::fs::File>,
}

impl Callee {
    fn open(dir: &Path) -> std::io::Result<Callee> {
        std::fs::create_dir_all(dir.join("applied"))?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("calls.log"))?;
        Ok(Callee {
            dir: dir.to_owned(),
            log: Mutex::new(log),
        })
    }

    async fn call(&self, kind: &str, key: &str) {
        {
            let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
            // One write of the whole line: `writeln!` writes it in pieces,
            // and a kill between two of them left a torn line ("R" glued
            // to the next run's "R ...").
            log.write_all(format!("{kind} {key}\n").as_bytes())
                .expect("append to calls.log");
            log.sync_data().expect("fsync calls.log");
        }
        // Spread the run over time, so the kills land all over it.
        tokio::time::sleep(Duration::from_millis(mix(0, &[key.as_bytes()]) % 4)).await;
        let _ = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.dir.join("applied").join(key));
        println!("ACK {key}");
    }
}

#[step(name = "hold", rollback = unhold)]
async fn hold(key: IdempotencyKey, callee: Service<Callee>) -> Result<(), StepError> {
    callee.call("F", key.as_str()).await;
    Ok(())
}

#[rollback]
async fn unhold(ctx: RollbackContext<'_, ()>, callee: Service<Callee>) -> Result<(), StepError> {
    callee.call("R", ctx.key().as_str()).await;
    Ok(())
}

#[step(name = "charge", rollback = refund)]
async fn charge(key: IdempotencyKey, callee: Service<Callee>) -> Result<(), StepError> {
    callee.call("F", key.as_str()).await;
    Ok(())
}

#[rollback]
async fn refund(ctx: RollbackContext<'_, ()>, callee: Service<Callee>) -> Result<(), StepError> {
    callee.call("R", ctx.key().as_str()).await;
    Ok(())
}

#[step(name = "seat", rollback = unseat)]
async fn seat(key: IdempotencyKey, callee: Service<Callee>) -> Result<(), StepError> {
    callee.call("F", key.as_str()).await;
    Ok(())
}

#[rollback]
async fn unseat(ctx: RollbackContext<'_, ()>, callee: Service<Callee>) -> Result<(), StepError> {
    callee.call("R", ctx.key().as_str()).await;
    Ok(())
}

#[step(name = "room", rollback = free_room)]
async fn room(key: IdempotencyKey, callee: Service<Callee>) -> Result<(), StepError> {
    callee.call("F", key.as_str()).await;
    Ok(())
}

#[rollback]
async fn free_room(ctx: RollbackContext<'_, ()>, callee: Service<Callee>) -> Result<(), StepError> {
    callee.call("R", ctx.key().as_str()).await;
    Ok(())
}

#[step(name = "order", rollback = cancel_order)]
async fn order(key: IdempotencyKey, callee: Service<Callee>) -> Result<(), StepError> {
    callee.call("F", key.as_str()).await;
    Ok(())
}

#[rollback]
async fn cancel_order(
    ctx: RollbackContext<'_, ()>,
    callee: Service<Callee>,
) -> Result<(), StepError> {
    callee.call("R", ctx.key().as_str()).await;
    Ok(())
}

#[step(name = "pay")]
async fn pay(
    key: IdempotencyKey,
    callee: Service<Callee>,
    declined: bool,
) -> Result<(), StepError> {
    callee.call("F", key.as_str()).await;
    if declined {
        return Err(StepError::fatal("card declined"));
    }
    Ok(())
}

#[workflow(name = "leg")]
async fn leg(ctx: WorkflowContext, _input: ()) -> Result<(), WorkflowError> {
    charge(&ctx).await?;
    seat(&ctx).await?;
    Ok(())
}

#[workflow(name = "meal")]
async fn meal(ctx: WorkflowContext, _input: ()) -> Result<(), WorkflowError> {
    order(&ctx).await?;
    Ok(())
}

#[workflow(name = "stay")]
async fn stay(ctx: WorkflowContext, _input: ()) -> Result<(), WorkflowError> {
    room(&ctx).await?;
    ctx.child("breakfast", meal, ()).await?;
    Ok(())
}

#[workflow(name = "journey")]
async fn journey(ctx: WorkflowContext, declined: bool) -> Result<(), WorkflowError> {
    hold(&ctx).await?;
    ctx.child("flight", leg, ()).await?;
    ctx.child("hotel", stay, ()).await?;
    pay(&ctx, declined).await?;
    Ok(())
}

/// The trips of a seed: two, each declined or not by the seed.
fn trips(seed: u64) -> Vec<(String, bool)> {
    (0..2)
        .map(|i: u8| {
            (
                format!("t{seed}-{i}"),
                mix(seed, &[b"declined", &[i]]).is_multiple_of(2),
            )
        })
        .collect()
}

/// Every instance of a trip, with the steps it runs in call order.
fn tree(trip: &str) -> Vec<(String, Vec<&'static str>)> {
    vec![
        (trip.to_owned(), vec!["hold", "pay"]),
        (format!("{trip}.flight"), vec!["charge", "seat"]),
        (format!("{trip}.hotel"), vec!["room"]),
        (format!("{trip}.hotel.breakfast"), vec!["order"]),
    ]
}

/// The compensations of a declined trip, in the order they must begin.
fn rollback_order(trip: &str) -> Vec<String> {
    vec![
        format!("{trip}.hotel.breakfast:rollback:order"),
        format!("{trip}.hotel:rollback:room"),
        format!("{trip}.flight:rollback:seat"),
        format!("{trip}.flight:rollback:charge"),
        format!("{trip}:rollback:hold"),
    ]
}

fn main() -> ExitCode {
    if let Some(code) = child_main() {
        return code;
    }
    let seeds: Vec<u64> = match std::env::var("SAGA_CRASH_SEED") {
        Ok(seed) => vec![seed.parse().expect("SAGA_CRASH_SEED must be a number")],
        Err(_) => (0..60).collect(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let mut failures = Vec::new();
    let (mut kills, mut declined) = (0, 0);
    for &seed in &seeds {
        match run_seed(seed, &runtime) {
            Ok((k, d)) => {
                kills += k;
                declined += d;
            }
            Err(e) => {
                eprintln!("{e}\n");
                failures.push(seed);
            }
        }
    }
    parent::remove_stable_exe();
    println!(
        "children_crash: {} seeds, {kills} kills, {} trips ({declined} rolled back), {} failed",
        seeds.len(),
        2 * seeds.len(),
        failures.len()
    );
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("children_crash: seeds {failures:?} FAILED");
        ExitCode::FAILURE
    }
}

fn run_seed(seed: u64, runtime: &tokio::runtime::Runtime) -> Result<(u64, usize), String> {
    let dir = parent::fresh_dir(&format!("children-crash-{seed}"));
    let mut rng = Rng::new(seed);
    let kills = 1 + rng.below(4);
    let launch = |run: u64| Launch {
        dir: &dir,
        seed,
        scenario: "children",
        run: run as u32,
        last: run == kills,
        env: &[],
    };
    let result = (|| -> Result<usize, String> {
        for run in 0..kills {
            let trigger = match rng.below(3) {
                0 => Trigger::AfterAcks {
                    acks: 1 + rng.below(12),
                    delay_us: rng.below(3_000),
                },
                _ => Trigger::AfterOpened {
                    delay_us: rng.below(60_000),
                },
            };
            parent::run_and_kill(&launch(run), trigger)
                .map_err(|e| format!("run {run} (to be killed at {trigger:?}): {e}"))?;
        }
        parent::run_to_end(&launch(kills))?;
        runtime.block_on(verify(seed, &dir))
    })();
    match result {
        Ok(declined) => {
            let _ = std::fs::remove_dir_all(&dir);
            Ok((kills, declined))
        }
        Err(e) => Err(format!(
            "children crash seed {seed} FAILED ({kills} kills):\n{e}\n  replay: SAGA_CRASH_SEED={seed} cargo test -p saga-runtime --test children_crash\n  data kept in {}",
            dir.display()
        )),
    }
}

/// The child role: opens the store, starts (again) the seed's trips, waits
/// for them, and in the final run reports `DONE`.
fn child_main() -> Option<ExitCode> {
    let env = ChildEnv::read()?;
    Some(ChildEnv::run_on_runtime(child(env.dir, env.seed, env.last)))
}

fn error(what: String) -> ExitCode {
    println!("ERROR {}", what.replace('\n', " "));
    ExitCode::from(2)
}

async fn child(dir: PathBuf, seed: u64, last: bool) -> ExitCode {
    let callee = match Callee::open(&dir) {
        Ok(callee) => callee,
        Err(e) => return error(format!("callee: {e}")),
    };
    println!("OPENING");
    let engine = match Engine::builder()
        .provide(callee)
        .register(journey)
        .register(leg)
        .register(stay)
        .register(meal)
        .open(dir.join("store"))
    {
        Ok(engine) => engine,
        Err(e) => return error(format!("open: {e}")),
    };
    println!("OPENED");
    let mut runs = Vec::new();
    for (id, declined) in trips(seed) {
        match engine.start(journey, &id, declined).await {
            Ok(run) => runs.push(run),
            Err(e) => return error(format!("start {id}: {e}")),
        }
    }
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        for run in &runs {
            let _ = run.result().await;
        }
    })
    .await
    .is_ok();
    if !last {
        return crash_world::idle_until_killed().await;
    }
    engine.close().await;
    if !ended {
        return error("the trips did not end within 30 s".into());
    }
    println!("DONE");
    ExitCode::SUCCESS
}

/// The checks of the module docs; the number of trips that rolled back.
async fn verify(seed: u64, dir: &Path) -> Result<usize, String> {
    let mut problems = Vec::new();
    let log = std::fs::read_to_string(dir.join("calls.log")).map_err(|e| format!("log: {e}"))?;
    let calls: Vec<(&str, &str)> = log
        .lines()
        .filter_map(|line| line.split_once(' '))
        .collect();
    let engine = Engine::open(dir.join("store")).map_err(|e| format!("reopen: {e}"))?;
    let listed = engine
        .list(&ListFilter::all())
        .await
        .map_err(|e| format!("list: {e}"))?;
    let mut declined_trips = 0;
    let expected_instances: usize = trips(seed).len() * 4;
    if listed.len() != expected_instances {
        let ids: Vec<&str> = listed.iter().map(|i| i.id.as_str()).collect();
        problems.push(format!(
            "2: the store holds {} instances, not {expected_instances}: {ids:?}",
            listed.len()
        ));
    }
    for (trip, declined) in trips(seed) {
        declined_trips += usize::from(declined);
        // 2: one child per call, by parent.
        for (parent, children) in [
            (
                trip.clone(),
                vec![format!("{trip}.flight"), format!("{trip}.hotel")],
            ),
            (
                format!("{trip}.hotel"),
                vec![format!("{trip}.hotel.breakfast")],
            ),
        ] {
            let found = engine
                .list(&ListFilter::all().parent(parent.as_str()))
                .await
                .map_err(|e| format!("list by parent: {e}"))?;
            let mut ids: Vec<String> = found.into_iter().map(|i| i.id).collect();
            ids.sort();
            if ids != children {
                problems.push(format!(
                    "2: the children of {parent} are {ids:?}, not {children:?}"
                ));
            }
        }
        for (at, (id, steps)) in tree(&trip).into_iter().enumerate() {
            let instance = engine
                .instance(&id)
                .await
                .map_err(|e| format!("instance {id}: {e}"))?;
            let status = instance.status().await.map_err(|e| format!("{id}: {e}"))?;
            // 1: how it ended.
            let expected = match (declined, at) {
                (false, _) => Status::Complete,
                (true, 0) => Status::Errored,
                (true, _) => Status::Compensated,
            };
            if status != expected {
                problems.push(format!("1: {id} ended {status}, not {expected}"));
            }
            let history = instance.history().await.map_err(|e| format!("{id}: {e}"))?;
            let mut completed: BTreeMap<String, usize> = BTreeMap::new();
            let mut compensated: BTreeMap<String, usize> = BTreeMap::new();
            for event in &history {
                match &event.kind {
                    EventKind::StepCompleted { step, .. } => {
                        *completed.entry(step.clone()).or_default() += 1
                    }
                    EventKind::RollbackStepCompleted { step, .. } => {
                        *compensated.entry(step.clone()).or_default() += 1
                    }
                    _ => {}
                }
            }
            // 3: nothing twice, nothing skipped.
            for (step, n) in completed.iter().chain(compensated.iter()) {
                if *n > 1 {
                    problems.push(format!("3: {id} recorded {step:?} done {n} times"));
                }
            }
            for step in steps {
                let key = if at == 0 {
                    format!("{trip}:{step}")
                } else {
                    format!("{id}:{step}")
                };
                let applied = dir.join("applied").join(&key).exists();
                let rollback_key = format!("{id}:rollback:{step}");
                let undone = dir.join("applied").join(&rollback_key).exists();
                if step == "pay" {
                    continue;
                }
                if declined && applied && !undone {
                    problems.push(format!("3: {key} took effect and was never compensated"));
                }
                if !declined && undone {
                    problems.push(format!(
                        "3: {key} was compensated though its trip completed"
                    ));
                }
                if !declined && !applied {
                    problems.push(format!(
                        "3: {key} never took effect though its trip completed"
                    ));
                }
            }
        }
        // 4: the tree's compensations began in reverse start order.
        if declined {
            let mut first: Vec<&str> = Vec::new();
            let (below, own) = (format!("{trip}."), format!("{trip}:"));
            for (kind, key) in &calls {
                let of_trip = key.starts_with(&below) || key.starts_with(&own);
                if *kind == "R" && of_trip && !first.contains(key) {
                    first.push(key);
                }
            }
            if first != rollback_order(&trip) {
                problems.push(format!(
                    "4: the compensations of {trip} began in the order {first:?}, not {:?}",
                    rollback_order(&trip)
                ));
            }
        }
    }
    engine.close().await;
    if problems.is_empty() {
        Ok(declined_trips)
    } else {
        Err(problems.join("\n"))
    }
}
