//! What the PostgreSQL benches share: the database, and worker processes
//! (the bench binary, re-executed with a variable set) that the parent
//! tells, a line on their stdin at a time, when to go and when to stop.

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Instant;

/// The database: `SAGA_TEST_DATABASE_URL`, default the local test one.
pub(crate) fn url() -> String {
    std::env::var("SAGA_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A plain connection, for what a bench does beside the engine.
pub(crate) async fn admin() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "no PostgreSQL at {} ({e}); set SAGA_TEST_DATABASE_URL",
                url()
            )
        });
    tokio::spawn(connection);
    client
}

/// Makes `schema` anew (dropping what an earlier run left) on `client`.
pub(crate) async fn fresh_schema(client: &tokio_postgres::Client, schema: &str) {
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .await
        .unwrap();
}

/// Drops `schema` and what the bench wrote into it.
pub(crate) async fn drop_schema(client: &tokio_postgres::Client, schema: &str) {
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}

/// Single-row inserts of [`raw_commits`].
const RAW_COMMITS: usize = 2_000;

/// The least a durable write costs here: one single-row insert, committed
/// synchronously, per round trip.
pub(crate) async fn raw_commits(client: &tokio_postgres::Client, schema: &str) -> f64 {
    client
        .batch_execute(&format!(
            "CREATE TABLE {schema}.raw (n bigint PRIMARY KEY, v bytea)"
        ))
        .await
        .unwrap();
    let insert = client
        .prepare(&format!("INSERT INTO {schema}.raw VALUES ($1, $2)"))
        .await
        .unwrap();
    let started = Instant::now();
    for n in 0..RAW_COMMITS as i64 {
        client
            .execute(&insert, &[&n, &vec![7u8; 64]])
            .await
            .unwrap();
    }
    RAW_COMMITS as f64 / started.elapsed().as_secs_f64()
}

/// In a worker process: waits for the parent's next line (`go`, `stop`).
pub(crate) fn next_order() -> String {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .expect("the parent's order");
    line.trim().to_owned()
}

/// Worker processes, each this binary with `env` set to its spec.
pub(crate) struct Workers {
    children: Vec<Child>,
    outputs: Vec<Lines<BufReader<ChildStdout>>>,
}

impl Workers {
    /// Starts one worker process per spec.
    pub(crate) fn spawn(env: &str, specs: impl IntoIterator<Item = String>) -> Workers {
        let exe = std::env::current_exe().expect("the bench binary");
        let mut children: Vec<Child> = specs
            .into_iter()
            .map(|spec| {
                Command::new(&exe)
                    .env(env, spec)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("a worker process")
            })
            .collect();
        let outputs = children
            .iter_mut()
            .map(|c| BufReader::new(c.stdout.take().expect("its stdout")).lines())
            .collect();
        Workers { children, outputs }
    }

    /// Waits until every worker has said `word`.
    pub(crate) fn expect(&mut self, word: &str) {
        for lines in &mut self.outputs {
            let line = lines.next().expect("a line").expect("a worker's output");
            assert_eq!(line, word, "a worker process said {line:?}");
        }
    }

    /// Tells every worker `order` (a line on its stdin).
    pub(crate) fn tell(&mut self, order: &str) {
        for child in &mut self.children {
            writeln!(child.stdin.as_mut().expect("its stdin"), "{order}")
                .expect("a worker process listens");
        }
    }

    /// Waits for every worker to exit, successfully.
    pub(crate) fn wait(self) {
        for mut child in self.children {
            assert!(
                child.wait().expect("a worker process").success(),
                "a worker process failed"
            );
        }
    }
}
