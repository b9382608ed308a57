//! Start-up against history: a sled store holding N ended instances and
//! N/10 asleep (a day after one step), then a new process opens it,
//! registers two workflows and runs one to its end. Measured in that
//! process: the time until its first workflow completes, and the resident
//! memory it added; beside a bare `sled::open` of the same directory in a
//! process of its own, in the same run (sled's own open grows with its
//! data, so what saga adds is the difference). Median of the rounds.
//!
//! The store is filled through the `Store` trait, not by running a million
//! workflows: two instances run once on an engine (one ended, one asleep),
//! and their journals and index entries are copied under new ids, the bytes
//! the engine wrote.
//!
//! Then, in this process: the first page of a selective filter (the
//! waiting instances; a tag `TAGGED` ended instances carry), and the
//! retention rate (a sweep that removes every ended instance) beside the
//! rate at which the engine starts and runs one-step instances.
//!
//! `cargo bench -p saga-runtime --bench history_scale`. Environment:
//! `SAGA_SCALE_ENDED` (ended instances per size, comma-separated; default
//! `100000,1000000`, a tenth as many asleep), `SAGA_SCALE_ROUNDS` (default
//! 5). The last size is compared with the first.

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use saga_runtime::StartOptions;
use saga_runtime::inspect::{ListFilter, Page};
use saga_runtime::prelude::*;
use saga_runtime::store::{IndexFacts, IndexQuery, IndexRow, SledStore, Store};
use support::{Scratch, charge, header, row, thousands};

/// Ended instances that carry the tag `batch=b7`, at every size.
const TAGGED: usize = 100;

/// The first page of a selective filter is this long.
const PAGE: usize = 50;

/// The argument a measuring child process is started with.
const CHILD: &str = "--history-scale-child";

#[workflow(name = "one-step")]
async fn one_step(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    Ok(charge(&ctx, n).await?)
}

#[workflow(name = "nap-a-day")]
async fn nap_a_day(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let charged = charge(&ctx, n).await?;
    ctx.sleep("nap", "1 day").await?;
    Ok(charged)
}

/// The process's resident set size in bytes, from /proc/self/statm.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm (Linux)");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("resident pages in statm");
    // The page size of every Linux this runs on.
    pages * 4096
}

/// One instance's stored bytes: its journal and index entry, to copy.
struct Template {
    journal: Vec<(u64, Vec<u8>)>,
    summary: Vec<u8>,
    facts: Vec<u8>,
    created_at: u64,
    status: &'static str,
    workflow: &'static str,
    /// Its tags, as the engine filed them.
    tags: Vec<(String, String)>,
    /// When it ended (ms since the Unix epoch).
    finished_at: Option<u64>,
    active: bool,
    /// Its timer, as the engine filed it (a sleeper's wake).
    wake: Option<(u64, bool)>,
}

impl Template {
    async fn read(
        store: &SledStore,
        id: &str,
        (workflow, status): (&'static str, &'static str),
        tags: &[(&str, &str)],
        finished_at: Option<u64>,
    ) -> Template {
        let active = finished_at.is_none();
        // In start order, the only order whose positions keep start times.
        let query = IndexQuery {
            limit: 1,
            ..IndexQuery::default()
        };
        let page = store
            .index_page(&query, &|e| e.id == id)
            .await
            .expect("a page");
        let entry = page
            .entries
            .into_iter()
            .next()
            .expect("the template's entry");
        let created_at = u64::try_from(entry.position.started_micros / 1000).expect("a start time");
        Template {
            journal: store.journal(id).await.expect("the template's journal"),
            summary: entry.summary,
            facts: entry.facts.expect("facts"),
            created_at,
            status,
            workflow,
            tags: tags
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            finished_at,
            active,
            wake: store.timer_of(id).await.expect("the template's timer"),
        }
    }

    /// Stores a copy of the instance under `id`, as the engine would.
    async fn copy(&self, store: &SledStore, id: &str) {
        let row = IndexRow {
            summary: &self.summary,
            workflow: self.workflow,
            status: self.status,
            active: self.active,
            wake: self.wake,
            facts: Some(IndexFacts {
                encoded: &self.facts,
                created_at: self.created_at,
                finished_at: self.finished_at,
                parent: None,
                tags: &self.tags,
                rollback_failed: false,
                failed_compensation: false,
                queue: None,
            }),
        };
        let ((_, first), rest) = self.journal.split_first().expect("a record");
        assert!(store.create(id, &row, first).await.expect("create"));
        for (seq, record) in rest {
            store.append(id, *seq, record).expect("append");
        }
    }
}

