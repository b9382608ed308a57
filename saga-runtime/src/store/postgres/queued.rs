//! Taking queued instances on PostgreSQL: any worker with room takes the
//! waiting instances of a queue, whoever started them, in one transaction
//! that checks every limit against the rows that hold slots.
//!
//! Takers of one queue take turns on a transaction-scoped advisory lock
//! named after the schema and the queue, so the count of slots held that
//! one reads stays true until it commits: two workers never exceed a
//! limit. The rows taken are locked `FOR UPDATE SKIP LOCKED` as well. A
//! waiting row names no owner (or one that is gone): a worker that is
//! alive keeps the rows it writes, so the worker that creates a queued
//! instance, one that claimed a waiting instance to act on its posts, and
//! one whose instance waits in its queue again after a wait
//! (`release_while_waiting`) let go of it once written
//! (`Store::disown`); one that dies before leaves a row whose owner is
//! gone. Each taken row gets
//! this worker as owner, is marked taken, and gets its `Dequeued` record,
//! all in the same transaction: the slot is in the row and in the
//! journal at once, and a taker that dies leaves an instance that holds
//! its slot, which another worker claims and runs.
//!
//! A queue with a rate limit keeps its starts in `queue_starts`, each at
//! the engine's time of its take (its `Dequeued` record's time, passed
//! in, so a test's clock rules here too): the take counts those within
//! the window, under the same lock, adds its own, and drops those that
//! left the window.

use tokio_postgres::Client;

use super::fault::{PgFailure, roll_back};
use super::lease;
use crate::codec::NEEDS_SEALED;
use crate::queue::Limits;
use crate::queue::order::{Held, Turns, Waiting};
use crate::queue::rate::{Rate, Window};
use crate::queue::stored::SharedLimits;
use crate::store::QueueTaken;
use crate::time::clock::{from_millis, to_millis};

/// The most waiting rows read per take: the first few of each key and
/// priority (as many as could take slots now).
const CANDIDATES: i64 = 10_000;

/// What a take asks, owned (see `store::QueueTake`).
#[derive(Clone, Debug)]
pub(crate) struct Take {
    pub(crate) queue: String,
    pub(crate) limits: Limits,
    pub(crate) workflows: Vec<String>,
    pub(crate) record: Vec<u8>,
    /// The engine's time of the take, in milliseconds.
    pub(crate) at: u64,
}

impl Take {
    pub(crate) fn of(take: &crate::store::QueueTake<'_>) -> Take {
        Take {
            queue: take.queue.to_owned(),
            limits: Limits {
                concurrency: take.concurrency,
                per_key: take.per_key,
                per_worker: take.per_worker,
                rate: take.rate.and_then(|(n, per)| Rate::new(n, per)),
                // The take does not depend on it.
                release_while_waiting: false,
            },
            workflows: take.workflows.iter().map(|w| (*w).to_owned()).collect(),
            record: take.record.to_vec(),
            at: take.at,
        }
    }
}

/// Takes, in one transaction, the instances of `take.queue` that may
/// run on `worker` now; their ids, and when the rate lets the next start.
pub(super) async fn take(
    client: &Client,
    schema: &str,
    worker: &str,
    take: &Take,
) -> Result<QueueTaken, PgFailure> {
    client.batch_execute("BEGIN").await?;
    match take_in_transaction(client, schema, worker, take).await {
        Ok(taken) => {
            client.batch_execute("COMMIT").await?;
            Ok(taken)
        }
        Err(failure) => {
            roll_back(client).await;
            Err(failure)
        }
    }
}

