//! What a failed statement means: for the connection, for the
//! transaction it ran in, and so for the worker.
//!
//! Errors are told apart by what they mean, not by their SQLSTATE class
//! alone. A statement that failed did not take effect (each write is one
//! statement, or one transaction), so trying it again is safe:
//!
//! - the connection broke, the server shut down or does not take
//!   connections yet (`08`, `57P`, no SQLSTATE at all), or lost a prepared
//!   statement (`26000`, `0A000`): connect again;
//! - the statement was cancelled (`57014`: `pg_cancel_backend`, a
//!   `statement_timeout`), lost a serialization race or a deadlock
//!   (`40001`, `40P01`), waited too long for a lock (`55P03`), ran in a
//!   transaction that an earlier error aborted (`25P02`), or met any other
//!   fault of the server's: roll back what the connection has open, and
//!   try again on it, until the call's deadline;
//! - only a definite fault of our own statements, which no retry mends
//!   (`42`: syntax, an undefined table or column, a missing privilege;
//!   `22`: bad data; `21`: a subquery that returned more than one row;
//!   `23`: a broken constraint, a duplicate key; `44`: a view's check
//!   option), ends the call for good, at once rather than at the call's
//!   deadline; so does losing the lease
//!   ([`PgFailure::Fenced`]), and so does a connection that TLS refused (a
//!   certificate that does not verify: see `tls::refusal`).

use std::time::Duration;

use super::db_error;
use crate::error::Error;

/// Why a statement failed, and so what to do next.
pub(super) enum PgFailure {
    /// The connection broke: a new one may do it.
    Connection(String),
    /// The statement, or the transaction it ran in, was undone: rolled
    /// back, the same connection may do it when asked again.
    Retry(String),
    /// This worker does not own the instance any more: its lease ran out
    /// and another worker claimed it.
    Fenced,
    /// A fault no retry mends.
    Other(Error),
}

impl From<tokio_postgres::Error> for PgFailure {
    fn from(error: tokio_postgres::Error) -> PgFailure {
        let meaning = meaning(error.code().map(|code| code.code()));
        let error = db_error(error);
        match meaning {
            Meaning::Connection => PgFailure::Connection(error.to_string()),
            Meaning::Undone => PgFailure::Retry(error.to_string()),
            Meaning::Ours => PgFailure::Other(error),
        }
    }
}

/// What an error means, by its SQLSTATE (none: the driver's own, the
/// connection's).
#[derive(Debug, PartialEq)]
enum Meaning {
    Connection,
    Undone,
    Ours,
}

fn meaning(code: Option<&str>) -> Meaning {
    let Some(code) = code else {
        return Meaning::Connection;
    };
    // A prepared statement the server no longer has, or whose plan a
    // migration changed (`0A000` "cached plan must not change result
    // type"): a new connection prepares it again.
    if code.starts_with("08") || code.starts_with("57P") || code == "26000" || code == "0A000" {
        Meaning::Connection
    } else if ["42", "22", "21", "23", "44"]
        .iter()
        .any(|class| code.starts_with(class))
    {
        Meaning::Ours
    } else {
        Meaning::Undone
    }
}

impl From<Error> for PgFailure {
    fn from(error: Error) -> PgFailure {
        PgFailure::Other(error)
    }
}

/// The pauses between attempts: short at first, at most a second, and
/// none that ends past the deadline.
pub(super) struct Reconnect {
    next: Duration,
    deadline: tokio::time::Instant,
}

impl Reconnect {
    pub(super) fn until(deadline: std::time::Instant) -> Reconnect {
        Reconnect {
            next: Duration::from_millis(20),
            deadline: deadline.into(),
        }
    }

    /// Waits before the next attempt; `false` (at once) when it would end
    /// past the deadline.
    pub(super) async fn wait(&mut self) -> bool {
        if tokio::time::Instant::now() + self.next > self.deadline {
            return false;
        }
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(Duration::from_secs(1));
        true
    }
}

/// Bounds a connection attempt, TCP and startup, by `limit`: a server
/// that takes the connection and never answers (a load balancer in front
/// of a dead database) fails it instead of holding it forever. `failed`
/// says what a refused attempt means.
pub(super) async fn bounded<T>(
    limit: Duration,
    attempt: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    failed: impl FnOnce(tokio_postgres::Error) -> PgFailure,
) -> std::result::Result<T, PgFailure> {
    match tokio::time::timeout(limit, attempt).await {
        Ok(result) => result.map_err(failed),
        Err(_) => Err(PgFailure::Connection(format!(
            "the server did not answer within {limit:?} (the URL's connect_timeout, or the store timeout)"
        ))),
    }
}

impl std::fmt::Display for PgFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PgFailure::Connection(detail) | PgFailure::Retry(detail) => f.write_str(detail),
            PgFailure::Fenced => f.write_str("this worker's lease ran out"),
            PgFailure::Other(e) => e.fmt(f),
        }
    }
}

impl PgFailure {
    /// The error a caller sees when no more attempts are made.
    pub(super) fn into_error(self, shown: &str, fenced: impl FnOnce() -> Error) -> Error {
        match self {
            PgFailure::Connection(detail) => Error::Store(format!(
                "lost the connection to PostgreSQL at {shown} and could not get it back: {detail}"
            )),
            PgFailure::Retry(detail) => Error::Store(format!(
                "PostgreSQL at {shown} kept refusing a statement until the store timeout: {detail}"
            )),
            PgFailure::Fenced => fenced(),
            PgFailure::Other(e) => e,
        }
    }
}

/// Ends whatever transaction a failed statement left open on `client`, so
/// the next statement does not meet `25P02` (with none open, PostgreSQL
/// only warns). `false` when even that failed: drop the connection.
pub(super) async fn roll_back(client: &tokio_postgres::Client) -> bool {
    client.batch_execute("ROLLBACK").await.is_ok()
}

/// The error of a connection that could not be made at connect time.
pub(super) fn unreachable(failure: PgFailure, shown: &str) -> Error {
    match failure {
        PgFailure::Connection(detail) | PgFailure::Retry(detail) => Error::DatabaseUnreachable {
            url: shown.to_owned(),
            detail,
        },
        PgFailure::Fenced => Error::Store("fenced while connecting".into()),
        PgFailure::Other(e) => e,
    }
}

#[cfg(test)]
mod tests {
    use super::{Meaning, meaning};

    #[test]
    fn errors_are_told_apart_by_what_they_mean() {
        for code in [
            None,
            Some("08006"),
            Some("57P01"),
            Some("57P03"),
            Some("0A000"),
        ] {
            assert_eq!(meaning(code), Meaning::Connection, "{code:?}");
        }
        // Cancelled, statement_timeout, serialization, deadlock, a failed
        // transaction, too many connections.
        for code in ["57014", "40001", "40P01", "25P02", "55P03", "53300"] {
            assert_eq!(meaning(Some(code)), Meaning::Undone, "{code}");
        }
        // A duplicate key, a NULL where none may be, a broken check or
        // foreign key, a scalar subquery of many rows: deterministic, so
        // retrying until the deadline would only delay the error.
        for code in [
            "42601", "42P01", "42501", "22P02", "22003", "23505", "23502", "23503", "23514",
            "21000", "44000",
        ] {
            assert_eq!(meaning(Some(code)), Meaning::Ours, "{code}");
        }
    }
}
