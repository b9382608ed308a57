//! The tables of a saga schema, and the versioned migrations that make them.
//!
//! Every table lives in one schema (default `saga`), so several
//! applications (or tests) share a database without seeing each other.
//! Migrations run on connect, each once, in order, under an advisory lock
//! named after the schema: two workers connecting at once migrate one
//! after the other, and the second finds nothing to do. A reader
//! (`connect_read_only`, the `saga` command) migrates nothing and creates
//! nothing: a schema that is missing or older than this release is an
//! error naming it.
//!
//! # Newer schemas and rolling deploys
//!
//! Each applied migration's row in `migrations` keeps, beside its
//! version, `compatible_from`: the oldest release schema version
//! ([`VERSION`] of a release) that may still read and write the schema at
//! that version. A migration that only adds (a table, a nullable column,
//! an index that nothing relies on) keeps the `compatible_from` of the
//! version before it ([`COMPATIBLE_FROM`]), so the workers of the release
//! before go on opening the schema during a rolling deploy; one that
//! changes what an older release reads or writes raises it to its own
//! version. A release opens a schema newer than its own `VERSION` only if
//! `VERSION >= compatible_from` (the largest over the versions it does not
//! know; a row without one counts as its own version), and otherwise
//! refuses it with [`Error::SchemaNewer`], which says to upgrade the
//! worker. It then runs no migration: it knows none of them.
//!
//! The rule starts with the release that brought it (schema version 11):
//! every release before refuses any schema newer than its own, so once the
//! first worker of a release migrates past 10, a worker of the release
//! before that restarts cannot connect until it is upgraded.
//!
//! # Indexes on large tables
//!
//! A migration runs in one transaction, under the lock above, so it must
//! not build an index on a table that may be large (`journal`,
//! `instances`): `CREATE INDEX` would hold off every writer until it is
//! built. Such an index is built after the migration's commit, with
//! `CREATE INDEX CONCURRENTLY IF NOT EXISTS` on a connection of its own
//! (outside any transaction), and nothing may rely on it for correctness:
//! a build cut short leaves an `INVALID` index, which the next worker's
//! build drops (`DROP INDEX CONCURRENTLY`) and makes again. Migration 11
//! needs none: its only index is on the new (empty) `timers` table.
//!
//! A worker adopts only a schema of its own: the schema and every table
//! in it must belong to the worker's role, or to a role it is a member of,
//! and no trigger that saga did not make may sit on its tables (another
//! role's object or trigger could read or change what saga stores).
//!
//! # Privileges
//!
//! A **worker** (`Engine::connect`) connects as the role that owns the
//! schema, or a member of it: it runs the migrations (DDL) and writes every
//! table. The first worker creates the schema, which needs `CREATE` on the
//! database; once the schema exists, `CONNECT` on the database and the
//! ownership suffice.
//!
//! A **reader** (`Engine::connect_read_only`, the `saga` command) needs
//! `CONNECT` on the database, `USAGE` on the schema and `SELECT` on its
//! tables; to post events and control calls (`saga send-event`, `pause`,
//! `terminate`, ...), `INSERT` on `inbox` and `USAGE` on its sequence too.
//! Nothing more: it changes no other table and runs no DDL. For a schema
//! `saga` and a role `saga_reader`:
//!
//! ```sql
//! GRANT USAGE ON SCHEMA saga TO saga_reader;
//! GRANT SELECT ON ALL TABLES IN SCHEMA saga TO saga_reader;
//! GRANT INSERT ON saga.inbox TO saga_reader;
//! GRANT USAGE ON SEQUENCE saga.inbox_n_seq TO saga_reader;
//! ```

use tokio_postgres::{Client, GenericClient};

