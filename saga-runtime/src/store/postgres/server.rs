//! The thread that talks to PostgreSQL: its own Tokio runtime, write
//! connections that apply each instance's writes one at a time in call
//! order (see `writers`), and a read connection whose queries run
//! concurrently.
//!
//! Every write to an instance checks, in the same statement, that this
//! worker owns it (the instance row, share-locked, names it): a claim by
//! another worker waits for the write, or the write sees the new owner and
//! does nothing. Such a worker's lease ran out, so it is fenced whole.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;
use tokio_postgres::{Client, Config, SimpleQueryMessage, Statement};

use super::fault::{self, Backoff, Failure, bounded, roll_back};
use super::ssl_options::{self, SslMode};
use super::writers::{self, Writer};

mod flushing;
mod keeper;
use super::{PgOptions, lease, schema, tls};

/// The most jobs taken from the queue at once.
const MAX_BATCH: usize = 1024;
use super::page::{fact_sets, fact_values, queue_sets};
use crate::codec::{NEEDS_SEALED, SEALED_FORMAT_VERSION};
use crate::error::{Error, Result};
use crate::lock::lock;
use crate::store::{TailPosition, TailRecords};
use crate::time::clock::from_millis;

/// A write, kept until a flush made it durable (to apply again on a new
/// connection).
#[derive(Clone)]
pub(super) enum Op {
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
pub(super) struct Row {
    pub(super) summary: Vec<u8>,
    pub(super) workflow: String,
    pub(super) status: String,
    pub(super) active: bool,
    /// The columns of `facts` (all NULL for an entry without).
    pub(super) facts: Option<Vec<u8>>,
    pub(super) started_at: Option<SystemTime>,
    pub(super) ended_at: Option<SystemTime>,
    pub(super) parent: Option<String>,
    /// A JSON object, key to value.
    pub(super) tags: Option<String>,
    pub(super) rollback_failed: Option<bool>,
    pub(super) failed_compensation: Option<bool>,
    /// The queue columns (migration 7): all NULL off a queue.
    pub(super) queue: Option<String>,
    pub(super) queue_key: Option<String>,
    pub(super) priority: Option<i32>,
    pub(super) queue_taken: Option<bool>,
}

impl Row {
    pub(super) fn of(index: &crate::store::IndexRow<'_>) -> Row {
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
                .map(|f| super::page::tags_json(f.tags)),
            rollback_failed: facts.map(|f| f.rollback_failed),
            failed_compensation: facts.map(|f| f.failed_compensation),
            queue: queue.map(|q| q.queue.to_owned()),
            queue_key: queue.and_then(|q| q.key.map(str::to_owned)),
            priority: queue.map(|q| q.priority),
            queue_taken: queue.map(|q| q.taken),
        }
    }
}

/// What runs on the read connection, beside the writes: reads, and the
/// inbox (posting needs no lease; taking is fenced by the owner).
pub(super) enum Read {
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
    Page(super::page::PageSql),
    /// The plan of a page's query.
    Explain(super::page::PageSql),
    /// Ids whose entry has no facts yet.
    Unindexed(i64),
    /// Fills the facts of an entry that has none.
    Backfill(String, Row),
    /// The owner of an instance, and since when.
    OwnerOf(String),
    /// A read or a swap of schedule states (see `schedules`).
    Schedule(super::schedules::ScheduleCall),
}

pub(super) enum ReadAnswer {
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
    Schedule(super::schedules::ScheduleAnswer),
    Done,
}

impl ReadAnswer {
    pub(super) fn unexpected(&self) -> Error {
        Error::Store("the PostgreSQL thread answered another question".into())
    }
}

pub(super) enum Job {
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
        take: super::queued::Take,
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
pub(super) struct Unordered {
    pub(super) read: Read,
    pub(super) reply: oneshot::Sender<Result<ReadAnswer>>,
}

/// How many connections serve unordered reads.
const READ_POOL: usize = 2;

/// The thread's body: connects, migrates, joins the workers (telling
/// `ready` how that went), then serves jobs until released.
pub(super) fn run(
    options: PgOptions,
    owned: Arc<Mutex<HashSet<String>>>,
    unapplied: Arc<AtomicUsize>,
    heard: super::listen::Heard<tokio::sync::watch::Sender<u64>>,
    jobs: UnboundedReceiver<Job>,
    unordered: UnboundedReceiver<Unordered>,
    ready: oneshot::Sender<Result<()>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = ready.send(Err(Error::Store(format!(
                "could not start the PostgreSQL thread's runtime: {e}"
            ))));
            return;
        }
    };
    runtime.block_on(async move {
        match Server::start(options, owned).await {
            Ok(mut server) => {
                server.unapplied = unapplied;
                super::listen::spawn(server.target.clone(), server.worker.clone(), heard);
                tokio::spawn(serve_unordered(
                    server.target.clone(),
                    server.worker.clone(),
                    server.timeout,
                    unordered,
                ));
                if ready.send(Ok(())).is_err() {
                    // The caller of `connect` is gone: end the lease.
                    let _ = server.release().await;
                    return;
                }
                server.serve(jobs).await;
            }
            Err(e) => {
                let _ = ready.send(Err(e));
            }
        }
    });
}

