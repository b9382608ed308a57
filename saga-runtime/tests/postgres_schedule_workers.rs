//! One schedule, two worker processes on one PostgreSQL schema, one of
//! them SIGKILLed and restarted at random: every tick fires exactly once.
//!
//! Each worker (this binary, re-executed) declares the same schedule,
//! every second, catching up every missed tick (`CatchUp::All` with a
//! bound far above the test's length), so no tick is skipped by a policy.
//! The parent kills one of the two at a random moment, restarts it at
//! once, and again, until the schedule has fired 200 ticks (and there
//! were at least 10 kills); then it waits for every tick's instance to
//! end, and counts them: every tick time from the first to the last
//! appears in exactly one instance (by its derived id, and by the tick
//! the instance received), none twice, none missing. It prints the
//! figures.
//!
//! A test clock is per process, so the workers keep time by the wall
//! clock. The interval grammar names ticks by the second (1 s is the
//! shortest interval), and 200 seconds is too long for a test, so every
//! process reads a clock that runs 20 times faster than the wall clock
//! from an origin the parent hands to all of them: one time, read by each
//! process on its own, that no test drives, with a tick every 50 ms of
//! real time (about 10 s for 200).
//!
//! ```text
//! cargo test -p saga-runtime --features postgres --test postgres_schedule_workers -- --nocapture
//! SAGA_PG_SCHEDULE_SEED=7 ...   # another kill plan
//! ```
#![cfg(feature = "postgres")]

#[path = "support/child.rs"]
mod child;
#[path = "support/helpers.rs"]
mod helpers;
#[path = "support/rng.rs"]
mod rng;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use helpers::postgres;
use saga_runtime::prelude::*;
use saga_runtime::schedule::{CatchUp, Schedule, Tick};
use saga_runtime::time::{Clock, Sleep};

const SCHEDULE: &str = "every-second";
const TICKS: i64 = 200;
/// The fewest kills: the chaos goes on past 200 ticks until there were
/// this many.
const MIN_KILLS: u32 = 10;
/// How much faster than the wall clock the workers' clock runs.
const SPEED: u32 = 20;
/// The whole test, real time: well above what 200 ticks take.
const BOUND: Duration = Duration::from_secs(50);

/// The wall clock, `SPEED` times faster from `origin`: every process that
/// makes one from the same origin reads the same time.
struct FastClock {
    origin: SystemTime,
}

impl FastClock {
    fn new(origin_ms: u64) -> FastClock {
        FastClock {
            origin: UNIX_EPOCH + Duration::from_millis(origin_ms),
        }
    }

    /// The wall-clock time at which this clock reads `at`.
    fn real(&self, at: SystemTime) -> SystemTime {
        let since = at.duration_since(self.origin).unwrap_or_default();
        // Rounded up, so a wait never ends before the time it waits for.
        self.origin + since / SPEED + Duration::from_micros(1)
    }
}

impl Clock for FastClock {
    fn now(&self) -> SystemTime {
        let since = SystemTime::now()
            .duration_since(self.origin)
            .unwrap_or_default();
        self.origin + since * SPEED
    }

    fn sleep_until(&self, deadline: SystemTime) -> Sleep {
        let real = self.real(deadline);
        Box::pin(async move {
            if let Ok(left) = real.duration_since(SystemTime::now()) {
                tokio::time::sleep(left).await;
            }
        })
    }
}

/// A tick's instance: returns the tick it was given.
#[workflow(name = "tick")]
async fn fire_tick(_ctx: WorkflowContext, at: i64) -> Result<i64, WorkflowError> {
    Ok(at)
}

async fn connect_worker(schema: &str, origin_ms: u64) -> Engine {
    let schedule = Schedule::every(SCHEDULE, "1 second")
        .catch_up(CatchUp::All { at_most: 100_000 })
        .start(fire_tick, |tick: Tick| tick.unix_seconds());
    Engine::builder()
        .postgres_schema(schema)
        .lease_time(Duration::from_millis(500))
        .poll_interval(Duration::from_millis(100))
        .clock(FastClock::new(origin_ms))
        .schedule(schedule)
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e))
}

