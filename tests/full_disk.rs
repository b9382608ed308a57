//! A full disk gives typed errors in bounded time, never a hang, and loses
//! nothing: the store sits on a small tmpfs (the test mounts one; it needs
//! root, as CI has) that 200 instances with 200 KB outputs fill up; then the
//! filesystem grows and a reopen finishes every instance.

use std::path::{Path, PathBuf};
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
    let _ = std::fs::remove_dir_all(dir);
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

struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Ends the process if the test has not finished in time: a runtime whose
/// threads a blocked store call holds could not fire its own timeouts.
fn watchdog(limit: Duration) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = done.clone();
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        if !seen.load(std::sync::atomic::Ordering::SeqCst) {
            eprintln!("the full-disk test hung for {limit:?}: the engine blocked the runtime");
            std::process::exit(1);
        }
    });
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_gives_typed_errors_in_bounded_time_and_loses_nothing() {
    let done = watchdog(Duration::from_secs(240));
    let dir = std::env::temp_dir().join(format!("saga-full-disk-{}", std::process::id()));
    if !mount_tmpfs(&dir, "24m") {
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        return;
    }
    let _unmount = Unmount(dir.clone());
    let store = dir.join("store");

    let engine = Engine::builder()
        .store_timeout(Duration::from_secs(2))
        .open(&store)
        .expect("open");
    let mut started = Vec::new();
    let mut errors = 0;
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
            Ok(run) => started.push(run),
            Err(e) => {
                errors += 1;
                eprintln!("start({id}): {e}");
            }
        }
    }
    let mut completed = 0;
    let mut failed = 0;
    for run in &started {
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
    }
    eprintln!(
        "{} started ({errors} refused): {completed} completed, {failed} stopped on the full disk",
        started.len()
    );
    assert!(
        failed + errors > 0,
        "the disk never filled up: make the tmpfs smaller"
    );
    drop(started);
    tokio::time::timeout(Duration::from_secs(60), engine.close())
        .await
        .expect("close hung");

    // Space returns: every instance that was started finishes, none twice.
    remount(&dir, "256m");
    let engine = Engine::open(&store).expect("reopen after the disk grew");
    engine.register(big_output()).unwrap();
    let listed = engine.list(&ListFilter::all()).await.unwrap();
    assert_eq!(listed.len() + errors, INSTANCES, "nothing stored was lost");
    for info in listed {
        let run = engine.instance(&info.id).await.unwrap();
        let len = tokio::time::timeout(Duration::from_secs(30), run.result::<usize>())
            .await
            .unwrap_or_else(|_| panic!("{} did not finish after the disk grew", info.id))
            .unwrap_or_else(|e| panic!("{}: {e}", info.id));
        assert_eq!(len, 25_000);
    }
    engine.close().await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
}
