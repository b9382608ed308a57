//! Failpoints, exhaustively over one saga (needs the `failpoints` feature).
//!
//! The saga (scenario `saga` of `crash_world`: steps with and without
//! compensations, a step called twice, a sleep, an event wait, then a
//! failure, so its whole rollback runs) is run by a child process with
//! `SAGA_FAILPOINT=abort:<point>:<n>` for every point (before/after a store
//! write, before/after a flush) and n = 1, 2, … until a run completes
//! without reaching the n-th one. Each time the child dies at the point, a
//! second child recovers the store and finishes, and the invariants of the
//! crash harness are checked. A second sweep injects store *errors*
//! instead (`error:<point>:<n>`): the child must not panic or hang, and a
//! restart must still end the saga keeping the invariants.
//!
//! ```text
//! cargo test -p saga-runtime --features failpoints --test failpoints
//! SAGA_FAILPOINT_CASE=abort:after-write:12 cargo test -p saga-runtime --features failpoints --test failpoints
//! ```

mod crash_world;

use std::process::ExitCode;
use std::time::Instant;

use crash_world::parent::{self, Launch};
use crash_world::{Scenario, check};

/// The seed of the saga's callee decisions (which calls are flaky).
const SEED: u64 = 7;
const POINTS: [&str; 4] = ["before-write", "after-write", "before-flush", "after-flush"];
/// A bound on n, so a runaway count fails instead of looping.
const MAX_N: u64 = 400;

fn main() -> ExitCode {
    if let Some(code) = crash_world::child::main_if_child() {
        return code;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let started = Instant::now();
    let mut failures = Vec::new();
    let mut crashes = 0;
    let mut errors = 0;
    let cases: Vec<String> = match std::env::var("SAGA_FAILPOINT_CASE") {
        Ok(case) => vec![case],
        Err(_) => Vec::new(),
    };
    if let Some(case) = cases.first() {
        match run_case(case, &runtime) {
            Ok(_) => println!("failpoints: {case} passed"),
            Err(e) => {
                eprintln!("{}", failure(case, &e));
                failures.push(failure(case, &e));
            }
        }
    } else {
        for action in ["abort", "error"] {
            for point in POINTS {
                for n in 1..=MAX_N {
                    let case = format!("{action}:{point}:{n}");
                    match run_case(&case, &runtime) {
                        Ok(true) if action == "abort" => crashes += 1,
                        Ok(true) => errors += 1,
                        Ok(false) => break,
                        Err(e) => {
                            eprintln!("{}", failure(&case, &e));
                            failures.push(failure(&case, &e));
                        }
                    }
                    if n == MAX_N {
                        failures.push(failure(
                            &case,
                            "the saga never stopped reaching new failpoints",
                        ));
                    }
                }
            }
        }
    }
    parent::remove_stable_exe();
    println!(
        "failpoints: {crashes} aborts and {errors} injected store errors recovered, in {:.1?}",
        started.elapsed()
    );
    println!(
        "cases: {} passed, {} failed",
        crashes + errors,
        failures.len()
    );
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("failpoints: {} case(s) FAILED", failures.len());
        ExitCode::FAILURE
    }
}

fn failure(case: &str, error: &str) -> String {
    format!(
        "failpoint case {case} FAILED:\n{error}\n  replay: SAGA_FAILPOINT_CASE={case} cargo test -p saga-runtime --features failpoints --test failpoints"
    )
}

/// Runs the saga with `case` armed, then recovers and checks; `Ok(false)`
/// when the run never reached the failpoint.
fn run_case(case: &str, runtime: &tokio::runtime::Runtime) -> Result<bool, String> {
    let dir = parent::fresh_dir(&format!("failpoint-{}", case.replace(':', "-")));
    let scenario = Scenario::one_saga(SEED);
    // A run whose store failed stops its instance and would wait for
    // nothing: give up on it soon (a restart finishes whatever is left).
    // A run armed to abort either aborts or finishes, however slow the
    // machine: it keeps the child's full patience.
    let patience = ("SAGA_CRASH_CHILD_PATIENCE_MS", "400".to_owned());
    let failpoint = ("SAGA_FAILPOINT", case.to_owned());
    let armed: Vec<(&str, String)> = if case.starts_with("abort") {
        vec![failpoint]
    } else {
        vec![failpoint, patience]
    };
    let launch = |run: u32, env| Launch {
        dir: &dir,
        seed: SEED,
        scenario: scenario.name,
        run,
        last: true,
        env,
    };
    let (hit, lines) = if case.starts_with("abort") {
        parent::run_to_failpoint(&launch(0, &armed))?
    } else {
        parent::run_with_store_error(&launch(0, &armed))?
    };
    let mut acks = parent::acks(0, &lines);
    if hit || !lines.iter().any(|l| l == "DONE") {
        let lines = parent::run_to_end(&launch(1, &[]))?;
        acks.extend(parent::acks(1, &lines));
    }
    runtime.block_on(check::verify(&scenario, &dir, &acks))?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(hit)
}