/// A connection with its prepared statements.
pub(super) struct Conn {
    pub(super) client: Client,
    create: Statement,
    append: Statement,
    append_sealed: Statement,
    append_indexed: Statement,
    append_many: Statement,
    append_many_sealed: Statement,
    same_rows: Statement,
    put_index: Statement,
    remove: Statement,
    remove_before: Statement,
    journal: Statement,
    last_seq: Statement,
    index: Statement,
    entries: Statement,
    entries_where: Statement,
    active_entries: Statement,
    tail_start: Statement,
    tail: Statement,
    post: Statement,
    posts: Statement,
    answer_post: Statement,
    answer: Statement,
    forget_post: Statement,
    owner_live: Statement,
    claim: Statement,
    disown: Statement,
    unindexed: Statement,
    backfill: Statement,
    owner_of: Statement,
}

/// What every connection is made from.
pub(super) struct Target {
    pub(super) config: Config,
    /// TLS as the URL's `sslmode` asks (see `tls`).
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    ssl_mode: SslMode,
    /// The URL without its password, for messages.
    pub(super) shown: String,
    /// The host(s) the URL names, for TLS errors.
    host: String,
    pub(super) schema: String,
    /// How long one connection attempt, startup included, may take: the
    /// URL's `connect_timeout`, else the store timeout.
    pub(super) attempt_limit: Duration,
}

impl Target {
    /// A connection, TLS as the URL says, its attempt bounded (see
    /// `fault::bounded`). A refusal of TLS's is for good (see `tls`).
    pub(super) async fn open(
        &self,
    ) -> std::result::Result<
        (
            Client,
            tokio_postgres::Connection<tokio_postgres::Socket, tls::Stream>,
        ),
        Failure,
    > {
        let attempt = self.config.connect(self.tls.clone());
        bounded(self.attempt_limit, attempt, |e| {
            match tls::refusal(&e, self.ssl_mode, &self.host) {
                Some(refused) => Failure::Other(refused),
                None => Failure::from(e),
            }
        })
        .await
    }