/// A worker: declares the schedule and fires it until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_worker() {
    let Some(dir) = child::child_dir() else {
        return;
    };
    // `<temp>/<schema>/<the clock's origin, ms>`.
    let name = |path: &std::path::Path| path.file_name().unwrap().to_str().unwrap().to_owned();
    let origin_ms = name(&dir).parse().expect("the clock's origin");
    let schema = name(dir.parent().unwrap());
    let _engine = connect_worker(&schema, origin_ms).await;
    child::report("firing");
    std::future::pending::<()>().await;
}

/// The id of the tick at `at`: `every-second.20301012T020000Z`.
fn tick_id(at: i64) -> String {
    let at = jiff::Timestamp::from_second(at).expect("a time");
    format!("{SCHEDULE}.{}", at.strftime("%Y%m%dT%H%M%SZ"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_one_killed_at_random_fire_every_tick_once() {
    if child::child_dir().is_some() {
        return;
    }
    let seed: u64 = std::env::var("SAGA_PG_SCHEDULE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut rng = rng::Rng::new(seed);
    let began = Instant::now();
    let schema = postgres::fresh_schema("schedkill").await;
    let origin_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // The workers learn the schema and the clock's origin from it.
    let dir = std::env::temp_dir()
        .join(&schema)
        .join(origin_ms.to_string());
    let spawn = || {
        let mut worker = child::spawn("child_worker", &dir);
        worker.wait_for("firing");
        worker
    };
    let mut workers = [spawn(), spawn()];
    // Reads the store, fires nothing: it declares no schedule.
    let observer = Engine::builder()
        .postgres_schema(&schema)
        .clock(FastClock::new(origin_ms))
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e));
    let fired = || async {
        let listed = observer.schedules().list().await.unwrap();
        let info = listed.into_iter().find(|s| s.name == SCHEDULE);
        info.and_then(|s| s.last_tick)
    };
    let first = loop {
        if let Some(last) = fired().await {
            break last;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let last_wanted = first + Duration::from_secs(TICKS as u64 - 1);

    let mut kills = 0;
    // At least MIN_KILLS, however slow the machine is to restart one.
    while kills < MIN_KILLS || fired().await.is_none_or(|last| last < last_wanted) {
        assert!(began.elapsed() < BOUND, "200 ticks took too long");
        tokio::time::sleep(Duration::from_millis(100 + rng.below(900))).await;
        let victim = rng.below(2) as usize;
        workers[victim].signal("KILL");
        let old = std::mem::replace(&mut workers[victim], spawn());
        old.kill();
        kills += 1;
    }
    // Every tick's instance ends (a killed worker's, once its lease ran out).
    let ids = loop {
        assert!(began.elapsed() < BOUND, "the ticks' instances did not end");
        let listed = observer
            .list(&ListFilter::all().id_prefix(format!("{SCHEDULE}.")))
            .await
            .unwrap();
        if listed.iter().all(|i| i.status == Status::Complete) {
            break listed.into_iter().map(|i| i.id).collect::<Vec<_>>();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for worker in workers {
        worker.kill();
    }

    // Each tick time by the instances that received it.
    let mut received: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for id in &ids {
        let at: i64 = observer.instance(id).await.unwrap().result().await.unwrap();
        assert_eq!(tick_id(at), *id, "{id} received another tick");
        received.entry(at).or_default().push(id.clone());
    }
    let tagged = observer
        .list(&ListFilter::all().tag("schedule", SCHEDULE))
        .await
        .unwrap()
        .len();
    let (lo, hi) = (
        *received.keys().next().unwrap(),
        *received.keys().last().unwrap(),
    );
    let duplicates = received.values().filter(|ids| ids.len() > 1).count();
    let missed = (lo..=hi).filter(|t| !received.contains_key(t)).count();
    let ticks = received.len();
    println!(
        "schedule exactly-once: ticks={ticks} (from {lo} to {hi}) instances={} tagged={tagged} kills={kills} duplicates={duplicates} missed={missed} seed={seed} in {:.1} s",
        ids.len(),
        began.elapsed().as_secs_f64()
    );
    assert_eq!((duplicates, missed), (0, 0));
    assert!(ticks >= TICKS as usize, "{ticks} ticks");
    assert_eq!(ids.len(), ticks);
    observer.close().await;
    postgres::drop_schema(&schema).await;
}