use super::fault::PgFailure;
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
    // And the answer of the worker that acted on a post, for its poster.
    "ALTER TABLE {s}.instances ADD COLUMN needs integer NOT NULL DEFAULT 0;
     ALTER TABLE {s}.inbox ADD COLUMN answer bytea, ADD COLUMN answered_at timestamptz;",
    // 6: what `list()` filters and pages on, each on an index: the start
    // time by the database's clock (then id, for keyset pages), the end,
    // tags (jsonb, `@>` on a GIN index), the parent, rollback failures;
    // the indexes leave out the rows without (no tags, not ended): every
    // running instance's row is rewritten at each status change, and rows
    // that all share one key (an empty `tags`, a NULL `ended_at`) would all
    // write to one place in the index;
    // and since when the owner owns the instance. Rows from before have
    // NULLs here (their `facts` NULL marks them): workers backfill them
    // from their journals (`journal::backfill`), a batch at a time.
    "ALTER TABLE {s}.instances
         ADD COLUMN facts bytea,
         ADD COLUMN started_at timestamptz,
         ADD COLUMN ended_at timestamptz,
         ADD COLUMN parent text,
         ADD COLUMN tags jsonb,
         ADD COLUMN rollback_failed boolean,
         ADD COLUMN failed_compensation boolean,
         ADD COLUMN owned_since timestamptz;
     ALTER TABLE {s}.instances
         ALTER COLUMN started_at SET DEFAULT now(),
         ALTER COLUMN owned_since SET DEFAULT now();
     CREATE INDEX instances_started ON {s}.instances (started_at, id COLLATE \"C\");
     CREATE INDEX instances_id ON {s}.instances (id COLLATE \"C\");
     CREATE INDEX instances_ended ON {s}.instances (ended_at) WHERE ended_at IS NOT NULL;
     CREATE INDEX instances_parent ON {s}.instances (parent) WHERE parent IS NOT NULL;
     CREATE INDEX instances_tags ON {s}.instances USING gin (tags jsonb_path_ops)
         WHERE tags IS NOT NULL;
     CREATE INDEX instances_rollback_failed ON {s}.instances (started_at) WHERE rollback_failed;
     CREATE INDEX instances_failed_compensation ON {s}.instances (started_at)
         WHERE failed_compensation;
     CREATE INDEX instances_unindexed ON {s}.instances (id) WHERE facts IS NULL;",
    // 7: queues. Each instance started on a queue has its queue, key and
    // priority in columns, its place (a sequence: first come, first
    // served across workers) and whether it took a slot; the slots held
    // are the rows taken and not ended, so none outlives its instance.
    // A waiting row names no owner until a worker takes it. When each
    // key of a queue was last served, for keys to take turns.
    "CREATE SEQUENCE {s}.queue_order;
     ALTER TABLE {s}.instances
         ADD COLUMN queue text,
         ADD COLUMN queue_key text,
         ADD COLUMN priority integer,
         ADD COLUMN queue_taken boolean,
         ADD COLUMN queue_order bigint;
     CREATE INDEX instances_queue_waiting ON {s}.instances (queue, priority DESC, queue_order)
         WHERE queue IS NOT NULL AND NOT queue_taken;
     CREATE INDEX instances_queue_held ON {s}.instances (queue, queue_key)
         WHERE queue_taken AND ended_at IS NULL;
     CREATE TABLE {s}.queue_turns (
         queue text NOT NULL,
         key text NOT NULL,
         turn bigint NOT NULL,
         PRIMARY KEY (queue, key)
     );",
    // 8: schedules: each one's state (definition, next fire time, paused,
    // last tick, ticks decided on), encoded by the engine
    // (`schedule::state`). Firing swaps it with a conditional UPDATE on
    // the old value, so two workers never both advance one schedule.
    "CREATE TABLE {s}.schedules (
         name text PRIMARY KEY,
         state bytea NOT NULL,
         updated_at timestamptz NOT NULL DEFAULT now()
     );",
    // 9: queue rate limits. Each start of a queue with a rate, at the
    // engine's time of its take (its `Dequeued` record's time): a take
    // counts the starts within the window, under the queue's lock, and
    // drops those that left it.
    "CREATE TABLE {s}.queue_starts (
         queue text NOT NULL,
         taken_at timestamptz NOT NULL
     );
     CREATE INDEX queue_starts_by_time ON {s}.queue_starts (queue, taken_at);",
    // 10: each queue's limits, as the first worker to declare it stored
    // them (`queue::stored`), so every worker runs it by the same ones;
    // a take reads them under the queue's lock.
    "CREATE TABLE {s}.queues (
         name text PRIMARY KEY,
         limits bytea NOT NULL,
         updated_at timestamptz NOT NULL DEFAULT now()
     );",
    // 11: the timers of the instances that only wait (`IndexRow::wake`),
    // in a table of their own (`timers`), so a status change never
    // rewrites them: one row per waiting instance, its wake on the
    // engine's clock, whether that is an event wait's deadline, and the
    // digest of the index entry that filed it (a writer of a release
    // before changes the entry without the timer: the timer is then not
    // trusted). And each worker's release (its schema version), so the
    // others tell whether a worker that keeps no timers is alive. Only
    // additive, and no index on a table that may be large: compatible
    // from version 10.
    "CREATE TABLE {s}.timers (
         id text PRIMARY KEY,
         wake bigint NOT NULL,
         deadline boolean NOT NULL,
         filed_by bytea NOT NULL
     );
     CREATE INDEX timers_wake ON {s}.timers (wake, id COLLATE \"C\");
     ALTER TABLE {s}.workers ADD COLUMN release integer;",
];