async fn take_in_transaction(
    client: &Client,
    s: &str,
    worker: &str,
    take: &Take,
) -> Result<QueueTaken, PgFailure> {
    let queue = &take.queue;
    client
        .execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            &[&format!("saga queue {s}.{queue}")],
        )
        .await?;
    let limits = stored_limits(client, s, queue)
        .await?
        .map_or(take.limits, |stored| stored.over(take.limits));
    let take = &Take {
        limits,
        ..take.clone()
    };
    let mut held = slots_held(client, s, worker, queue).await?;
    let room = take
        .limits
        .concurrency
        .saturating_sub(held.total)
        .min(take.limits.per_worker.saturating_sub(held.here));
    if room == 0 {
        return Ok(QueueTaken::default());
    }
    let mut window = match take.limits.rate {
        Some(rate) => Some((rate, latest_starts(client, s, take, rate).await?)),
        None => None,
    };
    let starts = window
        .as_ref()
        .map_or(u32::MAX, |(rate, w)| w.room(*rate, take.at));
    let opens_at = |window: &Option<(Rate, Window)>| {
        window
            .as_ref()
            .and_then(|(rate, w)| w.opens_at(*rate, take.at))
    };
    let room = room.min(starts);
    if room == 0 {
        return Ok(QueueTaken {
            ids: Vec::new(),
            rate_opens_at: opens_at(&window),
        });
    }
    let waiting = waiting(client, s, take, room.min(take.limits.per_key)).await?;
    if waiting.is_empty() {
        return Ok(QueueTaken::default());
    }
    let mut turns = turns(client, s, queue).await?;
    let picked = crate::queue::order::pick(&waiting, take.limits, starts, &mut held, &mut turns);
    let needs = crate::codec::kinds_needed(&take.record).min(0xFFFF) as i32;
    let rows = client
        .query(
            &format!(
                "WITH c AS (SELECT id FROM {s}.instances WHERE id = ANY($1) AND NOT queue_taken
                            FOR UPDATE SKIP LOCKED),
                 u AS (UPDATE {s}.instances i
                       SET owner = $2, owned_since = now(), queue_taken = true,
                           needs = GREATEST(needs & ~{NEEDS_SEALED}, $4::integer) | (needs & {NEEDS_SEALED})
                       FROM c WHERE i.id = c.id RETURNING i.id),
                 j AS (INSERT INTO {s}.journal (id, seq, record)
                       SELECT u.id, (SELECT max(seq) + 1 FROM {s}.journal x WHERE x.id = u.id), $3
                       FROM u)
                 SELECT id FROM u"
            ),
            &[&picked, &worker, &take.record, &needs],
        )
        .await?;
    let taken: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    if let Some((rate, w)) = &mut window
        && !taken.is_empty()
    {
        record_starts(client, s, take, taken.len()).await?;
        for _ in &taken {
            w.started(take.at, *rate);
        }
    }
    // When each key taken was served: a key served now waits behind the
    // others next time.
    let mut served: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    for w in waiting.iter().filter(|w| taken.contains(&w.id)) {
        let turn = i64::try_from(turns.get(&w.key).copied().unwrap_or(0)).unwrap_or(i64::MAX);
        let key = served.entry(w.key.clone().unwrap_or_default()).or_default();
        *key = (*key).max(turn);
    }
    let (keys, served): (Vec<String>, Vec<i64>) = served.into_iter().unzip();
    if !keys.is_empty() {
        client
            .execute(
                &format!(
                    "INSERT INTO {s}.queue_turns (queue, key, turn)
                     SELECT $1, k, t FROM unnest($2::text[], $3::bigint[]) AS r(k, t)
                     ON CONFLICT (queue, key) DO UPDATE
                     SET turn = GREATEST({s}.queue_turns.turn, EXCLUDED.turn)"
                ),
                &[&queue, &keys, &served],
            )
            .await?;
    }
    Ok(QueueTaken {
        ids: taken,
        rate_opens_at: opens_at(&window),
    })
}

/// The limits stored for `queue` (`queue::stored`), which every worker
/// takes by, whatever it declared: a change made while workers run holds
/// from their next take.
async fn stored_limits(
    client: &Client,
    s: &str,
    queue: &str,
) -> Result<Option<SharedLimits>, PgFailure> {
    let row = client
        .query_opt(
            &format!("SELECT limits FROM {s}.queues WHERE name = $1"),
            &[&queue],
        )
        .await?;
    match row {
        Some(row) => {
            let bytes: Vec<u8> = row.get(0);
            Ok(Some(
                SharedLimits::decode(queue, &bytes).map_err(PgFailure::Other)?,
            ))
        }
        None => Ok(None),
    }
}

