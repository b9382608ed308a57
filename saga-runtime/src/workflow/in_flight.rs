//! Counts running step tasks, so a driver (one instance's) or a drain
//! (the whole engine's) can wait until they are gone.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::lock::lock;

#[derive(Default)]
pub(crate) struct InFlight {
    count: Mutex<usize>,
    idle: Notify,
}

/// Held by a step task while it exists; dropped when it ends or is aborted.
pub(crate) struct TaskGuard {
    in_flight: Arc<InFlight>,
}

impl InFlight {
    pub(crate) fn enter(self: &Arc<Self>) -> TaskGuard {
        *lock(&self.count) += 1;
        TaskGuard {
            in_flight: self.clone(),
        }
    }

    pub(crate) async fn wait_idle(&self) {
        loop {
            // Registered before the check, so a guard dropped in between
            // still wakes it.
            let idle = self.idle.notified();
            if *lock(&self.count) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Whether no task is in flight.
    pub(crate) fn is_idle(&self) -> bool {
        *lock(&self.count) == 0
    }

    /// Completes when the last task in flight ends after this call.
    pub(crate) fn idle_notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.idle.notified()
    }

    /// Waits until idle, up to `deadline` (real time); whether it got there.
    pub(crate) async fn wait_idle_within(&self, deadline: Duration) -> bool {
        tokio::time::timeout(deadline, self.wait_idle())
            .await
            .is_ok()
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        let mut count = lock(&self.in_flight.count);
        *count -= 1;
        if *count == 0 {
            self.in_flight.idle.notify_waiters();
        }
    }
}
