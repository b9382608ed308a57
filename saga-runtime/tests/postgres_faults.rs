//! The PostgreSQL store against faults and hostile setups: cancelled
//! statements, a server that never answers, readers that must not change
//! the database, schemas that are not saga's to take, and system schemas.
#![cfg(feature = "postgres")]

#[path = "support/helpers.rs"]
mod helpers;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saga_runtime::Error;
use saga_runtime::prelude::*;

use helpers::{postgres, within};

/// How often each idempotency key's step body ran.
#[derive(Default)]
struct Runs(Mutex<HashMap<String, u32>>);

impl Runs {
    fn count(&self, key: &IdempotencyKey) {
        *self
            .0
            .lock()
            .unwrap()
            .entry(key.as_str().to_owned())
            .or_default() += 1;
    }
}

#[step(name = "first")]
async fn first(key: IdempotencyKey, runs: Service<Runs>, n: u64) -> Result<u64, StepError> {
    runs.count(&key);
    Ok(n + 1)
}

#[step(name = "second")]
async fn second(key: IdempotencyKey, runs: Service<Runs>, n: u64) -> Result<u64, StepError> {
    runs.count(&key);
    Ok(n * 2)
}

#[step(name = "third")]
async fn third(key: IdempotencyKey, runs: Service<Runs>, n: u64) -> Result<u64, StepError> {
    runs.count(&key);
    Ok(n + 3)
}

#[workflow(name = "three-steps")]
async fn three_steps(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let a = first(&ctx, n).await?;
    let b = second(&ctx, a).await?;
    Ok(third(&ctx, b).await?)
}

/// Waits for a number, then adds it.
#[workflow(name = "add-later")]
async fn add_later(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let more: u64 = ctx.wait_for_event("wait-more", "more", "1 day").await?;
    Ok(n + more)
}

/// Cancels the running statements of `schema`'s connections (they carry
/// the application name `saga:<schema>`) every 150 ms, until dropped, and
/// counts the statements it cancelled. So that there are statements to
/// cancel, each round first holds the tables that writes and flushes
/// take (reads go on), and cancels the statements queued behind them,
/// inside their transactions too.
struct Canceller {
    task: tokio::task::JoinHandle<()>,
    hits: Arc<std::sync::atomic::AtomicU64>,
}

impl Canceller {
    async fn start(schema: &str) -> Canceller {
        let admin = postgres::admin().await;
        // One message, so the server runs it whole (the lock is never left
        // held by a test that stops halfway).
        let round = format!(
            "BEGIN;
             LOCK TABLE {schema}.instances, {schema}.workers IN EXCLUSIVE MODE;
             SELECT pg_sleep(0.02);
             SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity
             WHERE application_name = 'saga:{schema}' AND state = 'active'
               AND pid <> pg_backend_pid();
             COMMIT"
        );
        let hits = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = hits.clone();
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(150));
            loop {
                every.tick().await;
                let messages = admin.simple_query(&round).await.unwrap();
                // The last row: the count (before it, pg_sleep's).
                let cancelled = messages
                    .iter()
                    .filter_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0),
                        _ => None,
                    })
                    .last();
                let n: u64 = cancelled.and_then(|n| n.parse().ok()).unwrap_or(0);
                counted.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
        });
        Canceller { task, hits }
    }
}

