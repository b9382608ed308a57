//! A full disk gives typed errors in bounded time, never a hang, and loses
//! nothing: the store sits on a small tmpfs (the test mounts one; it needs
//! root, as CI has) that 200 instances with 200 KB outputs fill up. A child
//! process runs the service on the full disk and then dies, as a service
//! does that is restarted; the filesystem grows; the parent reopens the
//! store and every instance that was started finishes.
//!
//! The service dies rather than closing: sled cannot recover from ENOSPC
//! within a process (its flush stays stuck), so the way back is a restart.

#[path = "support/child.rs"]
mod child;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use saga_runtime::prelude::*;

const INSTANCES: usize = 200;

fn big_output() -> impl Workflow<Input = u64, Output = usize> + Copy {
    workflow_fn("big-output", |ctx: WorkflowContext, n: u64| async move {
        let blob: Vec<u64> = ctx
            .step(
                "make-blob",
                StepConfig::default().retries(0),
                move |_key| async move { Ok(vec![n; 25_000]) },
            )
            .await?;
        Ok::<_, WorkflowError>(blob.len())
    })
}

/// Mounts a tmpfs of `size` at `dir`; `false` when this is not allowed here
/// (not root) and the run is not CI's, where the test must run.
fn mount_tmpfs(dir: &Path, size: &str) -> bool {
    std::fs::create_dir_all(dir).expect("the mount point");
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run mount");
    if status.success() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "could not mount a tmpfs at {} (this test needs root, as CI has)",
        dir.display()
    );
    eprintln!(
        "NOT RUN: the full-disk test needs root to mount a tmpfs; run `sudo -E cargo test --test full_disk` (CI runs it)"
    );
    false
}

fn remount(dir: &Path, size: &str) {
    let status = Command::new("mount")
        .args(["-o", &format!("remount,size={size}")])
        .arg(dir)
        .status()
        .expect("run mount");
    assert!(status.success(), "could not grow the tmpfs");
}

/// Unmounts the tmpfs however the test ends.
struct Unmount<'a>(&'a Path);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

/// The service on the full disk: every call answers within bounds, with a
/// typed error when the disk is full. Reports its counts, then dies.
async fn service_on_a_full_disk(store: &Path) -> ! {
    let engine = Engine::builder()
        .store_timeout(Duration::from_secs(2))
        .open(store)
        .expect("open");
    let (mut runs, mut refused) = (Vec::new(), 0);
    for i in 0..INSTANCES {
        let id = format!("big-{i}");
        // A hang fails here: every call answers within the store timeout.
        let start = tokio::time::timeout(
            Duration::from_secs(30),
            engine.start(big_output(), &id, i as u64),
        )
        .await
        .unwrap_or_else(|_| panic!("start({id}) hung on a full disk"));
        match start {
            Ok(run) => runs.push(run),
            Err(Error::Store(_)) => refused += 1,
            Err(other) => panic!("start({id}): not a store error: {other:?}"),
        }
    }
    let (mut completed, mut failed) = (0, 0);
    for run in &runs {
        let result = tokio::time::timeout(Duration::from_secs(30), run.result())
            .await
            .unwrap_or_else(|_| panic!("result({}) hung on a full disk", run.id()));
        match result {
            Ok(len) => {
                assert_eq!(len, 25_000);
                completed += 1;
            }
            Err(Error::Store(message)) => {
                failed += 1;
                if failed == 1 {
                    eprintln!("{}: {message}", run.id());
                }
            }
            Err(other) => panic!("{}: not a store error: {other:?}", run.id()),
        }
        child::report("progress");
    }
    child::report(&format!("DONE {completed} {failed} {refused}"));
    // A service restarted after its disk filled up.
    std::process::exit(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_gives_typed_errors_in_bounded_time_and_loses_nothing() {
    if let Some(dir) = child::child_dir() {
        service_on_a_full_disk(&dir.join("store")).await;
    }
    let dir = child::DataDir::new("full-disk");
    if !mount_tmpfs(dir.path(), "24m") {
        return;
    }
    let _unmount = Unmount(dir.path());

    let mut service = child::spawn(
        "a_full_disk_gives_typed_errors_in_bounded_time_and_loses_nothing",
        dir.path(),
    );
    let began = std::time::Instant::now();
    let done = loop {
        let line = service.wait_for("");
        if let Some(counts) = line.strip_prefix("DONE ") {
            break counts.to_owned();
        }
    };
    let counts: Vec<usize> = done
        .split_whitespace()
        .map(|n| n.parse().expect("a count"))
        .collect();
    let (completed, failed, refused) = (counts[0], counts[1], counts[2]);
    eprintln!(
        "on the full disk: {completed} completed, {failed} stopped on a store error, {refused} refused, in {:?}",
        began.elapsed()
    );
    assert_eq!(completed + failed + refused, INSTANCES);
    assert!(
        failed + refused > 0,
        "the disk never filled up: make the tmpfs smaller"
    );
    drop(service);

    // Space returns: every instance that was started finishes, none twice.
    remount(dir.path(), "256m");
    let engine = Engine::open(dir.path().join("store")).expect("reopen after the disk grew");
    engine.register(big_output()).unwrap();
    let listed = engine.list(&ListFilter::all()).await.unwrap();
    assert_eq!(listed.len() + refused, INSTANCES, "nothing stored was lost");
    for info in listed {
        let run = engine.instance(&info.id).await.unwrap();
        let len = tokio::time::timeout(Duration::from_secs(60), run.result::<usize>())
            .await
            .unwrap_or_else(|_| panic!("{} did not finish after the disk grew", info.id))
            .unwrap_or_else(|e| panic!("{}: {e}", info.id));
        assert_eq!(len, 25_000);
    }
    engine.close().await;
    eprintln!(
        "all finished after the disk grew, {:?} in all",
        began.elapsed()
    );
}
