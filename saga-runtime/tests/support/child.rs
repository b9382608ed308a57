//! Real processes for crash tests: a test re-executes its own binary as a
//! child that runs one role on a data directory, reports progress on
//! stdout, and is SIGKILLed by the parent at a chosen point.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Set in a child: the data directory it works on.
const CHILD_DIR: &str = "SAGA_TEST_CHILD_DIR";
/// Every progress line a child prints starts with this, so the parent can
/// tell them from the test harness's own output.
const MARK: &str = "SAGA-CHILD ";
/// How long the parent waits for a child's next line before giving up.
const PATIENCE: Duration = Duration::from_secs(60);

/// The data directory, when this process is a child started by [`spawn`].
pub(crate) fn child_dir() -> Option<PathBuf> {
    std::env::var_os(CHILD_DIR).map(PathBuf::from)
}

/// Prints a progress line for the parent (and flushes it).
pub(crate) fn report(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    // A parent that went away cannot be told anything; the child dies soon.
    let _ = writeln!(out, "{MARK}{line}");
    let _ = out.flush();
}

/// A running child process.
pub(crate) struct Child {
    process: std::process::Child,
    lines: mpsc::Receiver<String>,
}

/// Runs test `test` of this binary as a child on `dir`.
pub(crate) fn spawn(test: &str, dir: &Path) -> Child {
    let exe = std::env::current_exe().expect("the test binary's path");
    let test = full_name(&exe, test);
    let mut process = Command::new(exe)
        .args(["--exact", &test, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child process");
    let stdout = process.stdout.take().expect("the child's stdout");
    let (send, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            // The harness may have begun the line ("test name ... ").
            if let Some((_, progress)) = line.split_once(MARK)
                && send.send(progress.to_owned()).is_err()
            {
                return;
            }
        }
    });
    Child { process, lines }
}

/// The name of test `test` in the binary `exe`: `test`, or `module::test`
/// where a binary compiles a test file as a module
/// (`tests/postgres_semantics.rs`).
fn full_name(exe: &Path, test: &str) -> String {
    let listed = Command::new(exe)
        .args(["--list", "--format", "terse"])
        .output()
        .expect("list the tests of this binary");
    let suffix = format!("::{test}");
    String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .find(|name| *name == test || name.ends_with(&suffix))
        .unwrap_or(test)
        .to_owned()
}

impl Child {
    /// The next progress line that starts with `prefix`, without the
    /// prefix; panics if the child exits or stays silent too long.
    pub(crate) fn wait_for(&mut self, prefix: &str) -> String {
        loop {
            match self.lines.recv_timeout(PATIENCE) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.to_owned();
                    }
                }
                Err(e) => {
                    let status = self.process.try_wait();
                    panic!("child gave no {prefix:?} line ({e}); exit status {status:?}");
                }
            }
        }
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.process.id()
    }

    /// Sends `signal` (`"STOP"`, `"CONT"`, ...) to the child.
    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// SIGKILLs the child and reaps it.
    pub(crate) fn kill(mut self) {
        self.process.kill().expect("SIGKILL the child");
        self.process.wait().expect("reap the child");
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // A failing parent must not leave its child running.
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// A fresh data directory, removed when dropped.
pub(crate) struct DataDir(PathBuf);

impl DataDir {
    pub(crate) fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path =
            std::env::temp_dir().join(format!("saga-test-{name}-{}-{nanos}", std::process::id()));
        DataDir(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
