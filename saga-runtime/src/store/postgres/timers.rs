//! The timer index on PostgreSQL: `timers (id, wake, deadline, filed_by)`
//! (migration 11), one row per instance that only waits for a time
//! (`IndexRow::wake`), in a table of its own so that a status change
//! never rewrites it.
//!
//! - **Filed with the entry.** Every statement that writes an instance's
//!   index entry (`append_indexed`, `put_index`) files its timer in the
//!   same statement, fenced by the same update of the instance's row
//!   ([`filing`]): the row is upserted while the entry files a wake, and
//!   deleted otherwise; a removal deletes it with the instance. A create
//!   files none: an instance's first entry never only waits (the engine
//!   writes it before the instance runs), and an active instance without
//!   a timer is one that may run, so the worst is a replay.
//! - **Trusted only as filed.** `filed_by` is the digest (`sha256`) of the
//!   index entry that filed the timer. A worker of a release before keeps
//!   no timers: when it changes an instance, the entry's digest changes and
//!   the timer left behind is not trusted ([`TRUSTED`]), so that instance
//!   is read and replayed as before. An active instance without a trusted
//!   timer (written before migration 11, or by such a worker) is one that
//!   may run.
//! - **Older workers.** Each worker records its release (its schema
//!   version) in `workers.release`. A worker trusts the timers at all
//!   (`Store::timers_kept`) only when, as it connects, no live worker of a
//!   release before [`KEPT_SINCE`] is registered (its `release` NULL or
//!   older); otherwise it resumes every instance as before.
//! - **Ownership.** A worker reads the timers of the instances it owns:
//!   start-up leaves its sleepers unread (`Kind::ActiveBy`), and the
//!   alarm window refills from its own timers (`Kind::After`). The
//!   instances of a worker that is gone are claimed as before, and a
//!   claimed instance whose trusted timer is not due is not loaded: its
//!   alarm is set (`journal::workers`), so each sleeper has one owner that
//!   wakes it.

use tokio_postgres::Client;

use crate::store::ActiveSet;

/// The first schema version whose workers keep the timers.
pub(super) const KEPT_SINCE: i32 = 11;

/// The condition, on a row `t` of `timers` and the row `i` of its
/// instance, that `t` was filed with `i`'s index entry as it is now.
pub(super) const TRUSTED: &str = "t.filed_by = sha256(i.summary)";

/// The CTEs (each after a comma) that file instance `id`'s timer with its
/// index entry, in the statement whose CTE `u` updates the entry (the
/// fence: a write of an instance this worker does not own files nothing).
/// Parameters: the id, the summary, whether it is active, the wake
/// (`bigint`, NULL for none) and whether it is a deadline.
pub(super) fn filing(
    s: &str,
    id: &str,
    summary: &str,
    active: &str,
    wake: &str,
    deadline: &str,
) -> String {
    format!(
        ",
         t AS (INSERT INTO {s}.timers (id, wake, deadline, filed_by)
               SELECT {id}, {wake}::bigint, {deadline}::boolean, sha256({summary}) FROM u
               WHERE {wake}::bigint IS NOT NULL AND {active}
               ON CONFLICT (id) DO UPDATE SET wake = EXCLUDED.wake, deadline = EXCLUDED.deadline,
                                              filed_by = EXCLUDED.filed_by),
         td AS (DELETE FROM {s}.timers WHERE id = {id}
                AND ({wake}::bigint IS NULL OR NOT {active}) AND EXISTS (SELECT 1 FROM u))"
    )
}

/// The condition that a live worker of a release that keeps no timers is
/// registered in schema `s`.
pub(super) fn older_worker_alive(s: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM {s}.workers w WHERE w.expires_at > now()
                 AND (w.release IS NULL OR w.release < {KEPT_SINCE}))"
    )
}

/// A wake as stored (`bigint`): the engine's milliseconds, at most
/// `i64::MAX`.
pub(super) fn to_db(at: u64) -> i64 {
    i64::try_from(at).unwrap_or(i64::MAX)
}

/// A read of the timers, run on a read connection.
pub(in crate::store::postgres) struct TimerRead {
    schema: String,
    kind: Kind,
}

enum Kind {
    /// Whether a live worker of an older release is registered.
    OlderWorkers,
    /// The active instances this worker owns: entries of those that may
    /// run by `.0`, timers of the others.
    ActiveBy(i64),
    /// The trusted timer of an instance.
    Of(String),
    /// This worker's trusted timers after `(wake, id)`, at most `.1`.
    After(Option<(i64, String)>, i64),
}

