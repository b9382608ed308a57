//! The `saga.lock` diagnostics (`lock/fail/`) and a crate that matches its
//! lock (`lock/pass/`), all against `locks/saga.lock`.
//!
//! trybuild builds every case in one crate and cannot set a variable per
//! case, so this test runs itself again as a child process with
//! `SAGA_LOCK_PATH` pointing at the lock (setting it in this process would
//! need `unsafe`). The other cases (`tests/ui.rs`) run without it: their
//! crate has no `saga.lock`, so they see no lock checks.
//!
//! Re-bless with `TRYBUILD=overwrite cargo test -p saga-ui-tests --test lock`.
//! To rewrite the lock lines of the pass cases, run the same with
//! `SAGA_LOCK=update` (the fail cases' lines are written by hand), then
//! restore the old names the renamed cases are locked under (`step *
//! qa-check ..`, `child lock-relay pass-on`): an update records the new ones;
//! and drop the lines of the calls `lock/pass/patched_step.rs` makes behind
//! its patches (`call lock-patched fraud_check`, `sleep lock-patched
//! settle-later`, `sleep lock-patched write-note`, `patch lock-patched
//! no-settle`, `patch lock-patched gift-note`, `step * fraud-check ..`),
//! which it leaves out of the lock on purpose.

use std::process::Command;

/// Set in the child process.
const LOCK_PATH_VAR: &str = "SAGA_LOCK_PATH";

#[test]
fn lock() {
    if std::env::var_os(LOCK_PATH_VAR).is_some() {
        let cases = trybuild::TestCases::new();
        cases.pass("lock/pass/*.rs");
        if std::env::var("SAGA_LOCK").as_deref() != Ok("update") {
            cases.compile_fail("lock/fail/*.rs");
        }
        return;
    }
    let lock = concat!(env!("CARGO_MANIFEST_DIR"), "/locks/saga.lock");
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(exe)
        .args(["lock", "--exact", "--nocapture", "--test-threads=1"])
        .env(LOCK_PATH_VAR, lock)
        .output()
        .expect("the test binary runs again");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{report}");
    assert!(report.contains("lock/pass/locked_shop.rs"), "{report}");
    assert!(report.contains("lock/pass/renamed_child.rs"), "{report}");
    assert!(report.contains("lock/pass/patched_step.rs"), "{report}");
}