impl Drop for Canceller {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_statements_are_retried_and_no_step_runs_twice() {
    const INSTANCES: u64 = 200;
    let schema = postgres::fresh_schema("cancel").await;
    let runs = Arc::new(Runs::default());
    let engine = Engine::builder()
        .postgres_schema(&schema)
        .provide_arc(runs.clone())
        .register(three_steps)
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e));
    let canceller = Canceller::start(&schema).await;
    let mut results = tokio::task::JoinSet::new();
    let mut started = 0;
    for n in 0..INSTANCES {
        let run = match engine.start(three_steps, &format!("cancel-{n}"), n).await {
            Ok(run) => run,
            Err(e) => {
                eprintln!("cancel-{n} did not start: {e}");
                continue;
            }
        };
        started += 1;
        results.spawn(async move { run.result().await.map(|out| (n, out)) });
    }
    let mut completed = 0;
    let all = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(result) = results.join_next().await {
            match result.unwrap() {
                Ok((n, out)) => {
                    assert_eq!(out, (n + 1) * 2 + 3);
                    completed += 1;
                }
                Err(e) => eprintln!("an instance failed: {e}"),
            }
        }
    })
    .await;
    let hits = canceller.hits.load(std::sync::atomic::Ordering::Relaxed);
    drop(canceller);
    eprintln!(
        "{completed} of {INSTANCES} completed ({started} started, {hits} statements cancelled)"
    );
    assert!(
        hits > 0,
        "no statement was cancelled: the test tested nothing"
    );
    assert!(
        all.is_ok(),
        "instances still running after 60 s: {completed} of {INSTANCES} completed"
    );
    assert_eq!(completed, INSTANCES, "{completed} of {INSTANCES} completed");
    let runs = runs.0.lock().unwrap().clone();
    assert_eq!(runs.len() as u64, INSTANCES * 3);
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "steps ran more than once: {twice:?}");
    engine.close().await;
    postgres::drop_schema(&schema).await;
}

/// A server that takes connections and never answers (a load balancer in
/// front of a dead database): its address. The connections it took stay
/// open for as long as the test runs.
fn black_hole() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    address
}

#[tokio::test]
async fn a_server_that_never_answers_is_unreachable_not_a_hang() {
    let address = black_hole();
    // The URL's connect_timeout bounds each attempt, startup included.
    let url = format!("postgres://saga@{address}/db?connect_timeout=1");
    let err = within("a worker's connect", Engine::builder().connect(&url))
        .await
        .map(drop)
        .unwrap_err();
    assert!(matches!(err, Error::DatabaseUnreachable { .. }), "{err}");
    assert!(err.to_string().contains(&address.to_string()), "{err}");
    let err = within(
        "a reader's connect",
        Engine::builder().connect_read_only(&url),
    )
    .await
    .map(drop)
    .unwrap_err();
    assert!(matches!(err, Error::DatabaseUnreachable { .. }), "{err}");

    // Without one, the store timeout bounds the whole connect.
    let url = format!("postgres://saga@{address}/db");
    let connect = Engine::builder()
        .store_timeout(Duration::from_secs(1))
        .connect(&url);
    let err = within("a connect", connect).await.map(drop).unwrap_err();
    assert!(matches!(err, Error::DatabaseUnreachable { .. }), "{err}");
}

#[tokio::test]
async fn system_schemas_are_refused() {
    for schema in [
        "public",
        "information_schema",
        "pg_catalog",
        "pg_toast",
        "pg_saga",
    ] {
        let builder = || Engine::builder().postgres_schema(schema);
        let err = builder()
            .connect(&postgres::database_url())
            .await
            .map(drop)
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{schema}: {err}");
        assert!(err.to_string().contains(schema), "{err}");
        let err = builder()
            .connect_read_only(&postgres::database_url())
            .await
            .map(drop)
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{schema}: {err}");
    }
}

/// A login role of this test's own (roles are cluster-wide, so the name
/// carries the process and the clock); [`drop_role`] removes it.
async fn create_role(admin: &tokio_postgres::Client, tag: &str) -> String {
    drop_leftover_roles(admin).await;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let role = format!("saga_t_{tag}_{}_{nanos}", std::process::id());
    admin
        .batch_execute(&format!("CREATE ROLE {role} LOGIN"))
        .await
        .unwrap();
    role
}

/// Drops the roles of test processes that are gone (a failed test leaves
/// its roles behind).
async fn drop_leftover_roles(admin: &tokio_postgres::Client) {
    let rows = admin
        .query(
            "SELECT rolname FROM pg_roles WHERE rolname LIKE 'saga\\_t\\_%'",
            &[],
        )
        .await
        .unwrap();
    for row in rows {
        let role: String = row.get(0);
        let parts: Vec<_> = role.split('_').collect();
        let pid = parts
            .len()
            .checked_sub(2)
            .and_then(|i| parts[i].parse::<u32>().ok());
        let alive = pid.is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            // Another process may be dropping it too: either wins.
            let _ = admin
                .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
                .await;
        }
    }
}

