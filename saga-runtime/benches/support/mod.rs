//! What the bench binaries share: the filter `cargo bench` passes, scratch
//! directories, and the table they print into. Every line names its
//! workload, so the output of both binaries reads as one table.

// Each bench binary uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use saga_runtime::prelude::*;
use saga_runtime::step;

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