/// The newest schema version this release knows.
pub(super) const VERSION: i32 = MIGRATIONS.len() as i32;

/// For the versions since the compatibility rule began (see the module
/// docs), the oldest release schema version that may still read and
/// write the schema at that version: `(version, compatible_from)`. A
/// version missing here (every one before the rule) is compatible from
/// itself only.
const COMPATIBLE_FROM: &[(i32, i32)] = &[(11, 10)];

/// The `compatible_from` that migration `version` declares.
fn compatible_from(version: i32) -> i32 {
    COMPATIBLE_FROM
        .iter()
        .find(|(v, _)| *v == version)
        .map_or(version, |(_, from)| *from)
}

/// Checks that `schema` is a plain SQL identifier, so it can be spliced
/// into statements unquoted, and not one of PostgreSQL's own schemas (or
/// `public`, which everything in a database shares).
pub(super) fn validate(schema: &str) -> Result<()> {
    if schema == "public" || schema == "information_schema" || schema.starts_with("pg_") {
        return Err(Error::InvalidArgument(format!(
            "PostgreSQL schema {schema:?} is {}: give saga a schema of its own, e.g. \"saga\"",
            if schema == "public" {
                "the schema everything in the database shares"
            } else {
                "one of PostgreSQL's system schemas"
            }
        )));
    }
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
/// migrated by a newer release is opened as it is if its migrations
/// declare this release compatible, and refused otherwise (module docs).
pub(super) async fn migrate(client: &mut Client, schema: &str) -> Result<(), PgFailure> {
    let tx = client.transaction().await?;
    // Namespaced by schema: advisory locks are database-wide.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('saga-migrate:' || $1::text))",
        &[&schema],
    )
    .await?;
    refuse_foreign_owners(&tx, schema).await?;
    refuse_foreign_triggers(&tx, schema).await?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.migrations (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         );
         DO $$ BEGIN
             -- Looked up first: an ALTER locks the table even when it adds nothing.
             IF NOT EXISTS (SELECT 1 FROM pg_attribute
                            WHERE attrelid = '{schema}.migrations'::regclass
                              AND attname = 'compatible_from' AND NOT attisdropped) THEN
                 ALTER TABLE {schema}.migrations ADD COLUMN compatible_from integer;
             END IF;
         END $$;"
    ))
    .await?;
    let have = version(&tx, schema).await?;
    for (i, migration) in MIGRATIONS.iter().enumerate().skip(have as usize) {
        let version = i as i32 + 1;
        tx.batch_execute(&migration.replace("{s}", schema)).await?;
        tx.execute(
            &format!("INSERT INTO {schema}.migrations (version, compatible_from) VALUES ($1, $2)"),
            &[&version, &compatible_from(version)],
        )
        .await?;
    }
    Ok(tx.commit().await?)
}