    async fn connect(&self) -> std::result::Result<Conn, Failure> {
        let (client, connection) = self.open().await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "a PostgreSQL connection ended");
            }
        });
        let s = &self.schema;
        let channel = super::listen::channel(s);
        // The instance's row, share-locked, while it names this worker
        // (parameter `$n`): a claim waits for the write, or the write sees
        // the new owner and does nothing.
        // A record of the sealed format (`codec::NEEDS_SEALED`) marks its
        // instance's `needs`, so workers of the release before never claim it.
        let sealed_record = format!("get_byte($3, 0) = {SEALED_FORMAT_VERSION}");
        let sealed_needs = format!("CASE WHEN {sealed_record} THEN {NEEDS_SEALED} ELSE 0 END");
        let fence = |n: u8| {
            format!(
                "fence AS (SELECT id FROM {s}.instances WHERE id = $1 AND owner = ${n} FOR SHARE)"
            )
        };
        let create = client
            .prepare(&format!(
                "WITH i AS (INSERT INTO {s}.instances (id, summary, workflow, status, active, owner,
                                                       needs, {}, queue, queue_key, priority,
                                                       queue_taken, queue_order)
                            VALUES ($1, $2, $4, $5, $6,
                                    $7::text,
                                    $18::integer | {sealed_needs}, {},
                                    $14, $15, $16, $17,
                                    CASE WHEN $14::text IS NOT NULL THEN nextval('{s}.queue_order') END)
                            ON CONFLICT (id) DO NOTHING RETURNING id),
                 j AS (INSERT INTO {s}.journal (id, seq, record)
                       SELECT id, 0, $3 FROM i ON CONFLICT DO NOTHING RETURNING 1)
                 SELECT (SELECT count(*) FROM i), (SELECT count(*) FROM j)",
                super::page::FACT_COLUMNS,
                fact_values(8)
            ))
            .await?;
        // A record of the sealed format also marks its instance's `needs`
        // (`append_sealed`, `append_many_sealed`); the others, nearly all,
        // touch no row of `instances`.
        let append_sql = |needs: &str| {
            format!(
                "WITH {},
                 j AS (INSERT INTO {s}.journal (id, seq, record)
                       SELECT $1, $2, $3 FROM fence ON CONFLICT DO NOTHING RETURNING 1){needs}
                 SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM j),
                        (SELECT record = $3 FROM {s}.journal WHERE id = $1 AND seq = $2)",
                fence(4)
            )
        };
        let append = client.prepare(&append_sql("")).await?;
        let append_sealed = client
            .prepare(&append_sql(&format!(
                ",
                 n AS (UPDATE {s}.instances SET needs = needs | {NEEDS_SEALED}
                       WHERE id = $1 AND owner = $4 AND needs & {NEEDS_SEALED} = 0)"
            )))
            .await?;
        // A record that changes the index: both in one statement, the
        // row update being the fence. An instance that stops needing a
        // driver (ended, paused) is told on the schema's channel.
        let append_indexed = client
            .prepare(&format!(
                "WITH u AS (UPDATE {s}.instances SET summary = $5, workflow = $6, status = $7, active = $8,
                                   needs = GREATEST(needs & ~{NEEDS_SEALED}, $15::integer)
                                           | (needs & {NEEDS_SEALED})
                                           | (CASE WHEN {sealed_record} THEN {NEEDS_SEALED} ELSE 0 END),
                                   {}, {}
                            WHERE id = $1 AND owner = $4 RETURNING 1),
                 j AS (INSERT INTO {s}.journal (id, seq, record)
                       SELECT $1, $2, $3 FROM u ON CONFLICT DO NOTHING RETURNING 1)
                 SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM j),
                        (SELECT record = $3 FROM {s}.journal WHERE id = $1 AND seq = $2),
                        (SELECT count(pg_notify('{channel}', 'stopped')) FROM u WHERE NOT $8)",
                fact_sets(9),
                queue_sets(16)
            ))
            .await?;
        // Many appends in one statement; the fence has a row per instance.
        let append_many_sql = |needs: &str| {
            format!(
                "WITH fence AS (SELECT id FROM {s}.instances WHERE id = ANY($1) AND owner = $4 FOR SHARE),
                 j AS (INSERT INTO {s}.journal (id, seq, record)
                       SELECT r.id, r.seq, r.record
                       FROM unnest($1::text[], $2::bigint[], $3::bytea[]) AS r(id, seq, record)
                       WHERE r.id IN (SELECT id FROM fence)
                       ON CONFLICT DO NOTHING RETURNING 1){needs}
                 SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM j)"
            )
        };
        let append_many = client.prepare(&append_many_sql("")).await?;
        // By the rows of the batch's ids (`id = ANY`, the primary key), not
        // by a scan of the worker's rows.
        let append_many_sealed = client
            .prepare(&append_many_sql(&format!(
                ",
                 n AS (UPDATE {s}.instances SET needs = needs | {NEEDS_SEALED}
                       WHERE id = ANY(ARRAY(SELECT r.id FROM unnest($1::text[], $3::bytea[]) AS r(id, record)
                                            WHERE get_byte(r.record, 0) = {SEALED_FORMAT_VERSION}))
                         AND owner = $4 AND needs & {NEEDS_SEALED} = 0)"
            )))
            .await?;
        // After a batch that was not all new: how many of its rows are
        // there with the same bytes (a write applied again counts as
        // written). One index lookup per row.
        let same_rows = client
            .prepare(&format!(
                "SELECT count(*) FROM unnest($1::text[], $2::bigint[], $3::bytea[]) AS r(id, seq, record)
                 WHERE EXISTS (SELECT 1 FROM {s}.journal x
                               WHERE x.id = r.id AND x.seq = r.seq AND x.record = r.record)"
            ))
            .await?;
        // Derived data: written only while owned, and otherwise dropped.
        let put_index = client
            .prepare(&format!(
                "UPDATE {s}.instances SET summary = $2, workflow = $3, status = $4, active = $5, {}, {}
                 WHERE id = $1 AND owner = $6",
                fact_sets(7),
                queue_sets(13)
            ))
            .await?;
        // An instance of this worker's, or of no live worker's (a finished
        // one that retention removes): journal, index and posts at once.
        let remove = client
            .prepare(&format!(
                "WITH i AS (DELETE FROM {s}.instances i WHERE i.id = $1 AND (i.owner = $2 OR {})
                            RETURNING i.id),
                 j AS (DELETE FROM {s}.journal WHERE id IN (SELECT id FROM i)),
                 p AS (DELETE FROM {s}.inbox WHERE id IN (SELECT id FROM i))
                 SELECT count(*) FROM i",
                lease::orphan(s)
            ))
            .await?;
        // An instance's old runs, while this worker owns it.
        let remove_before = client
            .prepare(&format!(
                "DELETE FROM {s}.journal WHERE id = $1 AND seq < $2
                 AND EXISTS (SELECT 1 FROM {s}.instances WHERE id = $1 AND owner = $3)"
            ))
            .await?;
        let journal = client
            .prepare(&format!(
                "SELECT seq, record FROM {s}.journal WHERE id = $1 AND seq >= $2 AND seq < $3
                 ORDER BY seq"
            ))
            .await?;
        let last_seq = client
            .prepare(&format!("SELECT max(seq) FROM {s}.journal WHERE id = $1"))
            .await?;
        let index = client
            .prepare(&format!("SELECT summary FROM {s}.instances WHERE id = $1"))
            .await?;
        let entries = client
            .prepare(&format!(
                "SELECT id, summary FROM {s}.instances ORDER BY id COLLATE \"C\""
            ))
            .await?;
        // On the partial index of the active instances (`instances_active`):
        // the ended ones are not read.
        let active_entries = client
            .prepare(&format!(
                "SELECT id, summary FROM {s}.instances WHERE active AND owner = $1
                 ORDER BY id COLLATE \"C\""
            ))
            .await?;
        let entries_where = client
            .prepare(&format!(
                "SELECT id, summary FROM {s}.instances
                 WHERE ($1::text IS NULL OR status IS NULL OR status = $1)
                   AND ($2::text IS NULL OR workflow IS NULL OR workflow = $2)
                 ORDER BY id COLLATE \"C\""
            ))
            .await?;
        // Tail by snapshot: only rows of transactions older than every one
        // still running, which are final, in (tx, id, seq) order; a row
        // that commits later belongs to a newer transaction, so it comes
        // after every row read so far.
        let tail_start = client
            .prepare("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
            .await?;
        let tail = client
            .prepare(&format!(
                "SELECT tx::text::bigint, id, seq, record FROM {s}.journal
                 WHERE tx < pg_snapshot_xmin(pg_current_snapshot())
                   AND (tx, id, seq) > ($1::text::xid8, $2, $3)
                 ORDER BY tx, id, seq LIMIT $4"
            ))
            .await?;
        // The owner is told on the schema's channel.
        let post = client
            .prepare(&format!(
                "WITH p AS (INSERT INTO {s}.inbox (id, intent, token) VALUES ($1, $2, $3)
                            ON CONFLICT (token) DO NOTHING RETURNING 1)
                 SELECT count(pg_notify('{channel}',
                        'post:' || coalesce((SELECT owner FROM {s}.instances WHERE id = $1), '')))
                 FROM p"
            ))
            .await?;
        let posts = client
            .prepare(&format!(
                "WITH unread AS (DELETE FROM {s}.inbox
                                 WHERE answered_at < now() - interval '10 minutes')
                 SELECT p.n, p.id, p.intent FROM {s}.inbox p JOIN {s}.instances i ON i.id = p.id
                 WHERE i.owner = $2 AND p.answer IS NULL ORDER BY p.n LIMIT $1"
            ))
            .await?;
        // An answer no poster read (it gave up, or died) is removed by the
        // owner's next look at its inbox, ten minutes on.
        let answer_post = client
            .prepare(&format!(
                "WITH a AS (UPDATE {s}.inbox p SET answer = $3, answered_at = now() WHERE p.n = $1
                            AND EXISTS (SELECT 1 FROM {s}.instances i
                                        WHERE i.id = p.id AND i.owner = $2 FOR SHARE)
                            RETURNING p.token)
                 SELECT count(pg_notify('{channel}', 'stopped')) FROM a"
            ))
            .await?;
        let answer = client
            .prepare(&format!("SELECT answer FROM {s}.inbox WHERE token = $1"))
            .await?;
        let forget_post = client
            .prepare(&format!("DELETE FROM {s}.inbox WHERE token = $1"))
            .await?;
        let owner_live = client
            .prepare(&format!(
                "SELECT EXISTS (SELECT 1 FROM {s}.workers w
                                WHERE w.name = i.owner AND w.expires_at > now())
                 FROM {s}.instances i WHERE i.id = $1"
            ))
            .await?;
        // Instances that must run (or have posts waiting) and whose owner
        // is gone, of the workflows this worker runs (an index entry from
        // before migration 3 names none): on a queue, those that hold a
        // slot, or that gave theirs back while they wait (a waiting one
        // never waited in its queue since: those the takes take). Rows
        // another worker is claiming are skipped, not waited for.
        let claim = client
            .prepare(&format!(
                "WITH c AS (SELECT i.id FROM {s}.instances i
                            WHERE i.id IN (SELECT id FROM {s}.instances
                                           WHERE active AND (queue IS NULL OR queue_taken OR status = 'waiting')
                                           UNION SELECT id FROM {s}.inbox WHERE answer IS NULL)
                              AND (i.workflow IS NULL OR i.workflow = ANY($2))
                              AND i.needs & ~{NEEDS_SEALED} <= {}
                              AND {}
                            LIMIT $3
                            FOR UPDATE OF i SKIP LOCKED)
                 UPDATE {s}.instances i SET owner = $1, owned_since = now()
                 FROM c WHERE i.id = c.id RETURNING i.id",
                crate::codec::RECORD_KINDS,
                lease::orphan(s)
            ))
            .await?;
        let disown = client
            .prepare(&format!(
                "UPDATE {s}.instances SET owner = NULL, owned_since = now()
                 WHERE id = $1 AND owner = $2 AND queue IS NOT NULL AND NOT queue_taken"
            ))
            .await?;
        let unindexed = client
            .prepare(&format!(
                "SELECT id FROM {s}.instances WHERE facts IS NULL ORDER BY id LIMIT $1"
            ))
            .await?;
        // Derived data, written whoever owns the row, and only where it
        // is missing: a worker that wrote facts since is not undone.
        let backfill = client
            .prepare(&format!(
                "UPDATE {s}.instances SET {}, started_at = coalesce(started_at, $8)
                 WHERE id = $1 AND facts IS NULL",
                fact_sets(2)
            ))
            .await?;
        let owner_of = client
            .prepare(&format!(
                "SELECT owner, coalesce(owned_since, w.started_at, now())
                 FROM {s}.instances i LEFT JOIN {s}.workers w ON w.name = i.owner
                 WHERE i.id = $1 AND i.owner IS NOT NULL"
            ))
            .await?;
        Ok(Conn {
            unindexed,
            backfill,
            owner_of,
            client,
            append_indexed,
            claim,
            disown,
            post,
            posts,
            answer_post,
            answer,
            forget_post,
            owner_live,
            create,
            append,
            append_sealed,
            append_many,
            append_many_sealed,
            same_rows,
            put_index,
            remove,
            remove_before,
            journal,
            last_seq,
            index,
            entries,
            entries_where,
            active_entries,
            tail_start,
            tail,
        })
    }

    /// A connection for writes: commits do not wait for the disk (a flush
    /// does).
    pub(super) async fn connect_writer(&self) -> std::result::Result<Conn, Failure> {
        let conn = self.connect().await?;
        conn.client
            .batch_execute("SET synchronous_commit TO off")
            .await?;
        Ok(conn)
    }
}

