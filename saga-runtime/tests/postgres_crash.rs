//! Many workers on one PostgreSQL schema, under SIGKILL and SIGSTOP.
//!
//! Three worker processes (this binary, re-executed) connect to one
//! schema, each under a lease of its own. Each starts the same 300 orders,
//! beginning at a different one (a start of an existing id is a no-op), so
//! each drives the orders it created first. The parent SIGKILLs workers,
//! and SIGSTOPs some for longer than the lease (the others claim its
//! orders; the stopped one, continued, must be fenced). Step and compensation bodies record every execution (worker,
//! key, start, end) in a table beside the journal: the outside world the
//! workflows act on. After the chaos, a last worker finishes everything,
//! and the checks read the histories and that table:
//!
//! - no completed step ran again after its completion was stored;
//! - each failed order is compensated once per started step, in reverse
//!   start order;
//! - nothing is stuck: every order ends;
//! - no order's steps ran on two workers at overlapping times, except on a
//!   worker that was stopped while it ran them (the documented case).
//!
//! ```text
//! cargo test -p saga-runtime --features postgres --test postgres_crash
//! SAGA_PG_CRASH_SEED=7 SAGA_PG_CRASH_KILLS=30 ...   # another plan, more kills
//! ```
#![cfg(feature = "postgres")]

#[path = "support/child.rs"]
mod child;
#[path = "support/helpers.rs"]
mod helpers;
#[path = "support/rng.rs"]
mod rng;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use helpers::postgres;
use saga_runtime::Error;
use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;

const ORDERS: u64 = 300;
const LEASE: Duration = Duration::from_secs(1);
/// Every fifth order's last step fails for good, so it rolls back.
const FAILS_EVERY: u64 = 5;

/// The outside world: every execution of a step or compensation body.
struct World {
    client: tokio_postgres::Client,
    table: String,
    worker: i64,
}

impl World {
    /// Records one execution of `what` (a step or compensation) under
    /// `key` around `body`, sleeping a little inside, as a call would.
    async fn act(&self, kind: &str, step: &str, key: &str, order: u64) {
        let started = now_micros();
        let row = self
            .client
            .query_one(
                &format!(
                    "INSERT INTO {} (worker, kind, step, key, instance, started_us)
                     VALUES ($1, $2, $3, $4, $5, $6) RETURNING n",
                    self.table
                ),
                &[
                    &self.worker,
                    &kind,
                    &step,
                    &key,
                    &format!("o{order}"),
                    &started,
                ],
            )
            .await
            .expect("record an execution");
        let n: i64 = row.get(0);
        tokio::time::sleep(Duration::from_millis(5 + order % 20)).await;
        self.client
            .execute(
                &format!("UPDATE {} SET ended_us = $1 WHERE n = $2", self.table),
                &[&now_micros(), &n],
            )
            .await
            .expect("record an execution's end");
    }
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn micros(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

#[step(name = "reserve", rollback = unreserve)]
async fn reserve(key: IdempotencyKey, world: Service<World>, order: u64) -> Result<(), StepError> {
    world.act("step", "reserve", key.as_str(), order).await;
    Ok(())
}

#[rollback]
async fn unreserve(
    ctx: RollbackContext<'_, ()>,
    world: Service<World>,
    order: u64,
) -> Result<(), StepError> {
    world
        .act("comp", "reserve", ctx.key().as_str(), order)
        .await;
    Ok(())
}

#[step(name = "charge", rollback = refund)]
async fn charge(key: IdempotencyKey, world: Service<World>, order: u64) -> Result<(), StepError> {
    world.act("step", "charge", key.as_str(), order).await;
    Ok(())
}

#[rollback]
async fn refund(
    ctx: RollbackContext<'_, ()>,
    world: Service<World>,
    order: u64,
) -> Result<(), StepError> {
    world.act("comp", "charge", ctx.key().as_str(), order).await;
    Ok(())
}

#[step(name = "ship", rollback = unship)]
async fn ship(key: IdempotencyKey, world: Service<World>, order: u64) -> Result<(), StepError> {
    world.act("step", "ship", key.as_str(), order).await;
    if order.is_multiple_of(FAILS_EVERY) {
        return Err(StepError::fatal("the warehouse refused"));
    }
    Ok(())
}

#[rollback]
async fn unship(
    ctx: RollbackContext<'_, ()>,
    world: Service<World>,
    order: u64,
) -> Result<(), StepError> {
    world.act("comp", "ship", ctx.key().as_str(), order).await;
    Ok(())
}

#[workflow(name = "shop")]
async fn shop(ctx: WorkflowContext, order: u64) -> Result<(), WorkflowError> {
    reserve(&ctx, order).await?;
    charge(&ctx, order).await?;
    // Spreads the orders' ends over the chaos, and puts timers through it.
    ctx.sleep("cool-off", Duration::from_secs(1 + order % 5))
        .await?;
    ship(&ctx, order).await?;
    Ok(())
}

async fn connect_worker(schema: &str) -> Engine {
    let (client, connection) =
        tokio_postgres::connect(&postgres::database_url(), tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| postgres::missing(e));
    tokio::spawn(connection);
    let world = World {
        client,
        table: format!("{schema}.world"),
        worker: i64::from(std::process::id()),
    };
    Engine::builder()
        .postgres_schema(schema)
        .lease_time(LEASE)
        .provide(world)
        .register(shop)
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e))
}

