//! The lease: which worker drives a schema's instances.
//!
//! One row per schema: the owner, an epoch that grows by one at every
//! takeover, and when the lease expires on the database's clock (worker
//! clocks never decide). A worker takes the lease only once it expired,
//! keeps it by renewing it, and every write it makes checks the epoch in
//! the same statement: a worker whose lease was taken over writes nothing.

use std::time::Duration;

use tokio_postgres::Client;

use super::{db_error, is_connection_error};
use crate::error::{Error, Result};

/// Takes the lease for `owner` if it is free or expired; the new epoch,
/// or `None` when another worker holds it.
async fn try_take(
    client: &Client,
    schema: &str,
    owner: &str,
    lease: Duration,
) -> std::result::Result<Option<i64>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!(
                "INSERT INTO {schema}.lease AS l (singleton, owner, epoch, expires_at)
                 VALUES (true, $1, 1, now() + $2::bigint * interval '1 millisecond')
                 ON CONFLICT (singleton) DO UPDATE
                     SET owner = EXCLUDED.owner, epoch = l.epoch + 1, expires_at = EXCLUDED.expires_at
                     WHERE l.expires_at < now()
                 RETURNING epoch"
            ),
            &[&owner, &millis(lease)],
        )
        .await?;
    Ok(row.map(|row| row.get(0)))
}

/// Who holds the lease, and in how many milliseconds it expires.
pub(super) async fn holder(client: &Client, schema: &str) -> Result<Option<(String, i64)>> {
    let row = client
        .query_opt(
            &format!(
                "SELECT owner, (extract(epoch FROM expires_at - now()) * 1000)::bigint
                 FROM {schema}.lease"
            ),
            &[],
        )
        .await
        .map_err(db_error)?;
    Ok(row.map(|row| (row.get(0), row.get(1))))
}

/// Waits until `owner` holds the lease: at once when it is free, else
/// when the holder's lease expires (it stopped renewing) or is handed
/// back. Returns the epoch; stops when `gave_up` says nobody waits.
pub(super) async fn take(
    client: &Client,
    schema: &str,
    owner: &str,
    lease: Duration,
    gave_up: impl Fn() -> bool,
) -> Result<i64> {
    let mut said = false;
    loop {
        // The caller of `connect` stopped waiting (its future was dropped):
        // a standby that nobody waits for takes nothing.
        if gave_up() {
            return Err(Error::Closed);
        }
        match try_take(client, schema, owner, lease).await {
            Ok(Some(epoch)) => {
                if said {
                    tracing::info!(schema, epoch, "took over the lease; resuming its instances");
                }
                return Ok(epoch);
            }
            Ok(None) => {}
            Err(e) if is_connection_error(&e) => return Err(db_error(e)),
            // Two standbys racing for an expired lease: one wins, the other
            // sees a conflict or the new holder and waits again.
            Err(e) => tracing::debug!(error = %e, "lease take-over raced another worker"),
        }
        let wait = match holder(client, schema).await? {
            Some((holder, left)) => {
                if !said {
                    tracing::info!(
                        schema,
                        holder = %holder,
                        "another worker drives this schema; waiting as a standby until its lease expires"
                    );
                    said = true;
                }
                // Looked at again within 100 ms: a lease handed back is
                // taken that soon.
                Duration::from_millis(left.clamp(10, 100) as u64)
            }
            None => Duration::from_millis(10),
        };
        tokio::time::sleep(wait.min(lease / 4)).await;
    }
}

/// The SQL of a flush: renews the lease, checking the epoch, in a
/// transaction committed synchronously (its commit makes every earlier
/// asynchronous commit durable). Its third command's row count is 1 while
/// the lease is this worker's.
pub(super) fn renew_sql(schema: &str, epoch: i64, lease: Duration) -> String {
    format!(
        "BEGIN; SET LOCAL synchronous_commit TO on; \
         UPDATE {schema}.lease SET expires_at = now() + {} * interval '1 millisecond' WHERE epoch = {epoch}; \
         COMMIT",
        millis(lease)
    )
}

/// The SQL that hands the lease back: it expires now.
pub(super) fn release_sql(schema: &str, epoch: i64) -> String {
    format!(
        "UPDATE {schema}.lease SET expires_at = now() - interval '1 millisecond' WHERE epoch = {epoch}"
    )
}

/// The error of a worker whose lease another worker took over.
pub(super) fn fenced(schema: &str) -> Error {
    Error::Fenced {
        detail: format!(
            "another worker took over the lease of schema {schema:?} while this one did not renew it"
        ),
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
