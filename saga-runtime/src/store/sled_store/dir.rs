//! The sled store's directory: made private to its owner, opened once per
//! process (a second open here is told apart from another process's lock,
//! which sled reports alike), and released after close.

use std::io;
use std::path::{Path, PathBuf};

use super::sled_error;
use crate::error::Error;

/// The directories of the stores this process holds open (canonical
/// paths): a second open of one is told apart from another process's
/// lock, which sled reports alike.
static OPEN_HERE: std::sync::Mutex<std::collections::BTreeSet<PathBuf>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A directory noted in [`OPEN_HERE`] while its store is open.
pub(super) struct OpenHere(PathBuf);

impl OpenHere {
    pub(super) fn note(dir: PathBuf) -> OpenHere {
        crate::lock::lock(&OPEN_HERE).insert(dir.clone());
        OpenHere(dir)
    }

    pub(super) fn holds(dir: &Path) -> bool {
        crate::lock::lock(&OPEN_HERE).contains(dir)
    }
}

impl Drop for OpenHere {
    fn drop(&mut self) {
        crate::lock::lock(&OPEN_HERE).remove(&self.0);
    }
}

/// Waits (at most `within`) until no one holds the lock of the store in
/// `path`: sled's IO threads may hold it a moment after the last handle of
/// the store is dropped, and a reopen right after `close` must not see
/// `StoreLocked` for that.
pub(crate) async fn wait_until_released(path: &Path, within: std::time::Duration) {
    let deadline = std::time::Instant::now() + within;
    // sled locks the file `db` in its directory.
    let Ok(file) = std::fs::File::open(path.join("db")) else {
        return;
    };
    while std::time::Instant::now() < deadline {
        match file.try_lock() {
            Ok(()) => {
                // Dropping `file` releases the probe's own lock.
                let _ = file.unlock();
                return;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
            Err(std::fs::TryLockError::Error(_)) => return,
        }
    }
}

pub(super) fn create_private_dir(path: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(path)
}

pub(super) fn open_error(path: &Path, error: sled::Error) -> Error {
    match &error {
        sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
            Error::StoreLocked {
                path: PathBuf::from(path),
            }
        }
        sled::Error::Corruption { at, .. } => Error::Corrupt {
            what: format!("the sled store at {}", path.display()),
            detail: format!(
                "sled found damaged data at {at:?} and will not open it; restore the directory from a backup"
            ),
        },
        _ => sled_error(error),
    }
}
