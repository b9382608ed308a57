//! The parent side: spawns the child (this same test binary), kills it
//! with SIGKILL at a chosen moment, restarts it, lets the last run finish,
//! and collects what it reported.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::{ENV_DIR, ENV_FINAL, ENV_RUN, ENV_SCENARIO, ENV_SEED, Rng};

/// How long a child may stay silent before the parent gives up on it.
const PATIENCE: Duration = Duration::from_secs(30);

/// One child process and its stdout lines.
pub struct ChildProcess {
    process: std::process::Child,
    lines: mpsc::Receiver<String>,
    /// Every line read so far.
    pub seen: Vec<String>,
    stderr: PathBuf,
}

impl Drop for ChildProcess {
    /// A child is never left behind, whatever went wrong.
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.process.kill();
            let _ = self.process.wait();
        }
    }
}

/// What a child run is told.
pub struct Launch<'a> {
    pub dir: &'a Path,
    pub seed: u64,
    pub scenario: &'a str,
    pub run: u32,
    pub last: bool,
    pub env: &'a [(&'a str, String)],
}

impl ChildProcess {
    pub fn spawn(launch: &Launch<'_>) -> Result<Self, String> {
        let exe = stable_exe()?;
        let stderr = launch.dir.join(format!("child-{}.stderr", launch.run));
        let stderr_file = File::create(&stderr).map_err(|e| format!("{stderr:?}: {e}"))?;
        let mut command = Command::new(exe);
        command
            .env(ENV_DIR, launch.dir)
            .env(ENV_SEED, launch.seed.to_string())
            .env(ENV_RUN, launch.run.to_string())
            .env(ENV_FINAL, if launch.last { "1" } else { "0" })
            .env(ENV_SCENARIO, launch.scenario)
            .env_remove("SAGA_FAILPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr_file));
        for (key, value) in launch.env {
            command.env(key, value);
        }
        let mut process = command.spawn().map_err(|e| format!("spawn child: {e}"))?;
        let stdout = process.stdout.take().ok_or("child stdout")?;
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        Ok(ChildProcess {
            process,
            lines,
            seen: Vec::new(),
            stderr,
        })
    }

    /// The next line, waiting at most until `deadline`; `None` at the end
    /// of its output or at the deadline.
    pub fn next_line(&mut self, deadline: Instant) -> Option<&str> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left) {
            Ok(line) => {
                self.seen.push(line);
                self.seen.last().map(String::as_str)
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Reads lines until one satisfies `stop`; `false` if the output ended
    /// or `deadline` passed first.
    pub fn read_until(&mut self, deadline: Instant, mut stop: impl FnMut(&str) -> bool) -> bool {
        while let Some(line) = self.next_line(deadline) {
            if stop(line) {
                return true;
            }
        }
        false
    }

    /// The stacks of every thread of the (hung) child, when gdb is there.
    pub fn backtrace(&self) -> String {
        let output = Command::new("gdb")
            .args([
                "-p",
                &self.process.id().to_string(),
                "-batch",
                "-ex",
                "thread apply all bt",
            ])
            .stdin(Stdio::null())
            .output();
        match output {
            Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
            Err(e) => format!("(no backtrace: gdb: {e})"),
        }
    }

    /// Whether the process has exited on its own.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.process.try_wait().ok().flatten()
    }

    /// SIGKILL, then reap, then read what it printed before dying.
    pub fn kill(&mut self) -> Result<(), String> {
        if let Some(status) = self.exited() {
            self.drain();
            return Err(format!(
                "the child exited on its own ({status}) before the kill\n{}",
                self.report()
            ));
        }
        self.process.kill().map_err(|e| format!("kill: {e}"))?;
        self.process.wait().map_err(|e| format!("wait: {e}"))?;
        self.drain();
        Ok(())
    }

    /// Waits for the process to exit by itself (killing it at `deadline`).
    pub fn finish(&mut self, deadline: Instant) -> Option<ExitStatus> {
        while self.next_line(deadline).is_some() {}
        loop {
            if let Some(status) = self.exited() {
                self.drain();
                return Some(status);
            }
            if Instant::now() >= deadline {
                let _ = std::fs::write(self.stderr.with_extension("stacks"), self.backtrace());
                let _ = self.process.kill();
                let _ = self.process.wait();
                self.drain();
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn drain(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.next_line(deadline).is_some() {}
    }

    /// The child's output, for a failure message.
    pub fn report(&self) -> String {
        let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let tail: Vec<&str> = self
            .seen
            .iter()
            .rev()
            .take(12)
            .map(String::as_str)
            .collect();
        format!(
            "  last stdout lines (newest first): {tail:?}\n  stderr: {}",
            stderr.trim()
        )
    }
}

/// When a run is killed.
#[derive(Clone, Copy, Debug)]
pub enum Trigger {
    /// Shortly after the child announced `Engine::open`.
    InOpen { delay_us: u64 },
    /// After the child acknowledged `acks` steps.
    AfterAcks { acks: u64, delay_us: u64 },
    /// Some time after the store opened.
    AfterOpened { delay_us: u64 },
}

impl Trigger {
    pub fn draw(rng: &mut Rng) -> Self {
        match rng.below(10) {
            0..=2 => Trigger::InOpen {
                delay_us: rng.below(25_000),
            },
            3..=6 => Trigger::AfterAcks {
                acks: 1 + rng.below(14),
                delay_us: rng.below(3_000),
            },
            _ => Trigger::AfterOpened {
                delay_us: rng.below(150_000),
            },
        }
    }
}

/// What one killed run saw.
pub struct Killed {
    /// The kill landed before the store finished opening.
    pub during_open: bool,
    pub lines: Vec<String>,
}

/// Runs a child and SIGKILLs it at `trigger` (or as soon as it is idle).
pub fn run_and_kill(launch: &Launch<'_>, trigger: Trigger) -> Result<Killed, String> {
    let mut child = ChildProcess::spawn(launch)?;
    let deadline = Instant::now() + PATIENCE;
    let idle = |line: &str| line == "IDLE" || line.starts_with("ERROR");
    let reached = match trigger {
        Trigger::InOpen { .. } => child.read_until(deadline, |l| l == "OPENING" || idle(l)),
        Trigger::AfterAcks { acks, .. } => {
            let mut seen = 0;
            child.read_until(deadline, |l| {
                seen += u64::from(l.starts_with("ACK "));
                seen >= acks || idle(l)
            })
        }
        Trigger::AfterOpened { .. } => child.read_until(deadline, |l| l == "OPENED" || idle(l)),
    };
    let delay = match trigger {
        Trigger::InOpen { delay_us }
        | Trigger::AfterAcks { delay_us, .. }
        | Trigger::AfterOpened { delay_us } => Duration::from_micros(delay_us),
    };
    if reached && !child.seen.last().is_some_and(|l| idle(l)) {
        // Keep reading while the delay runs, so an idle child is killed at once.
        child.read_until(Instant::now() + delay, idle);
    }
    if child.seen.iter().any(|l| l.starts_with("ERROR")) {
        child.drain();
        return Err(format!("the child reported an error\n{}", child.report()));
    }
    if !reached {
        let stacks = child.backtrace();
        let path = launch.dir.join(format!("child-{}.stacks", launch.run));
        let _ = std::fs::write(&path, stacks);
        return Err(format!(
            "the child did not reach the kill point within {PATIENCE:?} ({trigger:?}); its threads' stacks are in {}\n{}",
            path.display(),
            child.report()
        ));
    }
    child.kill()?;
    Ok(Killed {
        during_open: !child.seen.iter().any(|l| l == "OPENED"),
        lines: std::mem::take(&mut child.seen),
    })
}

/// Runs the final child to its end; its lines, or why it did not end well.
pub fn run_to_end(launch: &Launch<'_>) -> Result<Vec<String>, String> {
    let mut child = ChildProcess::spawn(launch)?;
    match child.finish(Instant::now() + 2 * PATIENCE) {
        Some(status) if status.success() && child.seen.iter().any(|l| l == "DONE") => {
            Ok(std::mem::take(&mut child.seen))
        }
        Some(status) => Err(format!(
            "invariant 5 (every instance ends after the last restart): the final run exited with {status}\n{}",
            child.report()
        )),
        None => Err(format!(
            "invariant 5 (every instance ends after the last restart): the final run did not end within {:?} (stacks in child-<run>.stacks)\n{}",
            2 * PATIENCE,
            child.report()
        )),
    }
}

/// Runs a child that should die at an armed failpoint or finish; `Ok(true)`
/// if it was aborted there, `Ok(false)` if it finished without hitting it.
pub fn run_to_failpoint(launch: &Launch<'_>) -> Result<(bool, Vec<String>), String> {
    use std::os::unix::process::ExitStatusExt;
    let mut child = ChildProcess::spawn(launch)?;
    let status = child.finish(Instant::now() + PATIENCE);
    let lines = std::mem::take(&mut child.seen);
    match status {
        Some(status) if status.signal() == Some(6) => Ok((true, lines)),
        Some(status) if status.success() && lines.iter().any(|l| l == "DONE") => Ok((false, lines)),
        other => {
            child.seen = lines;
            Err(format!(
                "the child neither aborted at the failpoint nor finished: {other:?}\n{}",
                child.report()
            ))
        }
    }
}

/// Runs a child whose store fails once at an armed failpoint: it must
/// end by itself (done, or reporting an error), never panic or hang.
/// `Ok(true)` if the failpoint was reached.
pub fn run_with_store_error(launch: &Launch<'_>) -> Result<(bool, Vec<String>), String> {
    use std::os::unix::process::ExitStatusExt;
    let mut child = ChildProcess::spawn(launch)?;
    let status = child.finish(Instant::now() + PATIENCE);
    let stderr = std::fs::read_to_string(&child.stderr).unwrap_or_default();
    let hit = stderr.contains("failpoint") && stderr.contains(" hit");
    match status {
        Some(status)
            if status.signal().is_none()
                && !stderr.contains("panicked")
                && (status.success() || status.code() == Some(2)) =>
        {
            Ok((hit, std::mem::take(&mut child.seen)))
        }
        other => Err(format!(
            "after an injected store error the child did not end cleanly ({other:?})\n{}",
            child.report()
        )),
    }
}

/// The `(run, key)` of every `ACK` line.
pub fn acks(run: u32, lines: &[String]) -> Vec<(u32, String)> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("ACK "))
        .map(|key| (run, key.to_owned()))
        .collect()
}

/// A fresh directory for one seed's data, under the target dir's tmp.
pub fn fresh_dir(label: &str) -> PathBuf {
    let base = option_env!("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("saga-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the test directory");
    dir
}

/// A copy of this test binary that a concurrent `cargo build` cannot
/// replace or delete while children are still being started from it.
pub fn stable_exe() -> Result<PathBuf, String> {
    static EXE: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let dir = fresh_dir("bin");
        let copy = dir.join(exe.file_name().ok_or("the test binary has no name")?);
        std::fs::copy(&exe, &copy).map_err(|e| format!("copy {exe:?}: {e}"))?;
        Ok(copy)
    })
    .clone()
}

/// Removes the copy made by [`stable_exe`].
pub fn remove_stable_exe() {
    if let Ok(exe) = stable_exe()
        && let Some(dir) = exe.parent()
    {
        let _ = std::fs::remove_dir_all(dir);
    }
}
