//! The read connection's side: reads served concurrently, retried
//! across reconnects, and what each query asks of PostgreSQL.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;

use crate::store::postgres::fault::{PgFailure, Reconnect, roll_back};

use crate::store::postgres::lease;

use crate::error::Result;
use crate::store::TailPosition;

use super::READ_POOL;
use super::connect::*;
use super::jobs::*;

/// Serves unordered reads, each on the next connection of the pool, all
/// at once.
pub(in crate::store::postgres) async fn serve_unordered(
    target: Arc<Target>,
    worker: Arc<str>,
    timeout: Duration,
    mut reads: UnboundedReceiver<Unordered>,
) {
    let pool: Arc<[tokio::sync::Mutex<Option<Arc<Conn>>>; READ_POOL]> = Arc::default();
    let mut next = 0;
    while let Some(Unordered { read, reply }) = reads.recv().await {
        let (target, worker, pool) = (target.clone(), worker.clone(), pool.clone());
        let slot = next % READ_POOL;
        next += 1;
        let deadline = Instant::now() + timeout;
        tokio::spawn(async move {
            let answer = read_with_retry(&target, &pool[slot], &read, &worker, deadline).await;
            let _ = reply.send(answer);
        });
    }
}

pub(in crate::store::postgres) async fn read_with_retry(
    target: &Target,
    reader: &tokio::sync::Mutex<Option<Arc<Conn>>>,
    read: &Read,
    worker: &str,
    deadline: Instant,
) -> Result<ReadAnswer> {
    let mut backoff = Reconnect::until(deadline);
    loop {
        let conn = {
            let mut slot = reader.lock().await;
            match slot.as_ref() {
                Some(conn) if !conn.client.is_closed() => Ok(conn.clone()),
                _ => target.connect().await.map(|conn| {
                    let conn = Arc::new(conn);
                    *slot = Some(conn.clone());
                    conn
                }),
            }
        };
        let failure = match conn {
            Ok(conn) => match query(&conn, read, worker).await {
                Ok(answer) => return Ok(answer),
                Err(e) => {
                    let failure = PgFailure::from(e);
                    if matches!(failure, PgFailure::Retry(_)) && !roll_back(&conn.client).await {
                        reader.lock().await.take();
                    }
                    failure
                }
            },
            Err(failure) => failure,
        };
        if matches!(failure, PgFailure::Other(_)) || !backoff.wait().await {
            return Err(failure.into_error(&target.shown, || lease::fenced(&target.schema)));
        }
        tracing::warn!(error = %failure, "a PostgreSQL read failed; trying it again");
    }
}

