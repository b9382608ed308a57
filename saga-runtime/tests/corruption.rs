//! Corrupt stores give typed errors, never a panic, an OOM or a hang.
//!
//! Each test re-executes itself as a child process under a memory limit
//! (`ulimit -v`, so an unbounded allocation kills the child instead of the
//! machine) with a panic hook that aborts (so a panic on any thread, sled's
//! and Tokio's included, fails the test), and the parent kills a child that
//! does not finish in time (a hang fails the test too).
//!
//! What a user sees for an instance whose first journal record is damaged:
//! `engine.instance(id).await` and every handle call answer `Error::Corrupt`
//! naming the journal record; `list()`
//! shows what the instance's index entry says (or leaves it out, with a
//! warning in the log, when that entry is the damaged part) and lists the
//! others; an instance whose records decode but whose stored output no
//! longer does is parked `Blocked` with a `Decode` failure naming the step,
//! and one with a damaged record after its first is parked `Blocked` with a
//! `Corrupt` failure naming the record; every other instance goes on.
//!
//! ```text
//! cargo test -p saga-runtime --test corruption
//! SAGA_CORRUPTION_SEED=17 cargo test -p saga-runtime --test corruption -- flipped   # one seed
//! ```

#[path = "support/helpers.rs"]
mod helpers;
#[path = "support/rng.rs"]
mod rng;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use saga_runtime::inspect::ListFilter;
use saga_runtime::prelude::*;
use saga_runtime::{Error, FailureKind};

use helpers::{until_status, within};
use rng::Rng;

/// Set in the child: the test runs its body instead of spawning.
const CHILD: &str = "SAGA_CORRUPTION_CHILD";
/// The child's address-space limit, in KiB: far above what the engine
/// needs, far below what a corrupt 2^60-byte length prefix would ask for.
const MEMORY_LIMIT_KIB: u64 = 3 * 1024 * 1024;
/// A child that runs longer than this hangs.
const HANG: Duration = Duration::from_secs(120);

/// Runs `body` in a child process under the memory limit (this process is
/// that child when `CHILD` is set).
fn in_limited_child<F, Fut>(test: &str, body: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    if std::env::var_os(CHILD).is_some() {
        std::panic::set_hook(Box::new(|info| {
            eprintln!("PANIC in the child: {info}");
            std::process::abort();
        }));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a Tokio runtime");
        runtime.block_on(body());
        return;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {MEMORY_LIMIT_KIB} && exec \"$0\" --exact {test} --nocapture --test-threads=1"
        ))
        .arg(exe)
        .env(CHILD, "1")
        .env("MALLOC_ARENA_MAX", "2")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn the child");
    let deadline = Instant::now() + HANG;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{test}: the child hung for {HANG:?} (see its output above)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.success(),
        "{test}: the child failed ({status}): a panic, an allocation over {MEMORY_LIMIT_KIB} KiB, or a failed check (see its output above)"
    );
}

fn fresh_dir(label: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("saga-corruption-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the test directory");
    dir
}

#[step(name = "add", read_only)]
async fn add(n: u64) -> Result<u64, StepError> {
    Ok(n + 1)
}

/// One step, then (for inputs of 100 and more: the `wait-` instances) a
/// wait for an event.
#[workflow(name = "corruptible")]
async fn corruptible(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let n = add(&ctx, n).await?;
    if n >= 100 {
        let m: u64 = ctx
            .wait_for_event("go", "go", Duration::from_secs(3600))
            .await?;
        return Ok(n + m);
    }
    Ok(n)
}

/// Writes a store with three complete instances and two waiting ones.
async fn healthy_store(path: &Path) {
    let engine = Engine::open(path).expect("open a fresh store");
    for (id, n) in [("done-1", 1), ("done-2", 2), ("done-3", 3)] {
        let run = engine.start(corruptible, id, n).await.expect("start");
        assert_eq!(run.result().await.expect("complete"), n + 1);
    }
    for (id, n) in [("wait-1", 100), ("wait-2", 200)] {
        let run = engine.start(corruptible, id, n).await.expect("start");
        until_status(&run, Status::Waiting).await;
    }
    engine.close().await;
}