/// The latest starts of the queue within its rate's window at the take's
/// time (at most as many as the rate allows: only those can fill it);
/// the older ones are dropped.
async fn latest_starts(
    client: &Client,
    s: &str,
    take: &Take,
    rate: Rate,
) -> Result<Window, PgFailure> {
    let window_start = from_millis(take.at.saturating_sub(rate.per_ms));
    client
        .execute(
            &format!("DELETE FROM {s}.queue_starts WHERE queue = $1 AND taken_at <= $2"),
            &[&take.queue, &window_start],
        )
        .await?;
    let rows = client
        .query(
            &format!(
                "SELECT taken_at FROM {s}.queue_starts WHERE queue = $1
                 ORDER BY taken_at DESC LIMIT $2"
            ),
            &[&take.queue, &i64::from(rate.starts)],
        )
        .await?;
    let mut window = Window::default();
    for row in &rows {
        window.started(to_millis(row.get(0)), rate);
    }
    Ok(window)
}

/// Counts `n` starts of the queue at the take's time.
async fn record_starts(client: &Client, s: &str, take: &Take, n: usize) -> Result<(), PgFailure> {
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    client
        .execute(
            &format!(
                "INSERT INTO {s}.queue_starts (queue, taken_at)
                 SELECT $1, $2 FROM generate_series(1, $3::bigint)"
            ),
            &[&take.queue, &from_millis(take.at), &n],
        )
        .await?;
    Ok(())
}

/// The slots of `queue` held now: rows taken and not ended.
async fn slots_held(
    client: &Client,
    s: &str,
    worker: &str,
    queue: &str,
) -> Result<Held, PgFailure> {
    let rows = client
        .query(
            &format!(
                "SELECT queue_key, count(*), count(*) FILTER (WHERE owner = $2)
                 FROM {s}.instances WHERE queue = $1 AND queue_taken AND ended_at IS NULL
                 GROUP BY queue_key"
            ),
            &[&queue, &worker],
        )
        .await?;
    let mut held = Held::default();
    for row in rows {
        let key: Option<String> = row.get(0);
        let total = u32::try_from(row.get::<_, i64>(1)).unwrap_or(u32::MAX);
        let here = u32::try_from(row.get::<_, i64>(2)).unwrap_or(u32::MAX);
        held.total = held.total.saturating_add(total);
        held.here = held.here.saturating_add(here);
        if let Some(key) = key {
            held.by_key.insert(key, total);
        }
    }
    Ok(held)
}

/// The waiting instances of the queue this worker may take: of the
/// workflows it runs, of a release it reads, owned by no live worker (a
/// worker acting on what was posted to one lets go of it after); the
/// first `per_group` of each priority and key.
async fn waiting(
    client: &Client,
    s: &str,
    take: &Take,
    per_group: u32,
) -> Result<Vec<Waiting>, PgFailure> {
    let rows = client
        .query(
            &format!(
                "SELECT id, queue_key, priority, queue_order FROM (
                     SELECT i.id, i.queue_key, i.priority, i.queue_order,
                            row_number() OVER (PARTITION BY i.priority, i.queue_key
                                               ORDER BY i.queue_order) AS n
                     FROM {s}.instances i
                     WHERE i.queue = $1 AND NOT i.queue_taken AND i.status = 'queued'
                       AND i.workflow = ANY($2)
                       AND i.needs & ~{NEEDS_SEALED} <= {}
                       AND {}
                 ) c WHERE n <= $3 ORDER BY priority DESC, queue_order LIMIT {CANDIDATES}",
                crate::codec::RECORD_KINDS,
                lease::orphan(s)
            ),
            &[&take.queue, &take.workflows, &i64::from(per_group)],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| Waiting {
            id: row.get(0),
            key: row.get(1),
            priority: row.get::<_, Option<i32>>(2).unwrap_or(0),
            order: u64::try_from(row.get::<_, Option<i64>>(3).unwrap_or(0)).unwrap_or(0),
        })
        .collect())
}

/// When each key of the queue was last served (no key: `''`).
async fn turns(client: &Client, s: &str, queue: &str) -> Result<Turns, PgFailure> {
    let rows = client
        .query(
            &format!("SELECT key, turn FROM {s}.queue_turns WHERE queue = $1"),
            &[&queue],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| {
            let key: String = row.get(0);
            let turn = u64::try_from(row.get::<_, i64>(1)).unwrap_or(0);
            ((!key.is_empty()).then_some(key), turn)
        })
        .collect())
}
