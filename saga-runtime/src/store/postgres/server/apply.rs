//! Applying writes on a connection: one (`apply`) or many instances'
//! records in one statement (`apply_many`), each fenced by ownership.

use std::collections::HashSet;
use std::sync::Arc;

use crate::store::postgres::fault::PgFailure;

use crate::codec::SEALED_FORMAT_VERSION;
use crate::error::Error;

use super::connect::*;
use super::jobs::*;

/// One write, with its fencing check: `true` for a create that created,
/// a remove that removed.
pub(in crate::store::postgres) async fn apply(
    conn: Arc<Conn>,
    worker: Arc<str>,
    op: Op,
) -> std::result::Result<bool, PgFailure> {
    let worker: &str = &worker;
    let c = &conn.client;
    match op {
        Op::Create { id, index, record } => {
            // A first record of a kind the release before does not know
            // (a start on a queue) keeps its workers off the instance.
            let needs = crate::codec::kinds_needed(&record).min(0xFFFF) as i32;
            let row = c
                .query_one(
                    &conn.create,
                    &[
                        &id,
                        &index.summary,
                        &record,
                        &index.workflow,
                        &index.status,
                        &index.active,
                        &worker,
                        &index.facts,
                        &index.ended_at,
                        &index.parent,
                        &index.tags,
                        &index.rollback_failed,
                        &index.failed_compensation,
                        &index.queue,
                        &index.queue_key,
                        &index.priority,
                        &index.queue_taken,
                        &needs,
                    ],
                )
                .await?;
            Ok(row.get::<_, i64>(0) == 1 && row.get::<_, i64>(1) == 1)
        }
        Op::Append { id, seq, record } => {
            let row = c
                .query_one(
                    if sealed(&record) {
                        &conn.append_sealed
                    } else {
                        &conn.append
                    },
                    &[&id, &seq, &record, &worker],
                )
                .await?;
            appended(&row, &id, seq)
        }
        Op::AppendIndexed {
            id,
            seq,
            record,
            index,
        } => {
            // The record kinds its instance needs from now on (a record of
            // a kind the release before does not know keeps its workers
            // from claiming it). A new kind of record always changes the
            // index, so it comes this way.
            let needs = crate::codec::kinds_needed(&record).min(0xFFFF) as i32;
            let row = c
                .query_one(
                    &conn.append_indexed,
                    &[
                        &id,
                        &seq,
                        &record,
                        &worker,
                        &index.summary,
                        &index.workflow,
                        &index.status,
                        &index.active,
                        &index.facts,
                        &index.ended_at,
                        &index.parent,
                        &index.tags,
                        &index.rollback_failed,
                        &index.failed_compensation,
                        &needs,
                        &index.queue,
                        &index.queue_key,
                        &index.priority,
                        &index.queue_taken,
                        &index.wake,
                        &index.deadline,
                    ],
                )
                .await?;
            appended(&row, &id, seq)
        }
        Op::PutIndex { id, index } => {
            c.execute(
                &conn.put_index,
                &[
                    &id,
                    &index.summary,
                    &index.workflow,
                    &index.status,
                    &index.active,
                    &worker,
                    &index.facts,
                    &index.ended_at,
                    &index.parent,
                    &index.tags,
                    &index.rollback_failed,
                    &index.failed_compensation,
                    &index.queue,
                    &index.queue_key,
                    &index.priority,
                    &index.queue_taken,
                    &index.wake,
                    &index.deadline,
                ],
            )
            .await?;
            Ok(true)
        }
        Op::Remove { id } => {
            let row = c.query_one(&conn.remove, &[&id, &worker]).await?;
            Ok(row.get::<_, i64>(0) == 1)
        }
        Op::RemoveBefore { id, seq } => {
            c.execute(&conn.remove_before, &[&id, &seq, &worker])
                .await?;
            Ok(true)
        }
        Op::Disown { id } => {
            c.execute(&conn.disown, &[&id, &worker]).await?;
            Ok(true)
        }
    }
}

/// The answer of an append: (owned, inserted, same bytes there).
fn appended(row: &tokio_postgres::Row, id: &str, seq: i64) -> std::result::Result<bool, PgFailure> {
    if row.get::<_, i64>(0) == 0 {
        return Err(PgFailure::Fenced);
    }
    let inserted: i64 = row.get(1);
    let same: Option<bool> = row.get(2);
    if inserted == 1 || same == Some(true) {
        Ok(true)
    } else {
        Err(PgFailure::Other(Error::Corrupt {
            what: format!("journal record {seq} of instance {id:?}"),
            detail: "the database holds another record under this sequence number".into(),
        }))
    }
}

/// Whether `record` is of the sealed format, which marks its instance's
/// `needs` (see `codec::NEEDS_SEALED`).
fn sealed(record: &[u8]) -> bool {
    record.first() == Some(&SEALED_FORMAT_VERSION)
}

/// Appends, in one statement with one fencing check.
pub(in crate::store::postgres) async fn apply_many(
    conn: Arc<Conn>,
    worker: Arc<str>,
    ops: Vec<Op>,
) -> std::result::Result<(), PgFailure> {
    let mut ids = Vec::with_capacity(ops.len());
    let mut seqs = Vec::with_capacity(ops.len());
    let mut records = Vec::with_capacity(ops.len());
    for op in ops {
        if let Op::Append { id, seq, record } = op {
            ids.push(id);
            seqs.push(seq);
            records.push(record);
        }
    }
    let row = conn
        .client
        .query_one(
            if records.iter().any(|r| sealed(r)) {
                &conn.append_many_sealed
            } else {
                &conn.append_many
            },
            &[&ids, &seqs, &records, &&*worker],
        )
        .await?;
    let owned: i64 = row.get(0);
    let instances = ids.iter().collect::<HashSet<_>>().len();
    if owned != instances as i64 {
        return Err(PgFailure::Fenced);
    }
    let inserted: i64 = row.get(1);
    if inserted == ids.len() as i64 {
        return Ok(());
    }
    let same: i64 = conn
        .client
        .query_one(&conn.same_rows, &[&ids, &seqs, &records])
        .await?
        .get(0);
    if same == ids.len() as i64 {
        Ok(())
    } else {
        Err(PgFailure::Other(Error::Corrupt {
            what: format!("journal records of instances {ids:?}"),
            detail: "the database holds other records under their sequence numbers".into(),
        }))
    }
}
