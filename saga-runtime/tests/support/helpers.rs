//! The harness every integration test shares: bounded waits (a broken rule
//! fails the test instead of hanging it), polling for a condition, and the
//! engine and history helpers most files need.

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use saga_runtime::inspect::EventKind;
use saga_runtime::testing::TestClock;
use saga_runtime::{Engine, Instance, Status};

/// How long any one wait of a test may take before the test fails: far
/// beyond what a slow, loaded machine needs, so no test depends on speed.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// Fails the test instead of hanging when something never happens.
pub(crate) async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Polls `condition` every few real milliseconds until it holds, at most
/// [`PATIENCE`], for states no event announces.
pub(crate) async fn wait_until<F: Future<Output = bool>>(what: &str, condition: impl Fn() -> F) {
    within(what, async {
        while !condition().await {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
}

/// Waits until `engine` has nothing left to do by itself
/// ([`Engine::idle`]), for checks that something did *not* happen; at
/// most [`PATIENCE`].
pub(crate) async fn quiet(engine: &Engine) {
    within("the engine to be idle", engine.idle()).await;
}

/// An engine on `clock`, on a fresh store (see [`fresh`]).
pub(crate) async fn engine_on(clock: &TestClock) -> Engine {
    fresh(Engine::builder().clock(clock.clone())).await
}

/// Whether this test binary runs the semantics suite on PostgreSQL:
/// `tests/postgres_semantics.rs` compiles the semantics test files again,
/// and their engines then run on PostgreSQL instead of sled.
pub(crate) fn on_postgres() -> bool {
    env!("CARGO_CRATE_NAME") == "postgres_semantics"
}

/// An engine with `builder`'s options on a fresh, empty store: a
/// temporary sled store, or a schema of its own on the test database when
/// the suite runs on PostgreSQL ([`on_postgres`]).
pub(crate) async fn fresh(builder: saga_runtime::EngineBuilder) -> Engine {
    #[cfg(feature = "postgres")]
    if on_postgres() {
        let schema = postgres::fresh_schema("sem").await;
        return builder
            .postgres_schema(&schema)
            .connect(&postgres::database_url())
            .await
            .unwrap_or_else(|e| postgres::missing(e));
    }
    builder.temporary().expect("a temporary engine")
}

#[cfg(feature = "postgres")]
#[path = "postgres.rs"]
pub(crate) mod postgres;

/// What the instance's history says happened, in order.
pub(crate) async fn kinds(run: &(impl AsRef<Instance> + ?Sized)) -> Vec<EventKind> {
    let run: &Instance = run.as_ref();
    run.history()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

/// Waits until the instance is in `status`.
pub(crate) async fn until_status(run: &(impl AsRef<Instance> + ?Sized), status: Status) {
    let run: &Instance = run.as_ref();
    wait_until(&format!("status {status}"), || async {
        run.status().await.unwrap() == status
    })
    .await;
}

/// Opens a sled store with `open`, retrying while it is locked: sled's I/O
/// threads may hold the file lock a moment after the last handle on the
/// store was dropped.
pub(crate) async fn when_released<T>(
    open: impl Fn() -> Result<T, saga_runtime::Error>,
) -> Result<T, saga_runtime::Error> {
    for _ in 0..100 {
        match open() {
            Err(saga_runtime::Error::StoreLocked { .. }) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
    open()
}

/// A store a test closes and opens again: a sled directory, or a schema
/// of its own on the test database when the suite runs on PostgreSQL.
pub(crate) struct Reopenable {
    dir: std::path::PathBuf,
    #[cfg(feature = "postgres")]
    schema: Option<String>,
}

impl Reopenable {
    /// A new, empty store named after `tag`.
    pub(crate) async fn new(tag: &str) -> Reopenable {
        let dir = std::env::temp_dir().join(format!("saga-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Reopenable {
            dir,
            #[cfg(feature = "postgres")]
            schema: if on_postgres() {
                Some(postgres::fresh_schema(tag).await)
            } else {
                None
            },
        }
    }

    /// Opens it with the options `builder` makes.
    pub(crate) async fn open(&self, builder: impl Fn() -> saga_runtime::EngineBuilder) -> Engine {
        #[cfg(feature = "postgres")]
        if self.schema.is_some() {
            return self
                .try_open(builder)
                .await
                .unwrap_or_else(|e| postgres::missing(e));
        }
        self.try_open(builder).await.expect("the store opens")
    }

    /// Opens it with the options `builder` makes, or says why not.
    pub(crate) async fn try_open(
        &self,
        builder: impl Fn() -> saga_runtime::EngineBuilder,
    ) -> Result<Engine, saga_runtime::Error> {
        #[cfg(feature = "postgres")]
        if let Some(schema) = &self.schema {
            return builder()
                .postgres_schema(schema)
                .connect(&postgres::database_url())
                .await;
        }
        when_released(|| builder().open(&self.dir)).await
    }
}

impl Drop for Reopenable {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `future` `polls` times with a noop waker, letting the engine's
/// tasks run between polls, then drops it; its output if it completed.
pub(crate) async fn drop_after<F: Future>(future: F, polls: usize) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for _ in 0..polls {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return Some(out);
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}