async fn drop_role(admin: &tokio_postgres::Client, role: &str) {
    admin
        .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await
        .unwrap();
}

/// The test database's URL, for another role (the test database trusts
/// local connections).
fn url_as(role: &str) -> String {
    let url = postgres::database_url();
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{role}@{host}")
}

async fn schema_exists(admin: &tokio_postgres::Client, schema: &str) -> bool {
    admin
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
        .await
        .unwrap()
        .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_creates_nothing_and_needs_only_read_privileges() {
    let schema = postgres::fresh_schema("reader").await;
    let admin = postgres::admin().await;
    let url = postgres::database_url();
    let reader = || {
        Engine::builder()
            .postgres_schema(&schema)
            .connect_read_only(&url)
    };

    // A mistyped schema: an error that names it, and nothing created.
    let err = reader().await.map(drop).unwrap_err();
    assert!(
        matches!(&err, Error::SchemaMissing { schema: named } if *named == schema),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("--schema") && message.contains("SAGA_DATABASE_SCHEMA"),
        "{message}"
    );
    assert!(
        !schema_exists(&admin, &schema).await,
        "a reader created the schema"
    );

    // A schema of an older release: its version and the one expected.
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {schema}.migrations (version integer PRIMARY KEY);
             INSERT INTO {schema}.migrations VALUES (1), (2);"
        ))
        .await
        .unwrap();
    let err = reader().await.map(drop).unwrap_err();
    assert!(
        matches!(&err, Error::SchemaOutdated { version: 2, expected, .. } if *expected > 2),
        "{err}"
    );
    let tables: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 1, "a reader migrated the schema");
    postgres::drop_schema(&schema).await;

    // A worker makes the schema; a role with only the privileges that
    // schema.rs documents for readers reads it.
    let runs = Arc::new(Runs::default());
    let worker = Engine::builder()
        .postgres_schema(&schema)
        .provide_arc(runs.clone())
        .register(three_steps)
        .register(add_later)
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e));
    let run = worker.start(three_steps, "read-me", 1).await.unwrap();
    let waiting = worker.start(add_later, "post-to-me", 1).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 7);
    let role = create_role(&admin, "reader").await;
    admin
        .batch_execute(&format!(
            "GRANT USAGE ON SCHEMA {schema} TO {role};
             GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role};
             GRANT INSERT ON {schema}.inbox TO {role};
             GRANT USAGE ON SEQUENCE {schema}.inbox_n_seq TO {role};"
        ))
        .await
        .unwrap();
    let reader = Engine::builder()
        .postgres_schema(&schema)
        .connect_read_only(&url_as(&role))
        .await
        .unwrap();
    let listed = reader.list(&ListFilter::all()).await.unwrap();
    let ids: Vec<_> = listed.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, ["post-to-me", "read-me"]);
    let seen = reader.instance("read-me").await.unwrap();
    assert_eq!(seen.status().await.unwrap(), Status::Complete);
    assert_eq!(within("the result", seen.result::<u64>()).await.unwrap(), 7);
    assert!(!seen.history().await.unwrap().is_empty());
    // And posts to the worker (INSERT on inbox, USAGE on its sequence).
    helpers::until_status(&waiting, Status::Waiting).await;
    let sent = reader
        .event("post-to-me", "more")
        .send(&41u64)
        .await
        .unwrap();
    assert_eq!(sent, saga_runtime::Sent::Delivered);
    assert_eq!(within("the result", waiting.result()).await.unwrap(), 42);
    reader.close().await;
    worker.close().await;
    postgres::drop_schema(&schema).await;
    drop_role(&admin, &role).await;
}

