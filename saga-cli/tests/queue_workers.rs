//! One queue of concurrency 5, three worker processes on one PostgreSQL
//! schema, SIGKILLed at random: never more than 5 of the queue's
//! instances run at once, no slot is leaked, all finish, and the `saga`
//! binary ends by reporting none running.
//!
//! Each worker (this binary, re-executed) declares the queue `bank-api`
//! of concurrency 5 and runs the workflow `queued-call`, whose one step
//! records its execution in a table beside the journal (worker, instance,
//! start and end, in microseconds of the wall clock), sleeping 100-300 ms
//! between the two: the call to the bank. The first worker starts the
//! instances on the queue; every worker takes from it. The parent
//! SIGKILLs a worker at random moments and starts it again at once, until
//! every instance is complete (and there were at least `MIN_KILLS` kills).
//!
//! Then the checks read that table. An execution cut off by a kill has no
//! end: it ends, at the latest, when its worker was reaped, which the
//! parent recorded. Its instance keeps its slot until another worker
//! claims it once the lease ran out, and runs the step again: that is the
//! slot held, not leaked, and it is counted once at a time. A sweep over
//! the executions' intervals finds the most that overlapped: at most 5. A
//! step runs inside its instance's slot, so more than 5 at once would be
//! a slot given out twice. Every instance is complete, and both
//! `engine.instance_counts()` and `saga queues --json` say that no
//! instance of the queue waits or holds a slot.
//!
//! A worker that is stopped (SIGSTOP) past its lease while its step runs
//! would let another run the step beside it: that is the documented limit
//! of leases, and out of scope here (only SIGKILL). The lease is 1 s, far
//! above what a loaded machine stalls a live worker.
//!
//! ```text
//! cargo test -p saga-cli --test queue_workers -- --nocapture
//! SAGA_PG_QUEUE_SEED=7 ...   # another kill plan
//! ```

#[path = "../../saga-runtime/tests/support/child.rs"]
mod child;
#[path = "../../saga-runtime/tests/support/postgres.rs"]
mod postgres;
#[path = "../../saga-runtime/tests/support/rng.rs"]
mod rng;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use saga_runtime::Engine;
use saga_runtime::prelude::*;
use saga_runtime::queue::Queue;

const QUEUE: &str = "bank-api";
const CONCURRENCY: usize = 5;
const INSTANCES: u64 = 90;
const WORKERS: usize = 3;
/// The fewest kills: the chaos goes on until every instance is complete
/// and there were this many.
const MIN_KILLS: u32 = 6;
const LEASE: Duration = Duration::from_secs(1);
/// The whole test, real time: far above what it takes (about 15 s).
const BOUND: Duration = Duration::from_secs(120);
/// The worker that starts the instances: the first of the first slot.
const STARTER: &str = "w0g0";

/// The outside world the step acts on: a table of its executions.
struct Calls {
    client: tokio_postgres::Client,
    table: String,
    worker: String,
}

/// Microseconds since the epoch, by the wall clock every process shares.
fn now_us() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(since.as_micros()).unwrap()
}

/// The call to the bank: recorded as begun, 100-300 ms long, recorded as
/// ended.
#[step(name = "call-bank")]
async fn call_bank(step: StepContext, calls: Service<Calls>, n: u64) -> Result<(), StepError> {
    let row = calls
        .client
        .query_one(
            &format!(
                "INSERT INTO {} (worker, instance, call_key, start_us) VALUES ($1, $2, $3, $4) RETURNING n",
                calls.table
            ),
            &[
                &calls.worker,
                &step.instance_id(),
                &step.key().as_str(),
                &now_us(),
            ],
        )
        .await
        .map_err(StepError::retryable)?;
    let row: i64 = row.get(0);
    tokio::time::sleep(Duration::from_millis(100 + rng::mix(n, &[]) % 200)).await;
    let ended = now_us();
    calls
        .client
        .execute(
            &format!("UPDATE {} SET end_us = $1 WHERE n = $2", calls.table),
            &[&ended, &row],
        )
        .await
        .map_err(StepError::retryable)?;
    Ok(())
}

#[workflow(name = "queued-call")]
async fn queued_call(ctx: WorkflowContext, n: u64) -> Result<(), WorkflowError> {
    call_bank(&ctx, n).await?;
    Ok(())
}

fn instance_id(n: u64) -> String {
    format!("t-{n}")
}