struct Server {
    target: Arc<Target>,
    /// This worker's name: the owner its instances' rows name.
    worker: Arc<str>,
    lease: Duration,
    timeout: Duration,
    /// The instances this worker owns (shared with the store, which
    /// answers `owns` from it).
    owned: Arc<Mutex<HashSet<String>>>,
    /// The write connections (see `writers`); the first also renews the
    /// lease, claims and takes from queues.
    writers: Vec<Writer>,
    /// Where a flush commits while the writers go on (see `flushing`).
    flush_conn: Option<Arc<Conn>>,
    reader: Arc<tokio::sync::Mutex<Option<Arc<Conn>>>>,
    fenced: bool,
    /// A write nobody waited for failed: every later flush says so (the
    /// engine stops the instances it could not make durable).
    failed: Option<String>,
    /// Takes no lease and writes nothing (the caller refuses writes).
    read_only: bool,
    /// Writes queued with nobody waiting and not yet applied (counted up
    /// by the store, down here), for `Store::quiet`.
    unapplied: Arc<AtomicUsize>,
}

impl Server {
    /// Connects, within the store timeout however the server behaves.
    async fn start(options: PgOptions, owned: Arc<Mutex<HashSet<String>>>) -> Result<Server> {
        let (url, ssl) = ssl_options::split(&options.url)?;
        let config: Config = url.parse().map_err(|e| Error::DatabaseUnreachable {
            url: String::from("(unparsable URL)"),
            detail: format!("{e}"),
        })?;
        let mut config = config;
        let attempt_limit = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(options.timeout);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        if config.get_application_name().is_none() {
            // So an operator (or a test) can tell a schema's connections.
            config.application_name(format!("saga:{}", options.schema));
        }
        config.ssl_mode(ssl.mode.negotiation());
        let shown = describe(&config);
        let host = hosts(&config);
        let target = Arc::new(Target {
            config,
            tls: tls::connector(&ssl)?,
            ssl_mode: ssl.mode,
            shown,
            host,
            schema: options.schema.clone(),
            attempt_limit,
        });
        let timeout = options.timeout;
        let deadline = Instant::now() + timeout;
        let joining = async {
            let mut backoff = Backoff::until(deadline);
            loop {
                let failure =
                    match Server::join(target.clone(), options.clone(), owned.clone()).await {
                        Ok(server) => return Ok(server),
                        Err(failure) => failure,
                    };
                // Undone (a cancelled migration, a deadlock): again.
                if matches!(failure, Failure::Retry(_)) && backoff.wait().await {
                    tracing::warn!(error = %failure, "a PostgreSQL statement was undone while connecting; trying again");
                    continue;
                }
                return Err(failure.into_error(&target.shown, || lease::fenced(&target.schema)));
            }
        };
        match tokio::time::timeout(timeout, joining).await {
            Ok(joined) => joined,
            Err(_) => Err(Error::DatabaseUnreachable {
                url: target.shown.clone(),
                detail: format!("connecting took longer than the store timeout ({timeout:?})"),
            }),
        }
    }