/// What a reader checks instead of migrating: the schema is there, at
/// this release's version, with no trigger saga did not make. It changes
/// nothing.
pub(super) async fn check(client: &Client, schema: &str) -> Result<(), PgFailure> {
    let exists = client
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
        .await?;
    if exists.is_none() {
        return Err(PgFailure::Other(Error::SchemaMissing {
            schema: schema.to_owned(),
        }));
    }
    refuse_foreign_triggers(client, schema).await?;
    let have = version(client, schema).await?;
    if have < VERSION {
        return Err(PgFailure::Other(Error::SchemaOutdated {
            schema: schema.to_owned(),
            version: have,
            expected: VERSION,
        }));
    }
    Ok(())
}

/// The schema's migration version (0 without a `migrations` table); a
/// version newer than this release knows is refused unless every version
/// past it declares this release compatible (module docs).
async fn version(client: &impl GenericClient, schema: &str) -> Result<i32, PgFailure> {
    let row = client
        .query_one(
            "SELECT to_regclass(format('%I.migrations', $1::text)) IS NOT NULL",
            &[&schema],
        )
        .await?;
    if !row.get::<_, bool>(0) {
        return Ok(0);
    }
    // `compatible_from` through jsonb: a reader finds a table that a
    // release before the rule made, without the column.
    let row = client
        .query_one(
            &format!(
                "SELECT coalesce(max(version), 0),
                        max(coalesce((to_jsonb(m) ->> 'compatible_from')::integer, version))
                            FILTER (WHERE version > $1)
                 FROM {schema}.migrations m"
            ),
            &[&VERSION],
        )
        .await?;
    let have: i32 = row.get(0);
    let needs: Option<i32> = row.get(1);
    if let Some(compatible_from) = needs
        && compatible_from > VERSION
    {
        return Err(PgFailure::Other(Error::SchemaNewer {
            schema: schema.to_owned(),
            version: have,
            compatible_from,
            release: VERSION,
        }));
    }
    Ok(have)
}

/// Refuses a schema, or anything in it, that belongs to a role this
/// connection's role is not a member of.
async fn refuse_foreign_owners(client: &impl GenericClient, schema: &str) -> Result<(), PgFailure> {
    let foreign = client
        .query_opt(
            "SELECT 'schema ' || quote_ident(n.nspname), n.nspowner::regrole::text
             FROM pg_namespace n
             WHERE n.nspname = $1 AND NOT pg_has_role(n.nspowner, 'MEMBER')
             UNION ALL
             (SELECT 'table ' || quote_ident(n.nspname) || '.' || quote_ident(c.relname),
                     c.relowner::regrole::text
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = $1 AND NOT pg_has_role(c.relowner, 'MEMBER')
              ORDER BY c.relname)
             LIMIT 1",
            &[&schema],
        )
        .await?;
    match foreign {
        Some(row) => Err(PgFailure::Other(Error::SchemaForeignOwner {
            object: row.get(0),
            owner: row.get(1),
        })),
        None => Ok(()),
    }
}

/// Refuses triggers on the schema's tables: saga makes none, so any is
/// someone else's code running inside saga's writes.
async fn refuse_foreign_triggers(
    client: &impl GenericClient,
    schema: &str,
) -> Result<(), PgFailure> {
    let rows = client
        .query(
            "SELECT quote_ident(t.tgname) || ' ON ' || quote_ident(n.nspname) || '.' || quote_ident(c.relname)
             FROM pg_trigger t
             JOIN pg_class c ON c.oid = t.tgrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND NOT t.tgisinternal
             ORDER BY 1",
            &[&schema],
        )
        .await?;
    if rows.is_empty() {
        return Ok(());
    }
    Err(PgFailure::Other(Error::SchemaForeignTriggers {
        schema: schema.to_owned(),
        triggers: rows.iter().map(|row| row.get(0)).collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::validate;

    #[test]
    fn schema_names_are_plain_identifiers() {
        for good in ["saga", "_t1", "saga_test_42"] {
            assert!(validate(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Saga",
            "1x",
            "a-b",
            "a;drop",
            "a b",
            &"x".repeat(64),
            "public",
            "information_schema",
            "pg_catalog",
            "pg_temp_3",
            "pg_saga",
        ] {
            assert!(validate(bad).is_err(), "{bad}");
        }
    }
}