/// The errors a damaged store may answer with.
fn typed(error: &Error) -> bool {
    matches!(
        error,
        Error::Corrupt { .. }
            | Error::Store(_)
            | Error::UnknownInstance { .. }
            | Error::WorkflowFailed { .. }
    )
}

/// Opens a damaged store and touches everything a user can: each answer
/// is a value or a typed error. `Ok(())` if it opened.
async fn probe(path: &Path) -> Result<(), Error> {
    let engine = open_when_released(path).await?;
    engine.register(corruptible).unwrap();
    let listed = engine.list(&ListFilter::all()).await;
    assert!(ok_or_typed(&listed), "list: {listed:?}");
    for id in ["done-1", "done-2", "done-3", "wait-1", "wait-2"] {
        let instance = match engine.instance(id).await {
            Ok(instance) => instance,
            Err(e) => {
                assert!(typed(&e), "instance({id}): {e:?}");
                continue;
            }
        };
        let status = instance.status().await;
        assert!(ok_or_typed(&status), "status({id}): {status:?}");
        let history = instance.history().await;
        assert!(ok_or_typed(&history), "history({id}): {history:?}");
        let info = instance.info().await;
        assert!(ok_or_typed(&info), "info({id}): {info:?}");
        let sent = engine.send_event(id, "go", &5u64).await;
        assert!(
            sent.is_ok()
                || sent
                    .as_ref()
                    .is_err_and(|e| typed(e) || matches!(e, Error::InvalidState { .. })),
            "send_event({id}): {sent:?}"
        );
        // A completed or waiting instance may stay waiting if the damage
        // took its event; it must not hang the caller beyond its own timeout.
        if let Ok(result) =
            tokio::time::timeout(Duration::from_secs(2), instance.result::<u64>()).await
        {
            assert!(ok_or_typed(&result), "result({id}): {result:?}");
        }
    }
    engine.close().await;
    Ok(())
}

/// Opens the store with the `sled` crate, as a damaged disk or a foreign
/// writer would. Like [`open_when_released`], it waits out the lock that
/// sled's I/O threads may hold a moment after the last handle dropped.
fn open_sled(store: &Path) -> sled::Db {
    for _ in 0..100 {
        match sled::open(store) {
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other.expect("open the store with sled"),
        }
    }
    sled::open(store).expect("open the store with sled")
}