    /// Checks the schema (a worker migrates it), joins its workers (a
    /// reader does not), and opens the write connections. A connection
    /// that cannot be made is [`Error::DatabaseUnreachable`] at once.
    async fn join(
        target: Arc<Target>,
        options: PgOptions,
        owned: Arc<Mutex<HashSet<String>>>,
    ) -> std::result::Result<Server, Failure> {
        let unreachable = |failure| Failure::Other(fault::unreachable(failure, &target.shown));
        let (mut client, connection) = target.open().await.map_err(unreachable)?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let worker = worker_name();
        if options.read_only {
            // A reader changes nothing: it takes no lease (and owns
            // nothing), and runs no migration.
            schema::check(&client, &target.schema).await?;
        } else {
            schema::migrate(&mut client, &target.schema).await?;
            lease::join(&client, &target.schema, &worker, options.lease).await?;
        }
        drop(client);
        let mut writers = Vec::with_capacity(writers::WRITERS);
        for _ in 0..writers::WRITERS {
            let conn = target.connect_writer().await.map_err(unreachable)?;
            writers.push(Writer::new(conn));
        }
        Ok(Server {
            target,
            worker: Arc::from(worker),
            lease: options.lease,
            timeout: options.timeout,
            owned,
            writers,
            flush_conn: None,
            reader: Arc::new(tokio::sync::Mutex::new(None)),
            fenced: false,
            failed: None,
            read_only: options.read_only,
            unapplied: Arc::default(),
        })
    }

