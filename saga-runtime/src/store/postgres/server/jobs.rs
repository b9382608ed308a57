//! What the rest of the store hands the PostgreSQL thread: writes (`Op`),
//! reads (`Read`) and their answers, and the jobs that carry them.

use std::sync::mpsc::SyncSender;
use std::time::SystemTime;

use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::store::{TailPosition, TailRecords};
use crate::time::clock::from_millis;

/// A write, kept until a flush made it durable (to apply again on a new
/// connection).
#[derive(Clone)]
pub(in crate::store::postgres) enum Op {
    Create {
        id: String,
        index: Row,
        record: Vec<u8>,
    },
    Append {
        id: String,
        seq: i64,
        record: Vec<u8>,
    },
    AppendIndexed {
        id: String,
        seq: i64,
        record: Vec<u8>,
        index: Row,
    },
    PutIndex {
        id: String,
        index: Row,
    },
    Remove {
        id: String,
    },
    /// Removes the journal rows of an instance before `seq` (its old runs).
    RemoveBefore {
        id: String,
        seq: i64,
    },
    /// Lets go of an instance that waits in its queue (claimed for its
    /// posts only): it is the worker's that takes it.
    Disown {
        id: String,
    },
}

/// An index entry, owned (see `IndexRow`).
#[derive(Clone)]
pub(in crate::store::postgres) struct Row {
    pub(in crate::store::postgres) summary: Vec<u8>,
    pub(in crate::store::postgres) workflow: String,
    pub(in crate::store::postgres) status: String,
    pub(in crate::store::postgres) active: bool,
    /// The columns of `facts` (all NULL for an entry without).
    pub(in crate::store::postgres) facts: Option<Vec<u8>>,
    pub(in crate::store::postgres) started_at: Option<SystemTime>,
    pub(in crate::store::postgres) ended_at: Option<SystemTime>,
    pub(in crate::store::postgres) parent: Option<String>,
    /// A JSON object, key to value.
    pub(in crate::store::postgres) tags: Option<String>,
    pub(in crate::store::postgres) rollback_failed: Option<bool>,
    pub(in crate::store::postgres) failed_compensation: Option<bool>,
    /// The queue columns (migration 7): all NULL off a queue.
    pub(in crate::store::postgres) queue: Option<String>,
    pub(in crate::store::postgres) queue_key: Option<String>,
    pub(in crate::store::postgres) priority: Option<i32>,
    pub(in crate::store::postgres) queue_taken: Option<bool>,
    /// Its timer, if it only waits (`IndexRow::wake`; see `timers`).
    pub(in crate::store::postgres) wake: Option<i64>,
    pub(in crate::store::postgres) deadline: bool,
}

impl Row {
    pub(in crate::store::postgres) fn of(index: &crate::store::IndexRow<'_>) -> Row {
        let facts = index.facts.as_ref();
        let queue = facts.and_then(|f| f.queue);
        Row {
            summary: index.summary.to_vec(),
            workflow: index.workflow.to_owned(),
            status: index.status.to_owned(),
            active: index.active,
            facts: facts.map(|f| f.encoded.to_vec()),
            started_at: facts.map(|f| from_millis(f.created_at)),
            ended_at: facts.and_then(|f| f.finished_at.map(from_millis)),
            parent: facts.and_then(|f| f.parent.map(str::to_owned)),
            // NULL without tags: such rows stay out of the GIN index.
            tags: facts
                .filter(|f| !f.tags.is_empty())
                .map(|f| crate::store::postgres::page::tags_json(f.tags)),
            rollback_failed: facts.map(|f| f.rollback_failed),
            failed_compensation: facts.map(|f| f.failed_compensation),
            queue: queue.map(|q| q.queue.to_owned()),
            queue_key: queue.and_then(|q| q.key.map(str::to_owned)),
            priority: queue.map(|q| q.priority),
            queue_taken: queue.map(|q| q.taken),
            wake: index
                .wake
                .map(|(at, _)| crate::store::postgres::timers::to_db(at)),
            deadline: index.wake.is_some_and(|(_, deadline)| deadline),
        }
    }
}

