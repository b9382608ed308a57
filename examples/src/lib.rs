//! The runnable examples of saga live beside this file:
//!
//! - `cargo run --example bank_transfer`: a transfer whose failing credit is
//!   compensated in reverse start order;
//! - `cargo run --example article_pipeline`: a ten-step publishing pipeline
//!   with a durable sleep and an approval event.
//!
//! Set `SAGA_DATA=<dir>` to keep an example's store in `<dir>` (for the
//! `saga` command to inspect) instead of a temporary directory.

use std::path::PathBuf;

/// The store directory of an example: `$SAGA_DATA` (kept after the run),
/// or a fresh temporary one (removed by [`StoreDir::drop`]).
pub struct StoreDir {
    /// Where the store is.
    pub path: PathBuf,
    keep: bool,
}

impl StoreDir {
    /// The directory for the example named `name`.
    pub fn for_example(name: &str) -> StoreDir {
        match std::env::var_os("SAGA_DATA") {
            Some(dir) => StoreDir {
                path: PathBuf::from(dir),
                keep: true,
            },
            None => StoreDir {
                path: std::env::temp_dir().join(format!("saga-{name}-{}", std::process::id())),
                keep: false,
            },
        }
    }
}

impl Drop for StoreDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