/// Opens the store; sled's I/O threads may hold its file lock a moment
/// after the previous engine on it closed, so a lock error is retried.
async fn open_when_released(path: &Path) -> Result<Engine, Error> {
    for _ in 0..100 {
        match Engine::open(path) {
            Err(Error::StoreLocked { .. }) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
    Engine::open(path)
}

fn ok_or_typed<T>(result: &Result<T, Error>) -> bool {
    result.as_ref().err().is_none_or(typed)
}

/// Every regular file under the sled directory, in a stable order.
fn sled_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).expect("read the store dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if std::fs::metadata(&path).is_ok_and(|m| m.len() > 0) {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn seeds(count: u64) -> Vec<u64> {
    match std::env::var("SAGA_CORRUPTION_SEED") {
        Ok(seed) => vec![seed.parse().expect("SAGA_CORRUPTION_SEED must be a number")],
        Err(_) => (0..count).collect(),
    }
}

/// What a probe of a damaged store came to, for the summary line.
fn outcome(seed: u64, what: &str, result: Result<(), Error>) {
    match result {
        Ok(()) => {
            println!("seed {seed}: {what}: opened; every call answered a value or a typed error")
        }
        Err(e) => {
            assert!(
                typed(&e),
                "seed {seed}: {what}: Engine::open gave an untyped error {e:?}\n  replay: SAGA_CORRUPTION_SEED={seed} cargo test -p saga-runtime --test corruption"
            );
            println!("seed {seed}: {what}: Engine::open refused it: {e}");
        }
    }
}

#[test]
fn flipped_bytes_in_the_sled_files() {
    in_limited_child("flipped_bytes_in_the_sled_files", || async {
        for seed in seeds(24) {
            let dir = fresh_dir(&format!("flip-{seed}"));
            let store = dir.join("store");
            healthy_store(&store).await;
            let mut rng = Rng::new(seed);
            let files = sled_files(&store);
            let data = store.join("db");
            let mut flipped = Vec::new();
            for _ in 0..1 + rng.below(4) {
                // Mostly the data log; sometimes any file (conf, snapshots).
                let file = match rng.below(6) {
                    0 => &files[rng.below(files.len() as u64) as usize],
                    _ => &data,
                };
                let mut bytes = std::fs::read(file).expect("read a sled file");
                let at = rng.below(bytes.len() as u64) as usize;
                bytes[at] ^= 1 << rng.below(8);
                std::fs::write(file, &bytes).expect("write it back");
                flipped.push(format!(
                    "{}@{at}",
                    file.strip_prefix(&store).unwrap_or(file).display()
                ));
            }
            outcome(seed, &format!("flipped {flipped:?}"), probe(&store).await);
            let _ = std::fs::remove_dir_all(&dir);
        }
    });
}

#[test]
fn truncated_sled_files() {
    in_limited_child("truncated_sled_files", || async {
        for seed in seeds(12) {
            let dir = fresh_dir(&format!("truncate-{seed}"));
            let store = dir.join("store");
            healthy_store(&store).await;
            let mut rng = Rng::new(seed);
            let files = sled_files(&store);
            let file = &files[rng.below(files.len() as u64) as usize];
            let len = std::fs::metadata(file).expect("metadata").len();
            let keep = rng.below(len);
            std::fs::OpenOptions::new()
                .write(true)
                .open(file)
                .and_then(|f| f.set_len(keep))
                .expect("truncate");
            let what = format!(
                "truncated {} from {len} to {keep} bytes",
                file.strip_prefix(&store).unwrap_or(file).display()
            );
            outcome(seed, &what, probe(&store).await);
            let _ = std::fs::remove_dir_all(&dir);
        }
    });
}

/// Rewrites one stored value with the `sled` crate directly, as a damaged
/// disk or a foreign writer would.
fn tamper(store: &Path, tree: &str, key: &[u8], value: &[u8]) {
    let db = open_sled(store);
    let tree = db.open_tree(tree).expect("tree");
    assert!(
        tree.get(key).expect("read").is_some(),
        "nothing stored at that key"
    );
    tree.insert(key, value).expect("insert");
    db.flush().expect("flush");
}

/// The key of journal record `seq` of instance `id`: `<id>/<u64 BE>`.
fn journal_key(id: &str, seq: u64) -> Vec<u8> {
    let mut key = format!("{id}/").into_bytes();
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// A corrupt journal makes every call on its instance a typed error that
/// names the instance.
async fn assert_corrupt(engine: &Engine, id: &str) {
    let error = engine.instance(id).await.expect_err("a corrupt journal");
    assert!(
        matches!(&error, Error::Corrupt { what, .. } if what.contains(id)),
        "{error:?}"
    );
}

/// A damaged record after the first parks its instance `Blocked`, naming
/// the record.
/// The ids `list()` shows Blocked.
async fn listed_blocked(engine: &Engine) -> Vec<String> {
    engine
        .list(&ListFilter::all().status(Status::Blocked))
        .await
        .expect("list")
        .into_iter()
        .map(|info| info.id)
        .collect()
}

async fn assert_parked(engine: &Engine, id: &str, seq: u64) {
    let instance = engine.instance(id).await.expect("still readable");
    let error = within("the instance parked, not hanging", instance.result::<u64>())
        .await
        .expect_err("parked");
    match &error {
        Error::Blocked { failure, .. } => {
            assert_eq!(failure.kind(), &FailureKind::Corrupt { seq }, "{error}");
            assert!(
                failure.message().contains(&format!("record {seq}")),
                "{error}"
            );
        }
        other => panic!("expected Blocked(Corrupt), got {other:?}"),
    }
}

#[test]
fn a_tampered_instance_record_is_corrupt_and_the_others_go_on() {
    in_limited_child(
        "a_tampered_instance_record_is_corrupt_and_the_others_go_on",
        || async {
            let dir = fresh_dir("tampered-instance");
            let store = dir.join("store");
            healthy_store(&store).await;
            tamper(&store, "journal", &journal_key("wait-1", 0), &[2, 7, 7, 7]);
            tamper(&store, "index", b"done-3", &[2, 7, 7, 7]);
            let engine = open_when_released(&store)
                .await
                .expect("a store with bad records opens");
            engine.register(corruptible).unwrap();
            assert_corrupt(&engine, "wait-1").await;
            // done-3's journal is whole: its index entry is rebuilt on open.
            let listed: Vec<String> = engine
                .list(&ListFilter::all())
                .await
                .expect("list")
                .into_iter()
                .map(|i| i.id)
                .collect();
            assert_eq!(listed, ["done-1", "done-2", "done-3", "wait-1", "wait-2"]);
            let done = engine
                .instance("done-3")
                .await
                .expect("rebuilt from its journal");
            assert_eq!(done.result::<u64>().await.expect("intact"), 4);
            engine
                .send_event("wait-2", "go", &5u64)
                .await
                .expect("send");
            let other = engine.instance("wait-2").await.expect("the other instance");
            assert_eq!(other.result::<u64>().await.expect("it goes on"), 201 + 5);
            let sent = engine.send_event("wait-1", "go", &5u64).await;
            assert!(matches!(sent, Err(Error::Corrupt { .. })), "{sent:?}");
            engine.close().await;
            let _ = std::fs::remove_dir_all(&dir);
        },
    );
}

#[test]
fn a_tampered_stored_output_blocks_its_instance_with_a_decode_error() {
    in_limited_child(
        "a_tampered_stored_output_blocks_its_instance_with_a_decode_error",
        || async {
            let dir = fresh_dir("tampered-output");
            let store = dir.join("store");
            healthy_store(&store).await;
            // Step "add" of wait-1 completed with output 101, stored as the
            // JSON `101`: the record still decodes when the JSON says "abc".
            let db = open_sled(&store);
            let journal = db.open_tree("journal").expect("journal");
            let (key, value) = journal
                .scan_prefix(b"wait-1/")
                .map(|entry| entry.expect("read"))
                .find(|(_, value)| value.windows(5).any(|w| w == [1, 3, b'1', b'0', b'1']))
                .expect("the stored output 101 (JSON, 3 bytes)");
            let at = value
                .windows(5)
                .position(|w| w == [1, 3, b'1', b'0', b'1'])
                .expect("found above");
            let mut bad = value.to_vec();
            bad[at + 2..at + 5].copy_from_slice(b"abc");
            journal.insert(key, bad).expect("insert");
            db.flush().expect("flush");
            drop(journal);
            drop(db);

            let engine = open_when_released(&store).await.expect("open");
            engine.register(corruptible).unwrap();
            // A waiting instance is replayed when it wakes: its event
            // wakes it, and the replay meets the tampered output.
            engine
                .send_event("wait-1", "go", &1u64)
                .await
                .expect("send");
            let failed = engine.instance("wait-1").await.expect("handle");
            let error = within("the instance parked, not hanging", failed.result::<u64>())
                .await
                .expect_err("the output does not decode");
            match &error {
                Error::Blocked { failure, .. } => {
                    assert_eq!(failure.kind(), &FailureKind::Decode, "{error}");
                    assert!(failure.message().contains("\"add\""), "{error}");
                }
                other => panic!("expected Blocked(Decode), got {other:?}"),
            }
            engine
                .send_event("wait-2", "go", &1u64)
                .await
                .expect("send");
            let other = engine.instance("wait-2").await.expect("handle");
            assert_eq!(other.result::<u64>().await.expect("goes on"), 202);
            engine.close().await;
            let _ = std::fs::remove_dir_all(&dir);
        },
    );
}

#[test]
fn list_agrees_with_status_on_a_damaged_instance_before_any_driver_runs() {
    in_limited_child(
        "list_agrees_with_status_on_a_damaged_instance_before_any_driver_runs",
        || async {
            let dir = fresh_dir("damaged-list");
            let store = dir.join("store");
            healthy_store(&store).await;
            // The damage leaves the last record where it was: the index
            // entry still says Waiting, and open does not rebuild it.
            tamper(&store, "journal", &journal_key("wait-1", 2), &[2, 250, 250]);
            // No workflow registered: nothing runs it, a person only looks.
            let engine = open_when_released(&store).await.expect("open");
            let damaged = engine.instance("wait-1").await.expect("still readable");
            assert_eq!(damaged.status().await.expect("status"), Status::Blocked);
            let blocked = listed_blocked(&engine).await;
            assert!(
                blocked.iter().any(|id| id == "wait-1"),
                "list() agrees with status(): {blocked:?}"
            );
            engine.close().await;
            let _ = std::fs::remove_dir_all(&dir);
        },
    );
}

#[test]
fn a_damaged_journal_record_parks_its_instance_blocked_and_the_others_go_on() {
    in_limited_child(
        "a_damaged_journal_record_parks_its_instance_blocked_and_the_others_go_on",
        || async {
            let dir = fresh_dir("tampered-record");
            let store = dir.join("store");
            healthy_store(&store).await;
            tamper(&store, "journal", &journal_key("wait-1", 2), &[2, 250, 250]);
            let engine = open_when_released(&store).await.expect("open");
            engine.register(corruptible).unwrap();
            assert_parked(&engine, "wait-1", 2).await;
            let damaged = engine.instance("wait-1").await.expect("still readable");
            let info = damaged.info().await.expect("info");
            assert_eq!(info.status, Status::Blocked);
            assert!(
                listed_blocked(&engine)
                    .await
                    .iter()
                    .any(|id| id == "wait-1"),
                "list() shows it Blocked"
            );
            // An event is kept, but a damaged instance does not run on.
            engine
                .send_event("wait-1", "go", &1u64)
                .await
                .expect("kept");
            // Nothing announces a run that does not happen, and no clock
            // is involved: the harness's one real pause stands in.
            helpers::quiet(&engine).await;
            assert_eq!(damaged.status().await.expect("status"), Status::Blocked);
            engine
                .send_event("wait-2", "go", &1u64)
                .await
                .expect("send");
            let other = engine.instance("wait-2").await.expect("handle");
            assert_eq!(other.result::<u64>().await.expect("goes on"), 202);
            // A person decides: terminate ends it without compensating.
            damaged.terminate().await.expect("terminate");
            assert_eq!(damaged.status().await.expect("status"), Status::Terminated);
            engine.close().await;
            let _ = std::fs::remove_dir_all(&dir);
        },
    );
}

#[test]
fn huge_length_prefixes_are_refused_without_allocating() {
    in_limited_child(
        "huge_length_prefixes_are_refused_without_allocating",
        || async {
            // Format version 2, then varint prefixes: 253 = a u64
            // follows, 252 = a u32 follows.
            let mut huge: Vec<Vec<u8>> = vec![
                [2u8, 253]
                    .into_iter()
                    .chain(u64::MAX.to_le_bytes())
                    .collect(),
                [2u8, 253]
                    .into_iter()
                    .chain((1u64 << 40).to_le_bytes())
                    .collect(),
                [2u8, 252]
                    .into_iter()
                    .chain(u32::MAX.to_le_bytes())
                    .collect(),
                [2u8, 252]
                    .into_iter()
                    .chain((63u32 << 20).to_le_bytes())
                    .collect(),
            ];
            // A record time, the `Created` variant and a valid workflow
            // name, then a JSON input claiming 2^50 bytes.
            huge.push(
                [2u8, 1, 0, 11]
                    .into_iter()
                    .chain(*b"corruptible")
                    .chain([1])
                    .chain([253])
                    .chain((1u64 << 50).to_le_bytes())
                    .collect(),
            );
            for (i, value) in huge.iter().enumerate() {
                let dir = fresh_dir(&format!("huge-{i}"));
                let store = dir.join("store");
                healthy_store(&store).await;
                tamper(&store, "journal", &journal_key("done-2", 0), value);
                tamper(&store, "journal", &journal_key("wait-1", 1), value);
                tamper(&store, "index", b"wait-2", value);
                let engine = open_when_released(&store).await.expect("open");
                engine.register(corruptible).unwrap();
                assert_corrupt(&engine, "done-2").await;
                assert_parked(&engine, "wait-1", 1).await;
                let listed = engine.list(&ListFilter::all()).await.expect("list");
                assert!(
                    listed.iter().any(|i| i.id == "wait-2"),
                    "prefix {i}: rebuilt"
                );
                let fine = engine.instance("done-1").await.expect("handle");
                assert_eq!(fine.result::<u64>().await.expect("intact"), 2);
                engine.close().await;
                let _ = std::fs::remove_dir_all(&dir);
            }
        },
    );
}