/// A worker: makes sure every order is started, from its own first one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_worker() {
    let Some(dir) = child::child_dir() else {
        return;
    };
    let schema = dir.file_name().unwrap().to_str().unwrap().to_owned();
    child::report("connecting");
    let engine = connect_worker(&schema).await;
    child::report("driving");
    let first = u64::from(std::process::id()) * 97 % ORDERS;
    for order in (0..ORDERS).map(|k| (first + k) % ORDERS) {
        match engine.start(shop, &format!("o{order}"), order).await {
            Ok(_) => {}
            // Fenced while starting: the other workers start the rest.
            Err(Error::Fenced { .. }) => break,
            Err(e) => {
                eprintln!("worker {}: start o{order}: {e}", std::process::id());
                break;
            }
        }
    }
    std::future::pending::<()>().await;
}

/// One worker stop: SIGSTOP at `from` (micros). The worker is killed
/// soon after it is continued.
struct Stop {
    worker: i64,
    from: i64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_under_sigkill_and_sigstop_keep_every_promise() {
    if child::child_dir().is_some() {
        return;
    }
    let seed: u64 = std::env::var("SAGA_PG_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let kills: usize = std::env::var("SAGA_PG_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let mut rng = rng::Rng::new(seed);
    let schema = postgres::fresh_schema("multi").await;
    let admin = postgres::admin().await;
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {schema}.world (
                 n bigserial PRIMARY KEY, worker bigint NOT NULL, kind text NOT NULL,
                 step text NOT NULL, key text NOT NULL, instance text NOT NULL,
                 started_us bigint NOT NULL, ended_us bigint)"
        ))
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(&schema);
    let spawn = || child::spawn("child_worker", &dir);

    let mut workers: Vec<child::Child> = (0..3).map(|_| spawn()).collect();
    // When each killed worker died, for executions it never finished.
    let mut deaths: HashMap<i64, i64> = HashMap::new();
    let mut stops: Vec<Stop> = Vec::new();
    let (mut killed, mut stopped) = (0, 0);
    let chaos = Instant::now();
    while killed < kills {
        std::thread::sleep(Duration::from_millis(150 + rng.below(500)));
        let victim = rng.below(workers.len() as u64) as usize;
        let pid = i64::from(workers[victim].pid());
        if rng.below(4) == 0 {
            // Longer than the lease: the others claim its orders, then the
            // stopped worker runs on and must be fenced.
            let from = now_micros();
            workers[victim].signal("STOP");
            std::thread::sleep(LEASE + Duration::from_millis(300 + rng.below(700)));
            workers[victim].signal("CONT");
            stops.push(Stop { worker: pid, from });
            stopped += 1;
            // Let it try to write, then replace it.
            std::thread::sleep(Duration::from_millis(200));
        }
        let old = std::mem::replace(&mut workers[victim], spawn());
        old.kill();
        deaths.insert(pid, now_micros());
        killed += 1;
    }
    for worker in workers.drain(..) {
        let pid = i64::from(worker.pid());
        worker.kill();
        deaths.insert(pid, now_micros());
    }
    let chaos_end = now_micros();
    let chaos = chaos.elapsed();