/// What runs on the read connection, beside the writes: reads, and the
/// inbox (posting needs no lease; taking is fenced by the owner).
pub(in crate::store::postgres) enum Read {
    /// The journal rows of an instance with `seq` in `.1...2`.
    Journal(String, i64, i64),
    LastSeq(String),
    Index(String),
    IndexEntries,
    /// The entries of the active instances this worker owns.
    ActiveEntries,
    /// Entries with this status and workflow (a row from before migration
    /// 3 has neither, and is answered too).
    EntriesWhere {
        status: Option<String>,
        workflow: Option<String>,
    },
    /// A post, stored once however often it is sent (its `token`).
    Post {
        id: String,
        intent: Vec<u8>,
        token: String,
    },
    /// Makes every commit read so far durable.
    Settle,
    /// Where a tail of every journal begins now.
    TailStart,
    /// Records after a position, durable.
    Tail {
        from: TailPosition,
        limit: i64,
    },
    /// Posts for the instances this worker owns.
    Posts(i64),
    /// Answers a post, while this worker owns its instance.
    AnswerPost(i64, Vec<u8>),
    /// The answer to the post with this token.
    Answer(String),
    /// Removes the post with this token.
    ForgetPost(String),
    /// Whether the owner of this instance holds a live lease.
    OwnerLive(String),
    /// A page of the index (see `page`).
    Page(crate::store::postgres::page::PageSql),
    /// The plan of a page's query.
    Explain(crate::store::postgres::page::PageSql),
    /// Ids whose entry has no facts yet.
    Unindexed(i64),
    /// Fills the facts of an entry that has none.
    Backfill(String, Row),
    /// The owner of an instance, and since when.
    OwnerOf(String),
    /// A read or a swap of schedule states (see `schedules`).
    Schedule(crate::store::postgres::schedules::ScheduleCall),
    /// A read of the timers (see `timers`).
    Timers(crate::store::postgres::timers::TimerRead),
}

pub(in crate::store::postgres) enum ReadAnswer {
    Journal(Vec<(u64, Vec<u8>)>),
    LastSeq(Option<u64>),
    Index(Option<Vec<u8>>),
    Entries(Vec<(String, Vec<u8>)>),
    Posts(Vec<(i64, String, Vec<u8>)>),
    Position(TailPosition),
    Tail(TailRecords, TailPosition),
    Answer(Option<Option<Vec<u8>>>),
    OwnerLive(Option<bool>),
    /// A page's rows, and whether it was full.
    Page(Vec<crate::store::IndexEntry>, bool),
    Ids(Vec<String>),
    Owner(Option<(String, SystemTime)>),
    Schedule(crate::store::postgres::schedules::ScheduleAnswer),
    Timers(crate::store::postgres::timers::TimerAnswer),
    Done,
}

impl ReadAnswer {
    pub(in crate::store::postgres) fn unexpected(&self) -> Error {
        Error::Store("the PostgreSQL thread answered another question".into())
    }
}

pub(in crate::store::postgres) enum Job {
    /// A write; with no `reply`, the caller did not wait for it, and a
    /// failure is told by the next flush.
    Write {
        op: Op,
        reply: Option<oneshot::Sender<Result<bool>>>,
    },
    /// A read served after every write queued before it, so it sees them.
    Read {
        read: Read,
        reply: oneshot::Sender<Result<ReadAnswer>>,
    },
    Flush {
        reply: SyncSender<Result<()>>,
    },
    /// Takes ownership of unowned instances of these workflows; flushed
    /// before it answers, so a database restart cannot take a claim back
    /// from under the instances' new driver.
    Claim {
        workflows: Vec<String>,
        limit: i64,
        reply: oneshot::Sender<Result<Vec<String>>>,
    },
    /// Takes queued instances of a queue, within its limits (see
    /// `queued`); flushed before it answers, as a claim is.
    TakeQueued {
        take: crate::store::postgres::queued::Take,
        reply: oneshot::Sender<Result<crate::store::QueueTaken>>,
    },
    /// Flush, end the lease (other workers claim what is left), and stop.
    Release {
        reply: SyncSender<Result<()>>,
    },
}

/// A read that needs no write queued before it (another worker's
/// instance, `list()`, the inbox, a tail): served at once by a small pool
/// of connections of its own, so it never waits behind this worker's
/// writes, nor behind another read that waits for a lock.
pub(in crate::store::postgres) struct Unordered {
    pub(in crate::store::postgres) read: Read,
    pub(in crate::store::postgres) reply: oneshot::Sender<Result<ReadAnswer>>,
}
