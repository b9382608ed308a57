//! The test database: `SAGA_TEST_DATABASE_URL`, default the local
//! PostgreSQL of the test machines. Each test works in a schema of its own,
//! so tests run side by side; a test drops its schema before it starts.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

/// The database the PostgreSQL tests use.
pub(crate) fn database_url() -> String {
    std::env::var("SAGA_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// What a test says when the database is not there: never a silent skip.
pub(crate) fn missing(error: impl std::fmt::Display) -> ! {
    panic!(
        "the PostgreSQL tests need a database at {} ({error}). Start one \
         (on the test machines: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start), \
         or point SAGA_TEST_DATABASE_URL at another",
        database_url()
    )
}

/// A schema name of this test's own, empty: `tag`, the process, a counter
/// and the clock, so parallel tests and test binaries never share one.
pub(crate) async fn fresh_schema(tag: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    if NEXT.load(Ordering::Relaxed) == 0 {
        drop_leftovers().await;
    }
    // The counter is per copy of this module (a binary may compile it in
    // several modules), so the clock's nanoseconds keep names apart too.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    // A schema name is a plain identifier: a tag's other characters (a
    // `-` made invalid SQL) are dropped.
    let tag: String = tag.chars().filter(char::is_ascii_alphanumeric).collect();
    let schema = format!(
        "saga_t_{tag}_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    drop_schema(&schema).await;
    schema
}

/// Drops the schemas of test processes that are gone (most tests leave
/// theirs behind; a failed crash test keeps its schema for a look).
async fn drop_leftovers() {
    let client = admin().await;
    let rows = client
        .query(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'saga\\_t\\_%'",
            &[],
        )
        .await
        .unwrap_or_else(|e| missing(e));
    for row in rows {
        let schema: String = row.get(0);
        // `saga_t_{tag}_{pid}_{n}_{nanos}`: counted from the end, as a
        // tag may hold '_' too.
        let pid = schema
            .rsplit('_')
            .nth(2)
            .and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            // Another process may be dropping it too: either wins.
            let _ = client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .await;
        }
    }
}

/// Removes `schema` and everything in it.
pub(crate) async fn drop_schema(schema: &str) {
    let client = admin().await;
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap_or_else(|e| missing(e));
}

/// A plain connection to the test database, for what a test does to it
/// behind the engine's back (killing its connections, reading its rows).
pub(crate) async fn admin() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&database_url(), tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| missing(e));
    tokio::spawn(connection);
    client
}