pub(in crate::store::postgres) async fn query(
    conn: &Conn,
    read: &Read,
    worker: &str,
) -> std::result::Result<ReadAnswer, tokio_postgres::Error> {
    Ok(match read {
        Read::Journal(id, from, until) => {
            let rows = conn.client.query(&conn.journal, &[id, from, until]).await?;
            ReadAnswer::Journal(
                rows.iter()
                    .map(|row| (row.get::<_, i64>(0) as u64, row.get(1)))
                    .collect(),
            )
        }
        Read::LastSeq(id) => {
            let row = conn.client.query_one(&conn.last_seq, &[id]).await?;
            ReadAnswer::LastSeq(row.get::<_, Option<i64>>(0).map(|s| s as u64))
        }
        Read::Index(id) => {
            let row = conn.client.query_opt(&conn.index, &[id]).await?;
            ReadAnswer::Index(row.map(|row| row.get(0)))
        }
        Read::IndexEntries => {
            let rows = conn.client.query(&conn.entries, &[]).await?;
            ReadAnswer::Entries(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
        }
        Read::ActiveEntries => {
            let rows = conn.client.query(&conn.active_entries, &[&worker]).await?;
            ReadAnswer::Entries(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
        }
        Read::EntriesWhere { status, workflow } => {
            let rows = conn
                .client
                .query(&conn.entries_where, &[status, workflow])
                .await?;
            ReadAnswer::Entries(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
        }
        Read::Post { id, intent, token } => {
            conn.client
                .query_one(&conn.post, &[id, intent, token])
                .await?;
            ReadAnswer::Done
        }
        Read::Settle => {
            settle(conn).await?;
            ReadAnswer::Done
        }
        Read::TailStart => {
            let row = conn.client.query_one(&conn.tail_start, &[]).await?;
            ReadAnswer::Position(TailPosition {
                tx: row.get(0),
                id: String::new(),
                seq: -1,
            })
        }
        Read::Tail { from, limit } => {
            let rows = conn
                .client
                .query(
                    &conn.tail,
                    &[&from.tx.to_string(), &from.id, &from.seq, limit],
                )
                .await?;
            let Some(last) = rows.last() else {
                return Ok(ReadAnswer::Tail(Vec::new(), from.clone()));
            };
            let position = TailPosition {
                tx: last.get(0),
                id: last.get(1),
                seq: last.get(2),
            };
            let records = rows
                .iter()
                .map(|row| (row.get(1), row.get::<_, i64>(2) as u64, row.get(3)))
                .collect();
            settle(conn).await?;
            ReadAnswer::Tail(records, position)
        }
        Read::Posts(limit) => {
            let rows = conn.client.query(&conn.posts, &[limit, &worker]).await?;
            ReadAnswer::Posts(
                rows.iter()
                    .map(|row| (row.get(0), row.get(1), row.get(2)))
                    .collect(),
            )
        }
        Read::AnswerPost(n, answer) => {
            conn.client
                .query_one(&conn.answer_post, &[n, &worker, answer])
                .await?;
            ReadAnswer::Done
        }
        Read::Answer(token) => {
            let row = conn.client.query_opt(&conn.answer, &[token]).await?;
            ReadAnswer::Answer(row.map(|row| row.get(0)))
        }
        Read::ForgetPost(token) => {
            conn.client.execute(&conn.forget_post, &[token]).await?;
            ReadAnswer::Done
        }
        Read::OwnerLive(id) => {
            let row = conn.client.query_opt(&conn.owner_live, &[id]).await?;
            ReadAnswer::OwnerLive(row.map(|row| row.get(0)))
        }
        Read::Page(page) => {
            let rows = conn.client.query(&page.sql, &page.params()).await?;
            let full = rows.len() as i64 == page.limit;
            ReadAnswer::Page(
                rows.iter()
                    .map(crate::store::postgres::page::entry)
                    .collect(),
                full,
            )
        }
        Read::Explain(page) => {
            let sql = format!("EXPLAIN {}", page.sql);
            let rows = conn.client.query(&sql, &page.params()).await?;
            ReadAnswer::Ids(rows.iter().map(|row| row.get(0)).collect())
        }
        Read::Unindexed(limit) => {
            let rows = conn.client.query(&conn.unindexed, &[limit]).await?;
            ReadAnswer::Ids(rows.iter().map(|row| row.get(0)).collect())
        }
        Read::Backfill(id, index) => {
            conn.client
                .execute(
                    &conn.backfill,
                    &[
                        id,
                        &index.facts,
                        &index.ended_at,
                        &index.parent,
                        &index.tags,
                        &index.rollback_failed,
                        &index.failed_compensation,
                        &index.started_at,
                    ],
                )
                .await?;
            ReadAnswer::Done
        }
        Read::OwnerOf(id) => {
            let row = conn.client.query_opt(&conn.owner_of, &[id]).await?;
            ReadAnswer::Owner(row.map(|row| (row.get(0), row.get(1))))
        }
        Read::Schedule(call) => ReadAnswer::Schedule(call.run(&conn.client).await?),
        Read::Timers(read) => ReadAnswer::Timers(read.run(&conn.client, worker).await?),
    })
}

/// Rows read were committed, maybe not yet on disk (writes commit without
/// waiting for it): a transaction committed synchronously after them
/// makes them durable, as a flush does.
pub(in crate::store::postgres) async fn settle(
    conn: &Conn,
) -> std::result::Result<(), tokio_postgres::Error> {
    conn.client
        .simple_query(
            "BEGIN; SET LOCAL synchronous_commit TO on; SELECT pg_current_xact_id(); COMMIT",
        )
        .await
        .map(drop)
}