/// The table of executions, in the test's schema.
fn calls_table(schema: &str) -> String {
    format!("{schema}.bank_calls")
}

/// A worker: declares the queue, takes from it until it is killed; the
/// first one starts the instances too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_worker() {
    let Some(dir) = child::child_dir() else {
        return;
    };
    // `<temp>/<schema>/<worker>`.
    let name = |path: &std::path::Path| path.file_name().unwrap().to_str().unwrap().to_owned();
    let worker = name(&dir);
    let schema = name(dir.parent().unwrap());
    let (client, connection) =
        tokio_postgres::connect(&postgres::database_url(), tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| postgres::missing(e));
    tokio::spawn(connection);
    let calls = Calls {
        client,
        table: calls_table(&schema),
        worker: worker.clone(),
    };
    let engine = Engine::builder()
        .postgres_schema(&schema)
        .lease_time(LEASE)
        .poll_interval(Duration::from_millis(50))
        .queue(Queue::new(QUEUE).concurrency(CONCURRENCY as u32))
        .provide(calls)
        .register(queued_call)
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e));
    child::report("taking");
    if worker == STARTER {
        for n in 0..INSTANCES {
            engine
                .start_on(QUEUE, queued_call, &instance_id(n), n)
                .await
                .expect("a start on the queue");
        }
        child::report("started");
    }
    std::future::pending::<()>().await;
}

/// Runs `saga --database-url .. queues --json` on `schema`.
fn saga_queues(url: &str, schema: &str) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_saga"))
        .args(["--database-url", url, "queues", "--json"])
        .env("SAGA_DATABASE_SCHEMA", schema)
        .output()
        .expect("the saga binary runs");
    assert!(
        output.status.success(),
        "saga queues: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("saga queues --json prints JSON")
}

/// One execution of the step: where it ran, and when (µs).
#[derive(Debug)]
struct Execution {
    worker: String,
    instance: String,
    start: i64,
    /// `None`: cut off by its worker's kill.
    end: Option<i64>,
}

