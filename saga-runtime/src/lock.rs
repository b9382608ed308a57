//! Locking a mutex that a panic elsewhere may have poisoned.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, going on after a panic elsewhere: the guarded data stays
/// consistent at every point a panic could occur.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