/// Runs the two templates on an engine, then copies them: `ended` ended
/// instances and `asleep` asleep, on two threads.
fn fill(dir: &Path, ended: usize, asleep: usize) -> Duration {
    let started = Instant::now();
    let runtime = runtime();
    let ended_at = runtime.block_on(async {
        let engine = Engine::open(dir).expect("open the store");
        engine.register(one_step).expect("register");
        engine.register(nap_a_day).expect("register");
        let run = engine.start(one_step, "tpl-ended", 1).await.expect("start");
        run.result().await.expect("the template ends");
        let tagged = StartOptions::new().tag("batch", "b7");
        let run = engine
            .start_with(one_step, "tpl-tagged", 1, tagged)
            .await
            .expect("start");
        run.result().await.expect("the template ends");
        engine
            .start(nap_a_day, "tpl-asleep", 1)
            .await
            .expect("start");
        let waiting = ListFilter::all().status(Status::Waiting);
        while engine.list(&waiting).await.expect("list").is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut ended_at = Vec::new();
        for id in ["tpl-ended", "tpl-tagged"] {
            let info = engine.instance(id).await.expect("a template");
            let at = info.info().await.expect("its info").finished_at;
            let ms = at.and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok());
            ended_at.push(ms.map(|d| u64::try_from(d.as_millis()).expect("ms")));
        }
        engine.close().await;
        ended_at
    });
    let store = Arc::new(SledStore::open(dir).expect("open the store"));
    let (done, sleeping, tagged) = runtime.block_on(async {
        let ended = ("one-step", "complete");
        (
            Template::read(&store, "tpl-ended", ended, &[], ended_at[0]).await,
            Template::read(&store, "tpl-asleep", ("nap-a-day", "waiting"), &[], None).await,
            Template::read(&store, "tpl-tagged", ended, &[("batch", "b7")], ended_at[1]).await,
        )
    });
    let (done, sleeping, tagged) = (Arc::new(done), Arc::new(sleeping), Arc::new(tagged));
    std::thread::scope(|scope| {
        for part in 0..2 {
            let (store, done, sleeping) = (store.clone(), done.clone(), sleeping.clone());
            let tagged = tagged.clone();
            let handle = runtime.handle().clone();
            scope.spawn(move || {
                handle.block_on(async {
                    for i in (part..ended).step_by(2) {
                        done.copy(&store, &format!("ended-{i:08}")).await;
                    }
                    for i in (part..asleep).step_by(2) {
                        sleeping.copy(&store, &format!("asleep-{i:08}")).await;
                    }
                    for i in (part..TAGGED).step_by(2) {
                        tagged.copy(&store, &format!("tagged-{i:08}")).await;
                    }
                })
            });
        }
    });
    // As a process that wrote them and closed would leave the store.
    store.flush().expect("flush");
    store.close();
    drop(store);
    started.elapsed()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime")
}

/// What a measuring process found: seconds until ready, bytes added then,
/// and bytes added once its resident memory stopped growing (what resumed
/// in the background after the first workflow ended).
struct Measured {
    seconds: f64,
    bytes: u64,
    settled: u64,
}

/// Polls the resident memory until it grew by less than 1% in a second
/// (at most two minutes): what resuming the sleepers holds.
async fn settled_rss() -> u64 {
    let mut last = rss_bytes();
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = rss_bytes();
        if now < last + last / 100 {
            return now;
        }
        last = now;
    }
    last
}

/// The child: opens `dir` as `what` says and prints what it measured.
fn child(what: &str, dir: &Path) {
    let runtime = runtime();
    let before = rss_bytes();
    let started = Instant::now();
    match what {
        "saga" => runtime.block_on(async {
            let engine = Engine::open(dir).expect("open the store");
            engine.register(one_step).expect("register");
            engine.register(nap_a_day).expect("register");
            let id = format!("probe-{}", std::process::id());
            let run = engine.start(one_step, &id, 7).await.expect("start");
            run.result().await.expect("the probe completes");
            let (seconds, bytes) = (started.elapsed().as_secs_f64(), rss_bytes() - before);
            let settled = settled_rss().await - before;
            println!("measured {seconds} {bytes} {settled}");
            engine.close().await;
        }),
        "sled" => {
            let db = sled::open(dir).expect("sled opens the store");
            let (seconds, bytes) = (started.elapsed().as_secs_f64(), rss_bytes() - before);
            println!("measured {seconds} {bytes} {bytes}");
            drop(db);
        }
        other => panic!("unknown measure {other:?}"),
    }
}

