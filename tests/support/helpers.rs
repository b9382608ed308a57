//! Small helpers shared by the integration tests of waits and control.

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use saga_runtime::{Engine, EventKind, Instance, Status, TestClock};

/// Fails the test instead of hanging when something never happens.
pub(crate) async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Lets the engine's tasks run for a few real milliseconds, for checks
/// that something did *not* happen.
pub(crate) async fn settle() {
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// A temporary engine on `clock`.
pub(crate) fn engine_on(clock: &TestClock) -> Engine {
    Engine::builder().clock(clock.clone()).temporary().unwrap()
}

/// What the instance's history says happened, in order.
pub(crate) async fn kinds(run: &Instance) -> Vec<EventKind> {
    run.history()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

/// Waits until the instance is in `status`.
pub(crate) async fn until_status(run: &Instance, status: Status) {
    within(&format!("status {status}"), async {
        while run.status().await.unwrap() != status {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
}