/// What a [`TimerRead`] answers.
pub(in crate::store::postgres) enum TimerAnswer {
    OlderWorkers(bool),
    ActiveBy(ActiveSet),
    Of(Option<(u64, bool)>),
    After(Vec<(u64, String, bool)>),
}

impl TimerRead {
    pub(super) fn older_workers(schema: &str) -> TimerRead {
        TimerRead::of(schema, Kind::OlderWorkers)
    }

    pub(super) fn active_by(schema: &str, now: u64) -> TimerRead {
        TimerRead::of(schema, Kind::ActiveBy(to_db(now)))
    }

    pub(super) fn timer_of(schema: &str, id: &str) -> TimerRead {
        TimerRead::of(schema, Kind::Of(id.to_owned()))
    }

    pub(super) fn after(schema: &str, after: Option<(u64, &str)>, limit: usize) -> TimerRead {
        let after = after.map(|(at, id)| (to_db(at), id.to_owned()));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        TimerRead::of(schema, Kind::After(after, limit))
    }

    fn of(schema: &str, kind: Kind) -> TimerRead {
        TimerRead {
            schema: schema.to_owned(),
            kind,
        }
    }

    /// Runs the read for `worker`.
    pub(in crate::store::postgres) async fn run(
        &self,
        client: &Client,
        worker: &str,
    ) -> std::result::Result<TimerAnswer, tokio_postgres::Error> {
        let s = &self.schema;
        Ok(match &self.kind {
            Kind::OlderWorkers => {
                let row = client
                    .query_one(&format!("SELECT {}", older_worker_alive(s)), &[])
                    .await?;
                TimerAnswer::OlderWorkers(row.get(0))
            }
            Kind::ActiveBy(now) => {
                // On the partial index of the active instances; a sleeper's
                // summary is not sent.
                let rows = client
                    .query(
                        &format!(
                            "SELECT i.id, a.asleep, t.wake, t.deadline,
                                    CASE WHEN a.asleep THEN NULL ELSE i.summary END
                             FROM {s}.instances i LEFT JOIN {s}.timers t ON t.id = i.id,
                                  LATERAL (SELECT coalesce(t.wake > $2 AND {TRUSTED}, false)
                                           AS asleep) a
                             WHERE i.active AND i.owner = $1
                             ORDER BY i.id COLLATE \"C\""
                        ),
                        &[&worker, now],
                    )
                    .await?;
                let mut set = ActiveSet::default();
                for row in rows {
                    let id: String = row.get(0);
                    if row.get::<_, bool>(1) {
                        let wake: i64 = row.get(2);
                        set.asleep.push((id, wake as u64, row.get(3)));
                    } else {
                        set.may_run.push((id, row.get(4)));
                    }
                }
                TimerAnswer::ActiveBy(set)
            }
            Kind::Of(id) => {
                let row = client
                    .query_opt(
                        &format!(
                            "SELECT t.wake, t.deadline FROM {s}.timers t
                             JOIN {s}.instances i ON i.id = t.id
                             WHERE t.id = $1 AND i.active AND {TRUSTED}"
                        ),
                        &[id],
                    )
                    .await?;
                TimerAnswer::Of(row.map(|row| (row.get::<_, i64>(0) as u64, row.get(1))))
            }
            Kind::After(after, limit) => {
                // From the first: before every wake (none is negative).
                let (at, id) = after.clone().unwrap_or((-1, String::new()));
                let rows = client
                    .query(
                        &format!(
                            "SELECT t.wake, t.id, t.deadline FROM {s}.timers t
                             JOIN {s}.instances i ON i.id = t.id
                             WHERE (t.wake, t.id COLLATE \"C\") > ($2, $3::text COLLATE \"C\")
                               AND i.owner = $1 AND i.active AND {TRUSTED}
                             ORDER BY t.wake, t.id COLLATE \"C\" LIMIT $4"
                        ),
                        &[&worker, &at, &id, limit],
                    )
                    .await?;
                TimerAnswer::After(
                    rows.iter()
                        .map(|row| (row.get::<_, i64>(0) as u64, row.get(1), row.get(2)))
                        .collect(),
                )
            }
        })
    }
}