fn measure_in_child(what: &str, dir: &Path) -> Measured {
    let output = Command::new(std::env::current_exe().expect("this bench's path"))
        .args([CHILD, what])
        .arg(dir)
        .output()
        .expect("run a measuring process");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("measured "))
        .unwrap_or_else(|| {
            panic!(
                "the {what} process measured nothing: {stdout}{}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let mut parts = line.split_whitespace();
    Measured {
        seconds: parts.next().and_then(|s| s.parse().ok()).expect("seconds"),
        bytes: parts.next().and_then(|s| s.parse().ok()).expect("bytes"),
        settled: parts.next().and_then(|s| s.parse().ok()).expect("bytes"),
    }
}

/// The medians of `rounds` rounds, saga and bare sled in turn.
struct Size {
    ended: usize,
    saga: Measured,
    sled: Measured,
}

fn median(mut measured: Vec<Measured>) -> Measured {
    measured.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let seconds = measured[measured.len() / 2].seconds;
    let middle = |of: fn(&Measured) -> u64| {
        let mut bytes: Vec<u64> = measured.iter().map(of).collect();
        bytes.sort_unstable();
        bytes[bytes.len() / 2]
    };
    Measured {
        seconds,
        bytes: middle(|m| m.bytes),
        settled: middle(|m| m.settled),
    }
}

fn measure_size(ended: usize, rounds: usize) -> Size {
    let asleep = ended / 10;
    let scratch = Scratch::new(&format!("history-{ended}"));
    let filled = fill(scratch.path(), ended, asleep);
    let workload = format!(
        "{} ended + {} asleep",
        thousands(ended as f64),
        thousands(asleep as f64)
    );
    row(
        &workload,
        "fill (2 templates, copied)",
        &format!("{:.1} s", filled.as_secs_f64()),
        &format!("{} MiB on disk", support::dir_bytes(scratch.path()) >> 20),
    );
    let (mut saga, mut sled) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        saga.push(measure_in_child("saga", scratch.path()));
        sled.push(measure_in_child("sled", scratch.path()));
    }
    let size = Size {
        ended,
        saga: median(saga),
        sled: median(sled),
    };
    let mib = |bytes: u64| format!("{:.1} MiB", bytes as f64 / 1048576.0);
    let added = |m: &Measured| {
        format!(
            "saga adds {:.3} s, {}",
            (m.seconds - size.sled.seconds).max(0.0),
            mib(m.bytes.saturating_sub(size.sled.bytes))
        )
    };
    row(
        &workload,
        "ready: first workflow done",
        &format!("{:.3} s", size.saga.seconds),
        &format!("bare sled::open {:.3} s", size.sled.seconds),
    );
    row(
        &workload,
        "resident memory added",
        &mib(size.saga.bytes),
        &format!("bare sled::open {}", mib(size.sled.bytes)),
    );
    row(
        &workload,
        "over bare sled (medians)",
        "",
        &added(&size.saga),
    );
    row(
        &workload,
        "memory once settled",
        &mib(size.saga.settled),
        "(what resumed in the background)",
    );
    pages_and_retention(scratch.path(), &workload);
    size
}

/// In this process, on the store of `ended` instances: the first page of
/// a selective filter (median of 5), then the retention rate, against the
/// rate at which this engine starts and runs instances. The sweep removes
/// every ended instance (a retention of a millisecond): run last.
fn pages_and_retention(dir: &Path, workload: &str) {
    let runtime = runtime();
    runtime.block_on(async {
        let engine = Engine::builder()
            .retention(Duration::from_millis(1))
            .register(one_step)
            .register(nap_a_day)
            .open(dir)
            .expect("open the store");
        let filters = [
            (
                "first page: waiting",
                ListFilter::all().status(Status::Waiting),
            ),
            ("first page: a tag", ListFilter::all().tag("batch", "b7")),
        ];
        for (what, filter) in filters {
            let mut times = Vec::new();
            let mut found = 0;
            for _ in 0..5 {
                let started = Instant::now();
                let page = engine
                    .list_page(&filter, &Page::first(PAGE))
                    .await
                    .expect("a page");
                times.push(started.elapsed());
                found = page.instances.len();
            }
            times.sort();
            row(
                workload,
                what,
                &format!("{:.2} ms", times[2].as_secs_f64() * 1000.0),
                &format!("{found} of a page of {PAGE} (target < 10 ms at 1M)"),
            );
        }
        let starts = 2000;
        let started = Instant::now();
        let mut runs = Vec::with_capacity(starts);
        for i in 0..starts {
            let run = engine
                .start(one_step, &format!("rate-{i}"), 1)
                .await
                .expect("start");
            runs.push(run);
        }
        for run in runs {
            run.result().await.expect("it ends");
        }
        let start_rate = starts as f64 / started.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let swept = Instant::now();
        let removed = engine.sweep_expired().await.expect("a sweep");
        let sweep_rate = removed as f64 / swept.elapsed().as_secs_f64();
        row(
            workload,
            "retention: removed per second",
            &thousands(sweep_rate),
            &format!(
                "{} removed in {:.1} s; starts {}/s: {:.2}x (target >= 1)",
                thousands(removed as f64),
                swept.elapsed().as_secs_f64(),
                thousands(start_rate),
                sweep_rate / start_rate
            ),
        );
        engine.close().await;
    });
}

fn sizes() -> Vec<usize> {
    let sizes = std::env::var("SAGA_SCALE_ENDED").unwrap_or_else(|_| "100000,1000000".into());
    sizes
        .split(',')
        .map(|s| {
            s.trim()
                .replace('_', "")
                .parse()
                .expect("SAGA_SCALE_ENDED: numbers, comma-separated")
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(CHILD) {
        child(&args[2], Path::new(&args[3]));
        return;
    }
    if !support::wanted("history_scale") {
        return;
    }
    let rounds: usize = std::env::var("SAGA_SCALE_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    header(&format!(
        "start-up against history on sled: a new process opens, registers 2 workflows, runs one (median of {rounds})"
    ));
    let measured: Vec<Size> = sizes()
        .into_iter()
        .map(|n| measure_size(n, rounds))
        .collect();
    let (Some(first), Some(last)) = (measured.first(), measured.last()) else {
        return;
    };
    if measured.len() < 2 {
        return;
    }
    let times = format!(
        "{}/{}",
        thousands(last.ended as f64),
        thousands(first.ended as f64)
    );
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    // What saga adds over the bare open; a median below the bare one's
    // (noise between processes) adds nothing, and has no ratio.
    let over = |size: &Size| size.saga.seconds - size.sled.seconds;
    let over_bytes = |size: &Size| size.saga.bytes as f64 - size.sled.bytes as f64;
    let compared = |last: f64, first: f64, unit: &dyn Fn(f64) -> String| {
        let ratio = if last > 0.0 && first > 0.0 {
            format!("{:.2}x", last / first)
        } else {
            "no ratio".to_owned()
        };
        format!(
            "over bare sled {ratio}: adds {} -> {} (target 1.2x)",
            unit(first),
            unit(last)
        )
    };
    let secs = |s: f64| format!("{s:.3} s");
    let mib = |b: f64| format!("{:.1} MiB", b / 1048576.0);
    row(
        &format!("ratio {times} ended"),
        "ready time",
        &format!("{:.2}x", ratio(last.saga.seconds, first.saga.seconds)),
        &compared(over(last), over(first), &secs),
    );
    row(
        &format!("ratio {times} ended"),
        "resident memory added",
        &format!(
            "{:.2}x",
            ratio(last.saga.bytes as f64, first.saga.bytes as f64)
        ),
        &compared(over_bytes(last), over_bytes(first), &mib),
    );
    // Per sleeping instance: what the settled process holds over the bare
    // open, between the two sizes, divided by the sleepers added (the
    // fixed cost of a process cancels out). The ended instances grew ten
    // for one with them, so this bounds a sleeper's cost from above.
    let settled_over = |size: &Size| size.saga.settled as f64 - size.sled.bytes as f64;
    let sleepers_added = (last.ended / 10 - first.ended / 10) as f64;
    row(
        &format!("ratio {times} ended"),
        "resident bytes per sleeper",
        &thousands(((settled_over(last) - settled_over(first)) / sleepers_added).max(0.0)),
        "settled, over bare sled, with its 10 ended (target < 256)",
    );
    row(
        &format!("ratio {times} ended"),
        "bare sled::open",
        &format!("{:.2}x", ratio(last.sled.seconds, first.sled.seconds)),
        &format!(
            "memory {:.2}x",
            ratio(last.sled.bytes as f64, first.sled.bytes as f64)
        ),
    );
}
