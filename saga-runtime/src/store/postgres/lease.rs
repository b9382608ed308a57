//! Workers and their leases: which worker is alive, on the database's
//! clock.
//!
//! Every worker connected to a schema has a row in `workers`: its name and
//! when its lease expires. It renews the lease with every flush and with a
//! heartbeat (and its keeper does while a job holds the heartbeat up, see
//! `server::keeper`), and only while it has not expired: a worker whose lease ran
//! out (it was stopped, or cut off, past the lease time) never gets it
//! back. So an instance whose owner has no live lease is free for any
//! worker to claim, and the owner it had writes nothing more to it: every
//! write checks the owner in the same statement (see `server`). A missing
//! row counts as expired, so the rows of dead workers are simply deleted
//! once they own nothing that must run ([`sweep_sql`]).

use std::time::Duration;

use tokio_postgres::Client;

use super::fault::PgFailure;
use crate::error::{Error, Result};

/// The most rows of dead workers one sweep deletes.
const SWEEP_LIMIT: u32 = 100;

/// Adds `worker` with a fresh lease and its release (the schema version
/// it knows: see `timers`), and sweeps the rows of dead workers.
pub(super) async fn join(
    client: &Client,
    schema: &str,
    worker: &str,
    lease: Duration,
) -> Result<(), PgFailure> {
    client.batch_execute(&sweep_sql(schema)).await?;
    let added = client
        .execute(
            &format!(
                "INSERT INTO {schema}.workers (name, expires_at, release)
                 VALUES ($1, now() + $2::bigint * interval '1 millisecond', $3)
                 ON CONFLICT (name) DO NOTHING"
            ),
            &[&worker, &millis(lease), &super::schema::VERSION],
        )
        .await?;
    if added == 1 {
        Ok(())
    } else {
        Err(PgFailure::Other(Error::Store(format!(
            "another worker is named {worker:?} already; connect again"
        ))))
    }
}

/// The SQL of a flush: renews the lease, while it has not expired, in a
/// transaction committed synchronously (its commit makes every earlier
/// asynchronous commit durable). Its third command's row count is 1 while
/// this worker is alive.
pub(super) fn renew_sql(schema: &str, worker: &str, lease: Duration) -> String {
    format!(
        "BEGIN; SET LOCAL synchronous_commit TO on; \
         UPDATE {schema}.workers SET expires_at = now() + {} * interval '1 millisecond' \
         WHERE name = '{worker}' AND expires_at > now(); \
         COMMIT",
        millis(lease)
    )
}

/// The SQL of the lease's keeper (see `server::keeper`): renews the lease
/// of the worker named `$1`, while it has not expired. Its row count is 1
/// while that worker is alive.
pub(super) fn keep_sql(schema: &str, lease: Duration) -> String {
    format!(
        "UPDATE {schema}.workers SET expires_at = now() + {} * interval '1 millisecond' \
         WHERE name = $1 AND expires_at > now()",
        millis(lease)
    )
}

/// The SQL with which a worker leaves: its lease expires now, so other
/// workers claim its unfinished instances at once.
pub(super) fn leave_sql(schema: &str, worker: &str) -> String {
    format!(
        "UPDATE {schema}.workers SET expires_at = now() - interval '1 millisecond' WHERE name = '{worker}'"
    )
}

/// The SQL of housekeeping, which any live worker runs now and then:
/// deletes the rows of workers whose lease expired and that own no
/// instance that must run (its active instances were claimed, or it had
/// none), at most [`SWEEP_LIMIT`] at a time. A finished or paused
/// instance keeps the name of its last owner, which needs no row: a
/// missing row counts as expired. Rows another worker is sweeping are
/// skipped. `instances_active` answers the ownership test.
pub(super) fn sweep_sql(schema: &str) -> String {
    format!(
        "DELETE FROM {schema}.workers WHERE name IN \
         (SELECT w.name FROM {schema}.workers w WHERE w.expires_at < now() \
          AND NOT EXISTS (SELECT 1 FROM {schema}.instances i WHERE i.owner = w.name AND i.active) \
          LIMIT {SWEEP_LIMIT} FOR UPDATE SKIP LOCKED)"
    )
}

/// The condition, on a row `i` of `instances`, that its owner is gone.
pub(super) fn orphan(schema: &str) -> String {
    format!(
        "(i.owner IS NULL OR NOT EXISTS (SELECT 1 FROM {schema}.workers w \
          WHERE w.name = i.owner AND w.expires_at > now()))"
    )
}

/// The error of a worker whose lease ran out (another worker may have
/// claimed its instances).
pub(super) fn fenced(schema: &str) -> Error {
    crate::metrics::fenced();
    Error::Fenced {
        detail: format!(
            "its lease in schema {schema:?} ran out while it did not renew it, and other workers may have taken over its instances"
        ),
    }
}

pub(super) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