    async fn serve(mut self, mut jobs: UnboundedReceiver<Job>) {
        if self.read_only {
            // Nothing to renew: only reads and the release come.
            while let Some(job) = jobs.recv().await {
                match job {
                    Job::Read { read, reply } => {
                        let _ = reply.send(self.read_now(&read).await);
                    }
                    Job::Claim { reply, .. } => {
                        let _ = reply.send(Ok(Vec::new()));
                    }
                    Job::TakeQueued { reply, .. } => {
                        let _ = reply.send(Ok(crate::store::QueueTaken::default()));
                    }
                    Job::Write { reply, .. } => {
                        if let Some(reply) = reply {
                            let _ = reply.send(Err(Error::ReadOnly {
                                what: "a write".into(),
                            }));
                        }
                    }
                    Job::Flush { reply } => {
                        let _ = reply.send(Ok(()));
                    }
                    Job::Release { reply } => {
                        let _ = reply.send(Ok(()));
                        return;
                    }
                }
            }
            return;
        }
        tracing::info!(worker = %self.worker, "a worker of the PostgreSQL schema {:?}", self.target.schema);
        // Renewals keep the lease while no flush does, and the keeper
        // while a job the database holds up holds up the heartbeat.
        let keeper = keeper::Keeper::spawn(
            self.target.clone(),
            self.worker.clone(),
            self.lease,
            self.timeout,
        );
        let mut heartbeat = tokio::time::interval(self.lease / 3);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The flush under way, and those asked for meanwhile (the next
        // one answers them).
        let mut pending: Option<flushing::Flushing> = None;
        let mut waiting = Vec::new();
        loop {
            keeper.idle();
            let job = tokio::select! {
                biased;
                committed = async {
                    match pending.as_mut() {
                        Some(flushing) => flushing.committed().await,
                        None => std::future::pending().await,
                    }
                } => {
                    keeper.busy();
                    if let Some(flushed) = pending.take() {
                        self.end_flush(flushed, committed).await;
                    }
                    if !waiting.is_empty() {
                        pending = self.begin_flush(std::mem::take(&mut waiting)).await;
                    }
                    continue;
                }
                // Before the next batch of jobs: a long queue of them
                // holds back the renewal of the lease by one batch at most.
                _ = heartbeat.tick() => {
                    keeper.busy();
                    self.settle_flushes(&mut pending, &mut waiting).await;
                    if !self.fenced {
                        if let Err(e) = self.flush().await {
                            tracing::warn!(error = %e, "could not renew the PostgreSQL lease");
                        }
                        self.sweep().await;
                    }
                    continue;
                }
                job = jobs.recv() => job,
            };
            let Some(job) = job else { return };
            keeper.busy();
            // Whatever queued meanwhile goes with it: appends nobody waits
            // for become one statement.
            let mut batch = vec![job];
            while batch.len() < MAX_BATCH
                && let Ok(job) = jobs.try_recv()
            {
                batch.push(job);
            }
            // Writes run until the next job of another kind, which sees
            // them applied.
            let mut writes = Vec::new();
            for job in batch {
                let job = match job {
                    Job::Write { op, reply } => {
                        writes.push((op, reply));
                        continue;
                    }
                    job => job,
                };
                self.run_writes(std::mem::take(&mut writes)).await;
                if matches!(
                    job,
                    Job::Claim { .. } | Job::TakeQueued { .. } | Job::Release { .. }
                ) {
                    // They flush on the write connection, with nothing
                    // else under way.
                    self.settle_flushes(&mut pending, &mut waiting).await;
                }
                match job {
                    Job::Write { .. } => unreachable!("taken above"),
                    Job::Flush { reply } => {
                        if pending.is_some() {
                            waiting.push(reply);
                        } else {
                            pending = self.begin_flush(vec![reply]).await;
                        }
                        heartbeat.reset();
                    }
                    Job::Read {
                        read: read @ Read::TailStart,
                        reply,
                    } => {
                        // Answered before any write queued after it.
                        let _ = reply.send(self.read_now(&read).await);
                    }
                    Job::Read { read, reply } => {
                        // Every write queued before it is applied: it sees them.
                        let reader = self.reader.clone();
                        let target = self.target.clone();
                        let worker = self.worker.clone();
                        let deadline = Instant::now() + self.timeout;
                        tokio::spawn(async move {
                            let answer =
                                read_with_retry(&target, &reader, &read, &worker, deadline).await;
                            let _ = reply.send(answer);
                        });
                    }
                    Job::Claim {
                        workflows,
                        limit,
                        reply,
                    } => {
                        let _ = reply.send(self.claim(workflows, limit).await);
                    }
                    Job::TakeQueued { take, reply } => {
                        let _ = reply.send(self.take_queued(take).await);
                    }
                    Job::Release { reply } => {
                        // The worker leaves: nothing is to be kept.
                        drop(keeper);
                        let _ = reply.send(self.release().await);
                        return;
                    }
                }
            }
            self.run_writes(writes).await;
        }
    }

    /// Serves `read` on the read connection, before the next job.
    async fn read_now(&self, read: &Read) -> Result<ReadAnswer> {
        let deadline = Instant::now() + self.timeout;
        read_with_retry(&self.target, &self.reader, read, &self.worker, deadline).await
    }

    /// Applies `writes`, then counts down those nobody waited for: once
    /// applied, a read or a flush sees them.
    async fn run_writes(&mut self, writes: Vec<writers::Write>) {
        if writes.is_empty() {
            return;
        }
        let unanswered = writes.iter().filter(|(_, reply)| reply.is_none()).count();
        self.apply_writes(writes).await;
        self.unapplied.fetch_sub(unanswered, Ordering::SeqCst);
    }

    /// Applies `writes`: each connection its instances' writes, in order,
    /// all connections at once.
    async fn apply_writes(&mut self, writes: Vec<writers::Write>) {
        let mut parts: Vec<Vec<writers::Write>> =
            (0..self.writers.len()).map(|_| Vec::new()).collect();
        for write in writes {
            parts[writers::of(writers::instance(&write.0))].push(write);
        }
        let cx = writers::Context {
            target: &self.target,
            worker: &self.worker,
            owned: &self.owned,
            timeout: self.timeout,
        };
        let (failed, fenced) = (self.failed.clone(), self.fenced);
        let runs = self
            .writers
            .iter_mut()
            .zip(parts)
            .filter(|(_, part)| !part.is_empty())
            .map(|(writer, part)| {
                let failed = failed.clone();
                let cx = &cx;
                Box::pin(async move { writer.run(cx, fenced, failed, part).await })
                    as std::pin::Pin<Box<dyn Future<Output = writers::Ran> + Send + '_>>
            })
            .collect();
        let ran = writers::all(runs).await;
        for ran in ran {
            if ran.fenced && !self.fenced {
                self.note_fenced().await;
            }
            if self.failed.is_none() {
                self.failed = ran.failed;
            }
        }
    }

    /// Renews the lease, committed synchronously: every write applied
    /// before it is durable then, on every connection (see `writers`).
    async fn flush(&mut self) -> Result<()> {
        if let Some(failed) = &self.failed {
            return Err(Error::Store(failed.clone()));
        }
        let deadline = Instant::now() + self.timeout;
        let sql = lease::renew_sql(&self.target.schema, &self.worker, self.lease);
        loop {
            // A connection that broke since its writes: a new one applies
            // them again, before the commit that makes them durable.
            for i in 1..self.writers.len() {
                let writer = &self.writers[i];
                let broken = writer.conn.as_ref().is_none_or(|c| c.client.is_closed());
                if broken && !writer.unflushed.is_empty() {
                    self.with_writer_of(i, deadline, |_, _| async { Ok(()) })
                        .await?;
                }
            }
            self.with_writer(deadline, |conn, _| renew(conn, sql.clone()))
                .await?;
            // And one that broke meanwhile (a server restart) lost them.
            let checks = self.writers[1..]
                .iter()
                .map(|writer| {
                    Box::pin(async move { writer.unflushed.is_empty() || writer.lived().await })
                        as std::pin::Pin<Box<dyn Future<Output = bool> + Send + '_>>
                })
                .collect();
            let lived = writers::all(checks).await;
            if lived.iter().all(|lived| *lived) {
                break;
            }
            for (writer, lived) in self.writers[1..].iter_mut().zip(lived) {
                if !lived {
                    writer.conn = None;
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::DatabaseUnreachable {
                    url: self.target.shown.clone(),
                    detail: "a write connection kept breaking while its writes were made durable"
                        .into(),
                });
            }
        }
        for writer in &mut self.writers {
            writer.unflushed.clear();
        }
        Ok(())
    }

    /// Claims up to `limit` instances whose owner is gone, then flushes.
    async fn claim(&mut self, workflows: Vec<String>, limit: i64) -> Result<Vec<String>> {
        if let Some(failed) = &self.failed {
            return Err(Error::Store(failed.clone()));
        }
        let deadline = Instant::now() + self.timeout;
        let claimed = self
            .with_writer(deadline, |conn, worker| {
                let workflows = workflows.clone();
                async move {
                    let rows = conn
                        .client
                        .query(&conn.claim, &[&&*worker, &workflows, &limit])
                        .await?;
                    Ok(rows
                        .iter()
                        .map(|row| row.get::<_, String>(0))
                        .collect::<Vec<_>>())
                }
            })
            .await?;
        if claimed.is_empty() {
            return Ok(claimed);
        }
        self.flush().await?;
        lock(&self.owned).extend(claimed.iter().cloned());
        tracing::info!(
            worker = %self.worker,
            instances = claimed.len(),
            "claimed instances whose worker is gone; resuming them"
        );
        Ok(claimed)
    }

    /// Takes the queued instances `take` allows, in one transaction, then
    /// flushes; they are this worker's from then on.
    async fn take_queued(&mut self, take: super::queued::Take) -> Result<crate::store::QueueTaken> {
        if let Some(failed) = &self.failed {
            return Err(Error::Store(failed.clone()));
        }
        let deadline = Instant::now() + self.timeout;
        let schema = self.target.schema.clone();
        let taken = self
            .with_writer(deadline, |conn, worker| {
                let (take, schema) = (take.clone(), schema.clone());
                async move { super::queued::take(&conn.client, &schema, &worker, &take).await }
            })
            .await?;
        if taken.ids.is_empty() {
            return Ok(taken);
        }
        self.flush().await?;
        lock(&self.owned).extend(taken.ids.iter().cloned());
        Ok(taken)
    }

    async fn release(&mut self) -> Result<()> {
        if self.fenced {
            return Ok(());
        }
        self.flush().await?;
        self.leave().await;
        Ok(())
    }

    /// Housekeeping: deletes the rows of dead workers that own nothing
    /// (see `lease::sweep_sql`). Not retried: the next heartbeat sweeps
    /// again.
    async fn sweep(&self) {
        let Some(conn) = &self.writers[0].conn else {
            return;
        };
        let sql = lease::sweep_sql(&self.target.schema);
        if let Err(e) = conn.client.batch_execute(&sql).await {
            tracing::debug!(error = %e, "could not sweep the rows of dead workers");
            // A failed statement may leave a transaction open.
            roll_back(&conn.client).await;
        }
    }

    /// Ends this worker's lease now, so others claim its instances at once.
    async fn leave(&mut self) {
        lock(&self.owned).clear();
        self.end_lease().await;
    }

    /// Ends the lease in the database. A fenced worker keeps its list of
    /// instances: a call on one answers `Error::Fenced` (it writes nothing
    /// more), instead of being posted as if from a reader.
    async fn end_lease(&mut self) {
        let sql = lease::leave_sql(&self.target.schema, &self.worker);
        if let Some(conn) = &self.writers[0].conn
            && let Err(e) = conn.client.batch_execute(&sql).await
        {
            tracing::warn!(error = %e, "could not end this worker's lease; its instances are claimed once it expires");
        }
    }

    /// Runs `f` on the first write connection (see [`Writer::with`]).
    async fn with_writer<T, F, Fut>(&mut self, deadline: Instant, f: F) -> Result<T>
    where
        F: Fn(Arc<Conn>, Arc<str>) -> Fut,
        Fut: Future<Output = std::result::Result<T, Failure>>,
    {
        self.with_writer_of(0, deadline, f).await
    }

    /// Runs `f` on write connection `i`; on a broken connection, connects
    /// again, applies its unflushed writes again, and retries, until
    /// `deadline`.
    async fn with_writer_of<T, F, Fut>(&mut self, i: usize, deadline: Instant, f: F) -> Result<T>
    where
        F: Fn(Arc<Conn>, Arc<str>) -> Fut,
        Fut: Future<Output = std::result::Result<T, Failure>>,
    {
        if self.fenced {
            return Err(lease::fenced(&self.target.schema));
        }
        let answer = self.writers[i]
            .with(&self.target, &self.worker, deadline, f)
            .await;
        match answer {
            Ok(value) => Ok(value),
            Err(Failure::Fenced) => {
                self.note_fenced().await;
                Err(lease::fenced(&self.target.schema))
            }
            Err(failure) => {
                Err(failure.into_error(&self.target.shown, || lease::fenced(&self.target.schema)))
            }
        }
    }

    /// The lease ran out: this worker writes nothing more.
    async fn note_fenced(&mut self) {
        self.fenced = true;
        tracing::error!(
            schema = %self.target.schema,
            worker = %self.worker,
            "this worker's lease ran out and other workers may have taken over its instances: it writes nothing more; restart it"
        );
        self.end_lease().await;
    }
}

/// One write, with its fencing check: `true` for a create that created,
/// a remove that removed.
pub(super) async fn apply(
    conn: Arc<Conn>,
    worker: Arc<str>,
    op: Op,
) -> std::result::Result<bool, Failure> {
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
fn appended(row: &tokio_postgres::Row, id: &str, seq: i64) -> std::result::Result<bool, Failure> {
    if row.get::<_, i64>(0) == 0 {
        return Err(Failure::Fenced);
    }
    let inserted: i64 = row.get(1);
    let same: Option<bool> = row.get(2);
    if inserted == 1 || same == Some(true) {
        Ok(true)
    } else {
        Err(Failure::Other(Error::Corrupt {
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
pub(super) async fn apply_many(
    conn: Arc<Conn>,
    worker: Arc<str>,
    ops: Vec<Op>,
) -> std::result::Result<(), Failure> {
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
        return Err(Failure::Fenced);
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
        Err(Failure::Other(Error::Corrupt {
            what: format!("journal records of instances {ids:?}"),
            detail: "the database holds other records under their sequence numbers".into(),
        }))
    }
}

/// A flush: renews the lease in a transaction committed synchronously.
async fn renew(conn: Arc<Conn>, sql: String) -> std::result::Result<(), Failure> {
    let messages = conn.client.simple_query(&sql).await?;
    let counts: Vec<u64> = messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        })
        .collect();
    match counts.get(2) {
        Some(1) => Ok(()),
        Some(_) => Err(Failure::Fenced),
        None => Err(Failure::Other(Error::Store(format!(
            "PostgreSQL answered a flush with {} results, not 4",
            counts.len()
        )))),
    }
}

/// Serves unordered reads, each on the next connection of the pool, all
/// at once.
async fn serve_unordered(
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

async fn read_with_retry(
    target: &Target,
    reader: &tokio::sync::Mutex<Option<Arc<Conn>>>,
    read: &Read,
    worker: &str,
    deadline: Instant,
) -> Result<ReadAnswer> {
    let mut backoff = Backoff::until(deadline);
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
                    let failure = Failure::from(e);
                    if matches!(failure, Failure::Retry(_)) && !roll_back(&conn.client).await {
                        reader.lock().await.take();
                    }
                    failure
                }
            },
            Err(failure) => failure,
        };
        if matches!(failure, Failure::Other(_)) || !backoff.wait().await {
            return Err(failure.into_error(&target.shown, || lease::fenced(&target.schema)));
        }
        tracing::warn!(error = %failure, "a PostgreSQL read failed; trying it again");
    }
}

async fn query(
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
            ReadAnswer::Page(rows.iter().map(super::page::entry).collect(), full)
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
    })
}

