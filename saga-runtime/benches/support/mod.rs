//! What the bench binaries share: the filter `cargo bench` passes, scratch
//! directories, the raw loop every figure is compared with, and the table
//! they print into; in `postgres`, the database and worker processes of
//! the PostgreSQL benches. Every line names its
//! workload, so the output of both binaries reads as one table.

// Each bench binary uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use saga_runtime::prelude::*;
use saga_runtime::step;

/// The database and worker processes of the PostgreSQL benches.
#[cfg(feature = "postgres")]
pub(crate) mod postgres;

/// Whether `cargo bench [FILTER]` asked for the bench `name`. Cargo passes
/// `--bench`; a filter that names another bench means not this one.
pub(crate) fn wanted(name: &str) -> bool {
    std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .all(|filter| name.contains(&filter))
}

/// A fresh directory under the system's temp dir, removed when dropped.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    pub(crate) fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("saga-bench-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Scratch(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The table's header, under a title that says what the figures are.
pub(crate) fn header(title: &str) {
    println!();
    println!("{title}");
    println!(
        "{:<36} {:<28} {:>14}  compared with",
        "workload", "measure", "figure"
    );
    println!("{}", "-".repeat(100));
}

/// One line: the workload, what is measured, the figure, and what it is
/// compared with (`ratio`, or a target where no raw figure applies).
pub(crate) fn row(workload: &str, measure: &str, figure: &str, compared: &str) {
    println!("{workload:<36} {measure:<28} {figure:>14}  {compared}");
}

/// Writes of the raw loop, per round.
const RAW_WRITES: usize = 10_000;

/// The raw loop: one insert and one flush per write, the least a durable
/// write costs on sled. Every other line is compared with it.
pub(crate) struct Raw {
    pub(crate) writes_per_second: f64,
    /// Every write's latency, sorted.
    pub(crate) write_nanos: Vec<u64>,
    pub(crate) disk_bytes_per_write: f64,
}

/// The median of `rounds` rounds of the raw loop.
pub(crate) fn raw_loop(rounds: usize) -> Raw {
    let mut measured: Vec<Raw> = (0..rounds.max(1)).map(|_| raw_round()).collect();
    measured.sort_by(|a, b| a.writes_per_second.total_cmp(&b.writes_per_second));
    let median = measured.len() / 2;
    measured.swap_remove(median)
}

fn raw_round() -> Raw {
    let scratch = Scratch::new("raw");
    let db = sled::open(scratch.path()).expect("open sled");
    let value = [7u8; 64];
    let mut write_nanos = Vec::with_capacity(RAW_WRITES);
    let started = Instant::now();
    for i in 0..RAW_WRITES as u64 {
        let write = Instant::now();
        db.insert(i.to_be_bytes(), &value[..]).expect("insert");
        db.flush().expect("flush");
        write_nanos.push(nanos_between(write, Instant::now()));
    }
    let writes_per_second = RAW_WRITES as f64 / started.elapsed().as_secs_f64();
    drop(db);
    write_nanos.sort_unstable();
    Raw {
        writes_per_second,
        write_nanos,
        disk_bytes_per_write: dir_bytes(scratch.path()) as f64 / RAW_WRITES as f64,
    }
}

/// The sum of the sizes of the files under `dir`.
pub(crate) fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).expect("read a store directory") {
        let entry = entry.expect("a directory entry");
        let metadata = entry.metadata().expect("file metadata");
        total += if metadata.is_dir() {
            dir_bytes(&entry.path())
        } else {
            metadata.len()
        };
    }
    total
}

/// The process's CPU time so far, user and system (`/proc/self/stat`,
/// in the kernel's 1/100 s ticks): a bench's figure of the engine's own
/// cost, which does not swing with the disk as throughput does.
pub(crate) fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's closing parenthesis: state is the
    // first, utime the 12th, stime the 13th.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// Each step's latency in nanoseconds, as the workflow body saw it.
pub(crate) type StepNanos = [u64; STEPS];

/// Step latencies as the workflow body sees them: a lap ends when a step's
/// output arrives, and the next step is called right after, so each lap is
/// one step from its call to its output.
///
/// It reads the wall clock, which `#[workflow]` rejects in a body (a replay
/// would see other times); behind a function it passes, and a bench that
/// never restarts has no replay to disagree with. Both workflows use it.
pub(crate) struct Laps {
    since: Instant,
    nanos: StepNanos,
    done: usize,
}

impl Laps {
    pub(crate) fn start() -> Laps {
        Laps {
            since: Instant::now(),
            nanos: [0; STEPS],
            done: 0,
        }
    }

    pub(crate) fn lap(&mut self) {
        let now = Instant::now();
        self.nanos[self.done] = nanos_between(self.since, now);
        self.since = now;
        self.done += 1;
    }

    pub(crate) fn nanos(self) -> StepNanos {
        self.nanos
    }
}

/// Steps per workflow, throughout.
pub(crate) const STEPS: usize = 3;

pub(crate) fn nanos_between(earlier: Instant, later: Instant) -> u64 {
    u64::try_from(later.duration_since(earlier).as_nanos()).unwrap_or(u64::MAX)
}

/// `1234567.8` as `1,234,568`.
pub(crate) fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

// The three steps of the benches' workflow: sequential, two with a key.

#[step(name = "reserve")]
pub(crate) async fn reserve(key: IdempotencyKey, n: u64) -> Result<u64, StepError> {
    Ok(n + key.as_str().len() as u64)
}

#[step(name = "charge", read_only)]
pub(crate) async fn charge(reserved: u64) -> Result<u64, StepError> {
    Ok(reserved * 2)
}

#[step(name = "confirm")]
pub(crate) async fn confirm(key: IdempotencyKey, charged: u64) -> Result<u64, StepError> {
    Ok(charged + key.as_str().len() as u64)
}
