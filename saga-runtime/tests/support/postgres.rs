//! The test database: `SAGA_TEST_DATABASE_URL`; else the PostgreSQL that
//! answers at the default address (`127.0.0.1:5432`, or
//! `SAGA_TEST_DEFAULT_PG=host:port`), database `test`; else a throwaway
//! cluster the tests start for themselves. Each test works in a schema of
//! its own, so tests run side by side; a test drops its schema before it
//! starts.
//!
//! The throwaway cluster: `initdb` and `pg_ctl` (as `postgres` through
//! `runuser` when the tests run as root) in a directory under the system's
//! temporary directory, on a free port, trust authentication on loopback.
//! One cluster serves the whole `cargo test` run: the first test binary
//! that needs it makes it under a lock file in the target directory
//! (`target/saga-test-postgres.lock`), writes its URL beside the lock, and
//! every other binary, and the next run, reuses it while it answers.

#![allow(dead_code)]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

#[path = "pg_cluster.rs"]
mod pg_cluster;

/// The database the PostgreSQL tests use (see the module docs).
pub(crate) fn database_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("SAGA_TEST_DATABASE_URL") {
            return url;
        }
        let default =
            std::env::var("SAGA_TEST_DEFAULT_PG").unwrap_or_else(|_| "127.0.0.1:5432".to_owned());
        if answers(&default) {
            return format!("postgres://postgres@{default}/test");
        }
        throwaway_cluster()
    })
    .clone()
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

/// Whether something listens at `address` (`host:port`).
fn answers(address: &str) -> bool {
    use std::net::ToSocketAddrs;
    address.to_socket_addrs().into_iter().flatten().any(|a| {
        std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(1)).is_ok()
    })
}

/// The URL of the tests' own cluster, made or reused (module docs).
fn throwaway_cluster() -> String {
    // The test binary is `<target>/<profile>/deps/<name>`.
    let target = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.to_owned()))
        .unwrap_or_else(std::env::temp_dir);
    let lock_path = target.join("saga-test-postgres.lock");
    let url_path = target.join("saga-test-postgres.url");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", lock_path.display()));
    lock.lock()
        .unwrap_or_else(|e| panic!("cannot lock {}: {e}", lock_path.display()));
    if let Ok(url) = std::fs::read_to_string(&url_path)
        && let Some(address) = url.split('@').nth(1).and_then(|a| a.split('/').next())
        && answers(address)
    {
        return url;
    }
    let programs = pg_cluster::Programs::find(
        "with nothing answering at the default address, the PostgreSQL tests",
    );
    // Under the temporary directory, which the `postgres` user can reach
    // (a target directory under /root is not).
    let dir = std::env::temp_dir().join(format!("saga-test-postgres-{:x}", hash(&target)));
    let data = dir.join("data");
    if data.exists() {
        programs.stop(&data);
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    pg_cluster::set_mode(&dir, 0o755);
    programs.give(&dir);
    let port = pg_cluster::free_port();
    let conf = format!(
        "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{dir}'\n\
         fsync = off\nsynchronous_commit = on\nfull_page_writes = off\nmax_connections = 400\n\
         shared_buffers = 128MB\n",
        dir = dir.display()
    );
    programs.initdb(&data, &conf);
    let log = dir.join("log").display().to_string();
    programs.pg_ctl(&data, &["start", "-w", "-t", "60", "-l", &log]);
    programs.run(
        "psql",
        &[
            "-X",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-c",
            "CREATE DATABASE test",
        ],
    );
    let url = format!("postgres://postgres@127.0.0.1:{port}/test");
    std::fs::write(&url_path, &url).unwrap();
    eprintln!(
        "nothing answers at the default test database: started a PostgreSQL of the tests' own at {url} (data in {})",
        dir.display()
    );
    url
}

/// A short hash of `path`, so two checkouts keep two clusters.
fn hash(path: &std::path::Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut hasher);
    hasher.finish()
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
