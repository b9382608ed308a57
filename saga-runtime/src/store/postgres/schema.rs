//! The tables of a saga schema, and the versioned migrations that make them.
//!
//! Every table lives in one schema (default `saga`), so several
//! applications (or tests) share a database without seeing each other.
//! Migrations run on connect, each once, in order, under an advisory lock
//! named after the schema: two workers connecting at once migrate one
//! after the other, and the second finds nothing to do.

use tokio_postgres::Client;

use crate::error::{Error, Result};

/// The migrations, in order; entry `i` is version `i + 1`. Never edit a
/// released one: add the next.
const MIGRATIONS: &[&str] = &[
    // 1: journals, the index, and the lease of the worker that drives them.
    "CREATE TABLE {s}.journal (
         id text NOT NULL,
         seq bigint NOT NULL,
         record bytea NOT NULL,
         PRIMARY KEY (id, seq)
     );
     CREATE TABLE {s}.instances (
         id text PRIMARY KEY,
         summary bytea NOT NULL
     );
     CREATE TABLE {s}.lease (
         singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
         owner text NOT NULL,
         epoch bigint NOT NULL,
         expires_at timestamptz NOT NULL
     );",
    // 2: the inbox: intents (events, control calls) posted by processes
    // that do not drive the instances, for the worker that does.
    "CREATE TABLE {s}.inbox (
         n bigserial PRIMARY KEY,
         id text NOT NULL,
         intent bytea NOT NULL,
         posted_at timestamptz NOT NULL DEFAULT now()
     );",
    // 3: every worker drives the instances it owns. Workers renew a lease
    // each; an instance's owner is the worker that created or claimed it.
    // The index keeps, in columns, what a claim and `list()` filter on.
    "CREATE TABLE {s}.workers (
         name text PRIMARY KEY,
         started_at timestamptz NOT NULL DEFAULT now(),
         expires_at timestamptz NOT NULL
     );
     ALTER TABLE {s}.instances
         ADD COLUMN owner text,
         ADD COLUMN workflow text,
         ADD COLUMN status text,
         ADD COLUMN active boolean NOT NULL DEFAULT true;
     CREATE INDEX instances_active ON {s}.instances (owner) WHERE active;
     CREATE INDEX instances_status ON {s}.instances (status, workflow);
     CREATE INDEX inbox_instance ON {s}.inbox (id);
     DROP TABLE {s}.lease;",
    // 4: the transaction that wrote each journal row, so a subscriber in
    // any process tails the journals by snapshot (it loses and repeats
    // nothing: see `tail`); a token per post, so a post retried after a
    // lost connection is stored once.
    "ALTER TABLE {s}.journal ADD COLUMN tx xid8 NOT NULL DEFAULT pg_current_xact_id();
     CREATE INDEX journal_tail ON {s}.journal (tx, id, seq);
     ALTER TABLE {s}.inbox ADD COLUMN token text UNIQUE;",
    // 5: which kinds of journal record an instance holds (0: only kinds
    // every release reads), so a worker of an older release never claims
    // an instance a newer one wrote records into (`journal::change`).
    "ALTER TABLE {s}.instances ADD COLUMN needs integer NOT NULL DEFAULT 0;",
];

/// The newest schema version this release knows.
pub(super) const VERSION: i32 = MIGRATIONS.len() as i32;

/// Checks that `schema` is a plain SQL identifier, so it can be spliced
/// into statements unquoted.
pub(super) fn validate(schema: &str) -> Result<()> {
    let mut chars = schema.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    if first_ok
        && schema.len() <= 63
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "PostgreSQL schema name {schema:?}: use 1-63 characters of [a-z0-9_], starting with a letter or '_'"
        )))
    }
}

/// Creates the schema and applies the migrations it lacks. A database
/// migrated by a newer release is refused: this one would not know its
/// tables.
pub(super) async fn migrate(client: &mut Client, schema: &str) -> Result<()> {
    let tx = client.transaction().await.map_err(super::db_error)?;
    // Namespaced by schema: advisory locks are database-wide.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('saga-migrate:' || $1::text))",
        &[&schema],
    )
    .await
    .map_err(super::db_error)?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.migrations (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         );"
    ))
    .await
    .map_err(super::db_error)?;
    let row = tx
        .query_one(
            &format!("SELECT coalesce(max(version), 0) FROM {schema}.migrations"),
            &[],
        )
        .await
        .map_err(super::db_error)?;
    let have: i32 = row.get(0);
    if have > VERSION {
        return Err(Error::Store(format!(
            "the PostgreSQL schema {schema:?} is at version {have}, newer than this release knows ({VERSION}); upgrade saga-runtime"
        )));
    }
    for (i, migration) in MIGRATIONS.iter().enumerate().skip(have as usize) {
        tx.batch_execute(&migration.replace("{s}", schema))
            .await
            .map_err(super::db_error)?;
        tx.execute(
            &format!("INSERT INTO {schema}.migrations (version) VALUES ($1)"),
            &[&(i as i32 + 1)],
        )
        .await
        .map_err(super::db_error)?;
    }
    tx.commit().await.map_err(super::db_error)
}

#[cfg(test)]
mod tests {
    use super::validate;

    #[test]
    fn schema_names_are_plain_identifiers() {
        for good in ["saga", "_t1", "saga_test_42"] {
            assert!(validate(good).is_ok(), "{good}");
        }
        for bad in ["", "Saga", "1x", "a-b", "a;drop", "a b", &"x".repeat(64)] {
            assert!(validate(bad).is_err(), "{bad}");
        }
    }
}
