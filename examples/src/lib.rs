//! The runnable examples of saga live beside this file:
//!
//! - `cargo run --example bank_transfer`: a transfer whose failing credit is
//!   compensated in reverse start order;
//! - `cargo run --example trip_booking`: a flight and a hotel booked as
//!   child workflows, all undone when the card is declined;
//! - `cargo run --example article_pipeline`: a ten-step publishing pipeline
//!   with a durable sleep and an approval event.
//!
//! Set `SAGA_DATA=<dir>` to keep an example's store in `<dir>` (for the
//! `saga` command to inspect) instead of a temporary directory. The bank
//! transfer runs on PostgreSQL with `-- --postgres [URL]`, and keeps its
//! engine running with the admin endpoint on with `-- --serve [ADDR]`.

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

/// The PostgreSQL URL when the example was run with `--postgres [URL]`:
/// the URL given, else `$SAGA_DATABASE_URL`, else the local test database.
pub fn postgres_url() -> Option<String> {
    let value = option_value("--postgres")?;
    Some(value.unwrap_or_else(|| {
        std::env::var("SAGA_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
    }))
}

/// The admin endpoint's address when the example was run with
/// `--serve [ADDR]` (default `127.0.0.1:7070`).
pub fn serve_addr() -> Option<String> {
    Some(option_value("--serve")?.unwrap_or_else(|| "127.0.0.1:7070".to_owned()))
}

/// `Some(value)` when `flag` is on the command line, with the argument
/// after it unless that is another flag.
fn option_value(flag: &str) -> Option<Option<String>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let at = args.iter().position(|a| a == flag)?;
    Some(args.get(at + 1).filter(|a| !a.starts_with("--")).cloned())
}