/// The most intervals that overlap at one moment, and one such moment.
/// An interval ends before another starting at the same microsecond.
fn most_at_once(intervals: &[(i64, i64)]) -> (usize, i64) {
    let mut edges: Vec<(i64, i32)> = intervals
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    edges.sort();
    let (mut now, mut most, mut at) = (0i64, 0i64, 0);
    for (time, delta) in edges {
        now += i64::from(delta);
        if now > most {
            (most, at) = (now, time);
        }
    }
    (usize::try_from(most).unwrap(), at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_killed_at_random_never_run_more_than_the_queues_concurrency() {
    if child::child_dir().is_some() {
        return;
    }
    let seed: u64 = std::env::var("SAGA_PG_QUEUE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut rng = rng::Rng::new(seed);
    let began = Instant::now();
    let url = postgres::database_url();
    let schema = postgres::fresh_schema("qkill").await;
    // Reads the store, takes nothing: it runs no workflow. It makes the
    // schema, for the table of executions beside the journal.
    let observer = Engine::builder()
        .postgres_schema(&schema)
        .connect(&url)
        .await
        .unwrap_or_else(|e| postgres::missing(e));
    let admin = postgres::admin().await;
    admin
        .batch_execute(&format!(
            "CREATE TABLE {} (n bigserial PRIMARY KEY, worker text NOT NULL, instance text NOT NULL,
                call_key text NOT NULL, start_us bigint NOT NULL, end_us bigint)",
            calls_table(&schema)
        ))
        .await
        .unwrap();

    // The workers learn the schema and their name from it.
    let dir = std::env::temp_dir().join(&schema);
    let spawn = |worker: &str| {
        let mut child = child::spawn("child_worker", &dir.join(worker));
        child.wait_for("taking");
        child
    };
    let mut generation = [0u32; WORKERS];
    let mut workers: Vec<Option<(String, child::Child)>> = (0..WORKERS)
        .map(|slot| {
            let name = format!("w{slot}g0");
            let child = spawn(&name);
            Some((name, child))
        })
        .collect();
    workers[0].as_mut().unwrap().1.wait_for("started");

    let complete = || async {
        let filter = ListFilter::all().status(Status::Complete);
        observer.list(&filter).await.unwrap().len() as u64
    };
    // When each killed worker was reaped, µs: its cut executions ended by then.
    let mut reaped: BTreeMap<String, i64> = BTreeMap::new();
    let mut kills = 0u32;
    while kills < MIN_KILLS || complete().await < INSTANCES {
        assert!(
            began.elapsed() < BOUND,
            "the instances did not finish: {} of {INSTANCES} complete after {kills} kills",
            complete().await
        );
        tokio::time::sleep(Duration::from_millis(150 + rng.below(500))).await;
        let slot = rng.below(WORKERS as u64) as usize;
        let (name, victim) = workers[slot].take().unwrap();
        victim.kill();
        reaped.insert(name, now_us());
        kills += 1;
        generation[slot] += 1;
        let name = format!("w{slot}g{}", generation[slot]);
        let child = spawn(&name);
        workers[slot] = Some((name, child));
    }
    let seconds = began.elapsed().as_secs_f64();
    for (_, worker) in workers.into_iter().flatten() {
        worker.kill();
    }

    // Every instance is complete, none other exists.
    let listed = observer.list(&ListFilter::all()).await.unwrap();
    assert_eq!(listed.len() as u64, INSTANCES);
    for info in &listed {
        assert_eq!(info.status, Status::Complete, "{info:?}");
        assert_eq!(info.queue.as_deref(), Some(QUEUE), "{info:?}");
    }

    let rows = admin
        .query(
            &format!(
                "SELECT worker, instance, start_us, end_us FROM {} ORDER BY n",
                calls_table(&schema)
            ),
            &[],
        )
        .await
        .unwrap();
    let executions: Vec<Execution> = rows
        .iter()
        .map(|row| Execution {
            worker: row.get(0),
            instance: row.get(1),
            start: row.get(2),
            end: row.get(3),
        })
        .collect();
    let mut intervals = Vec::new();
    for e in &executions {
        let end = match e.end {
            Some(end) => end,
            None => *reaped.get(&e.worker).unwrap_or_else(|| {
                panic!("an execution has no end, and its worker was not killed: {e:?}")
            }),
        };
        assert!(end >= e.start, "{e:?} ended before it began");
        intervals.push((e.start, end));
    }
    // Every instance's step ran to its end at least once.
    let ended: BTreeSet<&str> = executions
        .iter()
        .filter(|e| e.end.is_some())
        .map(|e| e.instance.as_str())
        .collect();
    assert_eq!(ended.len() as u64, INSTANCES, "some step never ended");
    let (most, at) = most_at_once(&intervals);
    let cut = executions.iter().filter(|e| e.end.is_none()).count();
    // The worker slots whose processes ran a step to its end.
    let slots: BTreeSet<&str> = executions
        .iter()
        .filter(|e| e.end.is_some())
        .map(|e| &e.worker[..2])
        .collect();
    println!(
        "queue under SIGKILL: instances={INSTANCES} executions={} cut_by_a_kill={cut} kills={kills} most_at_once={most} (limit {CONCURRENCY}) worker_slots={} seed={seed} in {seconds:.1} s",
        executions.len(),
        slots.len(),
    );
    if most > CONCURRENCY {
        let running: Vec<_> = executions
            .iter()
            .zip(&intervals)
            .filter(|(_, (start, end))| *start <= at && at < *end)
            .map(|(e, _)| e)
            .collect();
        panic!("{most} ran at once, at {at} µs: {running:#?}");
    }
    assert!(most >= 2, "the queue never ran two at once: {most}");
    assert!(slots.len() >= 2, "the work did not spread over the workers");

    // No slot is held: nothing of the queue waits or runs.
    let counts = observer.instance_counts().await.unwrap();
    let depth = counts
        .queues
        .iter()
        .find(|d| d.queue == QUEUE)
        .expect("the queue in the counts");
    assert_eq!((depth.waiting, depth.started), (0, 0), "{depth:?}");
    let complete = counts
        .statuses
        .iter()
        .find(|(s, _)| *s == Status::Complete)
        .map_or(0, |(_, n)| *n);
    assert_eq!(complete, INSTANCES);
    let (url2, schema2) = (url.clone(), schema.clone());
    let shown = tokio::task::spawn_blocking(move || saga_queues(&url2, &schema2))
        .await
        .unwrap();
    let queue = shown["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == QUEUE)
        .unwrap_or_else(|| panic!("no {QUEUE} in saga queues: {shown}"));
    assert_eq!(queue["waiting"], 0, "{shown}");
    // The instances that left the wait and have not ended: those that
    // hold a slot.
    assert_eq!(queue["started"], 0, "{shown}");

    observer.close().await;
    postgres::drop_schema(&schema).await;
}