/// A schema that a newer release migrated: a worker and a reader of this
/// release open it while its newer migrations declare this release
/// compatible (`compatible_from`), and refuse it with a typed error that
/// says to upgrade once one does not; nothing stored is lost either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_opens_only_while_it_declares_this_release_compatible() {
    let schema = postgres::fresh_schema("newer").await;
    let admin = postgres::admin().await;
    let url = postgres::database_url();
    let runs = Arc::new(Runs::default());
    let worker = || {
        Engine::builder()
            .postgres_schema(&schema)
            .provide_arc(runs.clone())
            .register(three_steps)
            .connect(&url)
    };
    let reader = || {
        Engine::builder()
            .postgres_schema(&schema)
            .connect_read_only(&url)
    };
    let engine = worker().await.unwrap_or_else(|e| postgres::missing(e));
    let run = engine.start(three_steps, "kept", 1).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 7);
    engine.close().await;
    let ours: i32 = admin
        .query_one(
            &format!("SELECT max(version) FROM {schema}.migrations"),
            &[],
        )
        .await
        .unwrap()
        .get(0);

    // An additive migration of the next release: compatible from ours.
    admin
        .batch_execute(&format!(
            "CREATE TABLE {schema}.from_the_future (n integer);
             INSERT INTO {schema}.migrations (version, compatible_from) VALUES ({}, {ours})",
            ours + 1
        ))
        .await
        .unwrap();
    let engine = worker().await.expect("a compatible newer schema opens");
    let run = engine.start(three_steps, "after", 2).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 9);
    let kept = engine.instance("kept").await.unwrap();
    assert_eq!(within("the result", kept.result::<u64>()).await.unwrap(), 7);
    engine.close().await;
    let read = reader().await.expect("a reader opens it too");
    assert_eq!(read.list(&ListFilter::all()).await.unwrap().len(), 2);
    read.close().await;
    // This release ran no migration of its own over it.
    let newest: i32 = admin
        .query_one(
            &format!("SELECT max(version) FROM {schema}.migrations"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(newest, ours + 1);

    // A migration after it that this release may not use.
    admin
        .batch_execute(&format!(
            "INSERT INTO {schema}.migrations (version, compatible_from) VALUES ({}, {})",
            ours + 2,
            ours + 1
        ))
        .await
        .unwrap();
    for err in [
        worker().await.map(drop).unwrap_err(),
        reader().await.map(drop).unwrap_err(),
    ] {
        assert!(
            matches!(
                &err,
                Error::SchemaNewer { version, compatible_from, release, .. }
                    if *version == ours + 2 && *compatible_from == ours + 1 && *release == ours
            ),
            "{err}"
        );
        assert!(err.to_string().contains("upgrade this worker"), "{err}");
    }
    // A row without `compatible_from` (written before the rule) counts
    // as compatible from its own version only.
    admin
        .batch_execute(&format!(
            "DELETE FROM {schema}.migrations WHERE version = {};
             UPDATE {schema}.migrations SET compatible_from = NULL WHERE version = {}",
            ours + 2,
            ours + 1
        ))
        .await
        .unwrap();
    let err = worker().await.map(drop).unwrap_err();
    assert!(matches!(&err, Error::SchemaNewer { .. }), "{err}");

    // Back to what this release knows: everything is there.
    admin
        .batch_execute(&format!(
            "DELETE FROM {schema}.migrations WHERE version > {ours}"
        ))
        .await
        .unwrap();
    let engine = worker().await.unwrap();
    let mut ids: Vec<String> = engine
        .list(&ListFilter::all())
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    ids.sort();
    assert_eq!(ids, ["after", "kept"]);
    engine.close().await;
    postgres::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_refuses_a_schema_another_role_made() {
    let schema = postgres::fresh_schema("owner").await;
    let admin = postgres::admin().await;
    let maker = create_role(&admin, "maker").await;
    let taker = create_role(&admin, "taker").await;
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN
                 EXECUTE format('GRANT CREATE ON DATABASE %I TO {maker}, {taker}', current_database());
             END $$"
        ))
        .await
        .unwrap();
    let worker = |role: &str| {
        let builder = Engine::builder().postgres_schema(&schema);
        let url = url_as(role);
        async move { builder.connect(&url).await }
    };
    // The maker's worker makes the schema, which then lets the taker in
    // as far as privileges go.
    worker(&maker).await.unwrap().close().await;
    admin
        .batch_execute(&format!(
            "GRANT ALL ON SCHEMA {schema} TO {taker};
             GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {taker};
             GRANT ALL ON ALL SEQUENCES IN SCHEMA {schema} TO {taker};"
        ))
        .await
        .unwrap();
    let err = worker(&taker).await.map(drop).unwrap_err();
    assert!(
        matches!(&err, Error::SchemaForeignOwner { owner, object } if *owner == maker && object.contains(&schema)),
        "{err}"
    );
    // A member of the maker's role is at home.
    admin
        .batch_execute(&format!("GRANT {maker} TO {taker}"))
        .await
        .unwrap();
    worker(&taker).await.unwrap().close().await;
    // A schema of the taker's own, with a table of the maker's in it.
    admin
        .batch_execute(&format!(
            "REVOKE {maker} FROM {taker}; ALTER SCHEMA {schema} OWNER TO {taker}"
        ))
        .await
        .unwrap();
    let err = worker(&taker).await.map(drop).unwrap_err();
    assert!(
        matches!(&err, Error::SchemaForeignOwner { owner, object } if *owner == maker && object.starts_with(&format!("table {schema}."))),
        "{err}"
    );

    postgres::drop_schema(&schema).await;
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN
                 EXECUTE format('REVOKE CREATE ON DATABASE %I FROM {maker}, {taker}', current_database());
             END $$"
        ))
        .await
        .unwrap();
    drop_role(&admin, &taker).await;
    drop_role(&admin, &maker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_refuses_triggers_saga_did_not_make() {
    let schema = postgres::fresh_schema("trigger").await;
    let admin = postgres::admin().await;
    let builder = || Engine::builder().postgres_schema(&schema);
    let url = postgres::database_url();
    builder()
        .connect(&url)
        .await
        .unwrap_or_else(|e| postgres::missing(e))
        .close()
        .await;
    admin
        .batch_execute(&format!(
            "CREATE FUNCTION {schema}.spy() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
             CREATE TRIGGER spy BEFORE INSERT ON {schema}.journal
                 FOR EACH ROW EXECUTE FUNCTION {schema}.spy();"
        ))
        .await
        .unwrap();
    let refused = |err: Error| match &err {
        Error::SchemaForeignTriggers { triggers, .. } => {
            assert_eq!(triggers, &[format!("spy ON {schema}.journal")], "{err}");
        }
        _ => panic!("not refused for its trigger: {err}"),
    };
    refused(builder().connect(&url).await.map(drop).unwrap_err());
    refused(
        builder()
            .connect_read_only(&url)
            .await
            .map(drop)
            .unwrap_err(),
    );
    admin
        .batch_execute(&format!("DROP TRIGGER spy ON {schema}.journal"))
        .await
        .unwrap();
    builder().connect(&url).await.unwrap().close().await;
    postgres::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_connects_through_a_cancelled_migration() {
    let schema = postgres::fresh_schema("migrate").await;
    let admin = postgres::admin().await;
    // Holds the lock that migrations take, so the worker's migration waits
    // where the test can cancel it.
    let key = format!("saga-migrate:{schema}");
    admin
        .execute("SELECT pg_advisory_lock(hashtext($1))", &[&key])
        .await
        .unwrap();
    let connecting = tokio::spawn({
        let schema = schema.clone();
        async move {
            Engine::builder()
                .postgres_schema(&schema)
                .connect(&postgres::database_url())
                .await
        }
    });
    let cancel = format!(
        "SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity
         WHERE application_name = 'saga:{schema}' AND wait_event_type = 'Lock'
           AND wait_event = 'advisory'"
    );
    within("the migration to wait", async {
        while admin
            .query_one(&cancel, &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 0
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    admin
        .execute("SELECT pg_advisory_unlock(hashtext($1))", &[&key])
        .await
        .unwrap();
    let engine = within("the connect", connecting).await.unwrap().unwrap();
    engine.close().await;
    postgres::drop_schema(&schema).await;
}