    // The last worker: claims the orders as the last leases expire, and
    // finishes every one.
    let engine = helpers::within("the last take-over", connect_worker(&schema)).await;
    for order in 0..ORDERS {
        engine
            .start(shop, &format!("o{order}"), order)
            .await
            .unwrap();
    }
    let mut ended = BTreeMap::new();
    for order in 0..ORDERS {
        let run = engine.instance(&format!("o{order}")).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            let status = run.status().await.unwrap();
            if status.is_terminal() {
                break status;
            }
            assert!(Instant::now() < deadline, "o{order} is stuck at {status}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        ended.insert(order, (status, run.history().await.unwrap()));
    }

    let rows = admin
        .query(
            &format!(
                "SELECT worker, kind, step, key, instance, started_us, ended_us
                 FROM {schema}.world ORDER BY n"
            ),
            &[],
        )
        .await
        .unwrap();
    struct Execution {
        worker: i64,
        kind: String,
        step: String,
        key: String,
        started: i64,
        ended: i64,
    }
    let mut executions: HashMap<String, Vec<Execution>> = HashMap::new();
    for row in &rows {
        let worker: i64 = row.get(0);
        let ended: Option<i64> = row.get(6);
        executions.entry(row.get(4)).or_default().push(Execution {
            worker,
            kind: row.get(1),
            step: row.get(2),
            key: row.get(3),
            started: row.get(5),
            // Cut short by a kill (or by the end of the test).
            ended: ended.unwrap_or_else(|| deaths.get(&worker).copied().unwrap_or(i64::MAX)),
        });
    }
    // The documented exception: a worker stopped past its lease may run
    // on, from where it stopped, until it finds itself fenced (here: until
    // the parent kills it, soon after SIGCONT).
    let was_stopped = |e: &Execution| {
        stops
            .iter()
            .any(|s| s.worker == e.worker && s.from <= e.ended)
    };

    let mut violations = Vec::new();
    let mut rolled_back = 0;
    for (order, (status, history)) in &ended {
        let id = format!("o{order}");
        let mine = executions.get(&id).map(Vec::as_slice).unwrap_or(&[]);
        let fails = order.is_multiple_of(FAILS_EVERY);
        let expected = if fails {
            Status::Errored
        } else {
            Status::Complete
        };
        if *status != expected {
            violations.push(format!("{id} ended {status}, expected {expected}"));
        }
        // No completed step ran again after its completion was stored.
        for event in history {
            if let EventKind::StepCompleted { step, .. } = &event.kind {
                let done = micros(event.at);
                for e in mine
                    .iter()
                    .filter(|e| e.kind == "step" && e.step == *step && !was_stopped(e))
                {
                    if e.started > done {
                        violations.push(format!(
                            "{id}: step {step} ran again on worker {} after it completed",
                            e.worker
                        ));
                    }
                }
            }
        }
        // Compensated once per started step, in reverse start order.
        if fails {
            rolled_back += 1;
            let started: Vec<&str> = history
                .iter()
                .filter_map(|e| match &e.kind {
                    EventKind::StepStarted { step, .. } => Some(step.as_str()),
                    _ => None,
                })
                .collect();
            let compensated: Vec<&str> = history
                .iter()
                .filter_map(|e| match &e.kind {
                    EventKind::RollbackStepCompleted { step, .. } => Some(step.as_str()),
                    _ => None,
                })
                .collect();
            let reverse: Vec<&str> = started.iter().rev().copied().collect();
            if compensated != reverse {
                violations.push(format!(
                    "{id}: compensated {compensated:?}, expected {reverse:?}"
                ));
            }
            let mut keys: Vec<(&str, &str)> = mine
                .iter()
                .filter(|e| e.kind == "comp" && e.ended != i64::MAX)
                .map(|e| (e.step.as_str(), e.key.as_str()))
                .collect();
            keys.sort_unstable();
            keys.dedup();
            if keys.len() != started.len() {
                violations.push(format!(
                    "{id}: compensation keys that finished: {keys:?}, for steps {started:?}"
                ));
            }
        }
        // No two workers ran this order's steps at overlapping times,
        // unless one of them was stopped meanwhile.
        for (i, a) in mine.iter().enumerate() {
            for b in &mine[i + 1..] {
                if a.worker != b.worker
                    && a.started < b.ended
                    && b.started < a.ended
                    && !was_stopped(a)
                    && !was_stopped(b)
                {
                    violations.push(format!(
                        "{id}: {} {} on worker {} and {} {} on worker {} overlap",
                        a.kind, a.step, a.worker, b.kind, b.step, b.worker
                    ));
                }
            }
        }
    }
    engine.close().await;
    let during_chaos = rows
        .iter()
        .filter(|row| row.get::<_, i64>(5) < chaos_end)
        .count();
    // Work spreads: the orders were driven by many workers at once, not
    // by one while the others waited.
    let drivers: std::collections::HashSet<i64> = rows
        .iter()
        .filter(|row| row.get::<_, i64>(5) < chaos_end)
        .map(|row| row.get(0))
        .collect();
    if drivers.len() < 3 {
        violations.push(format!(
            "only {} workers ran steps during the chaos",
            drivers.len()
        ));
    }
    println!(
        "multi-worker crash: seed {seed}, {ORDERS} orders ({rolled_back} rolled back), \
         {killed} SIGKILLs, {stopped} SIGSTOPs past the lease, chaos {chaos:?}; \
         {} executions, {during_chaos} of them during the chaos, on {} workers",
        rows.len(),
        drivers.len()
    );
    if violations.is_empty() {
        postgres::drop_schema(&schema).await;
    }
    assert!(
        violations.is_empty(),
        "{} violations (schema {schema} kept):\n{}",
        violations.len(),
        violations.join("\n")
    );
}