/// Rows read were committed, maybe not yet on disk (writes commit without
/// waiting for it): a transaction committed synchronously after them
/// makes them durable, as a flush does.
async fn settle(conn: &Conn) -> std::result::Result<(), tokio_postgres::Error> {
    conn.client
        .simple_query(
            "BEGIN; SET LOCAL synchronous_commit TO on; SELECT pg_current_xact_id(); COMMIT",
        )
        .await
        .map(drop)
}

/// The database a config points at, without its password.
fn describe(config: &Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(host_name)
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{host}:{port}/{}",
        config.get_user().unwrap_or(""),
        config.get_dbname().unwrap_or("")
    )
}

/// The hosts a config names, as it names them, comma-separated.
fn hosts(config: &Config) -> String {
    let hosts: Vec<String> = config.get_hosts().iter().map(host_name).collect();
    if hosts.is_empty() {
        "localhost".into()
    } else {
        hosts.join(",")
    }
}

fn host_name(host: &tokio_postgres::config::Host) -> String {
    match host {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
    }
}

/// This worker's name: host, process and a random part, so two engines in
/// one process differ too. Plain characters only: it is spliced into SQL.
fn worker_name() -> String {
    let host: String = std::fs::read_to_string("/etc/hostname")
        .unwrap_or_else(|_| "host".into())
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        .take(64)
        .collect();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}:{}:{nanos:08x}", std::process::id())
}
