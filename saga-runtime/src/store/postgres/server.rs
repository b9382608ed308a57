//! The thread that talks to PostgreSQL: its own Tokio runtime, a write
//! connection that applies writes one at a time in call order, and a read
//! connection whose queries run concurrently.

use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage, Statement};

use super::{PgOptions, db_error, is_connection_error, lease, schema};

/// The most jobs taken from the queue at once.
const MAX_BATCH: usize = 1024;
use crate::error::{Error, Result};

/// A write, kept until a flush made it durable (to apply again on a new
/// connection).
#[derive(Clone)]
pub(super) enum Op {
    Create {
        id: String,
        index: Vec<u8>,
        record: Vec<u8>,
    },
    Append {
        id: String,
        seq: i64,
        record: Vec<u8>,
    },
    PutIndex {
        id: String,
        summary: Vec<u8>,
    },
    Remove {
        id: String,
    },
}

/// What runs on the read connection, beside the writes: reads, and the
/// inbox (posting needs no lease; taking is fenced by the epoch).
pub(super) enum Read {
    Journal(String),
    LastSeq(String),
    Index(String),
    IndexEntries,
    Post { id: String, intent: Vec<u8> },
    Posts(i64),
    DonePost { n: i64, epoch: i64 },
}

pub(super) enum ReadAnswer {
    Journal(Vec<(u64, Vec<u8>)>),
    LastSeq(Option<u64>),
    Index(Option<Vec<u8>>),
    Entries(Vec<(String, Vec<u8>)>),
    Posts(Vec<(i64, String, Vec<u8>)>),
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
        reply: Option<SyncSender<Result<bool>>>,
    },
    Read {
        read: Read,
        reply: SyncSender<Result<ReadAnswer>>,
    },
    Flush {
        reply: SyncSender<Result<()>>,
    },
    /// Flush, hand the lease back, and stop.
    Release {
        reply: SyncSender<Result<()>>,
    },
}

/// Why a statement failed.
enum Failure {
    /// The connection broke: a new one may do it.
    Connection(tokio_postgres::Error),
    /// Another worker took over the lease.
    Fenced,
    Other(Error),
}

impl From<tokio_postgres::Error> for Failure {
    fn from(error: tokio_postgres::Error) -> Failure {
        if is_connection_error(&error) {
            Failure::Connection(error)
        } else {
            Failure::Other(db_error(error))
        }
    }
}

/// The thread's body: connects, migrates, takes the lease (telling
/// `ready` how that went), then serves jobs until released.
pub(super) fn run(
    options: PgOptions,
    jobs: UnboundedReceiver<Job>,
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
        match Server::start(options, &ready).await {
            Ok(mut server) => {
                if ready.send(Ok(())).is_err() {
                    // The caller of `connect` is gone: hand the lease back.
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
struct Conn {
    client: Client,
    create: Statement,
    append: Statement,
    append_many: Statement,
    same_rows: Statement,
    put_index: Statement,
    remove: Statement,
    journal: Statement,
    last_seq: Statement,
    index: Statement,
    entries: Statement,
    post: Statement,
    posts: Statement,
    done_post: Statement,
}

/// What every connection is made from.
struct Target {
    config: Config,
    /// The URL without its password, for messages.
    shown: String,
    schema: String,
}

impl Target {
    async fn connect(&self) -> std::result::Result<Conn, tokio_postgres::Error> {
        let (client, connection) = self.config.connect(NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "a PostgreSQL connection ended");
            }
        });
        let s = &self.schema;
        // The lease row, share-locked, while its epoch is this worker's
        // (parameter `$n`): a take-over waits for the write, or the write
        // sees the new epoch and does nothing.
        let fence =
            |n: u8| format!("fence AS (SELECT epoch FROM {s}.lease WHERE epoch = ${n} FOR SHARE)");
        let create = client
            .prepare(&format!(
                "WITH {},
                 j AS (INSERT INTO {s}.journal (id, seq, record)
                       SELECT $1, 0, $3 FROM fence ON CONFLICT DO NOTHING RETURNING id),
                 i AS (INSERT INTO {s}.instances (id, summary) SELECT id, $2 FROM j
                       ON CONFLICT (id) DO UPDATE SET summary = EXCLUDED.summary RETURNING 1)
                 SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM j), (SELECT count(*) FROM i)",
                fence(4)
            ))
            .await?;
        let append = client
            .prepare(&format!(
                "WITH {},
                 j AS (INSERT INTO {s}.journal (id, seq, record)
                       SELECT $1, $2, $3 FROM fence ON CONFLICT DO NOTHING RETURNING 1)
                 SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM j),
                        (SELECT record = $3 FROM {s}.journal WHERE id = $1 AND seq = $2)",
                fence(4)
            ))
            .await?;
        // Many appends in one statement.
        let append_many = client
            .prepare(&format!(
                "WITH {},
                 j AS (INSERT INTO {s}.journal (id, seq, record)
                       SELECT r.id, r.seq, r.record
                       FROM unnest($1::text[], $2::bigint[], $3::bytea[]) AS r(id, seq, record), fence
                       ON CONFLICT DO NOTHING RETURNING 1)
                 SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM j)",
                fence(4)
            ))
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
        let put_index = client
            .prepare(&format!(
                "WITH {},
                 i AS (INSERT INTO {s}.instances (id, summary) SELECT $1, $2 FROM fence
                       ON CONFLICT (id) DO UPDATE SET summary = EXCLUDED.summary RETURNING 1)
                 SELECT (SELECT count(*) FROM fence)",
                fence(3)
            ))
            .await?;
        let remove = client
            .prepare(&format!(
                "WITH {},
                 j AS (DELETE FROM {s}.journal WHERE id = $1 AND EXISTS (SELECT 1 FROM fence)),
                 i AS (DELETE FROM {s}.instances WHERE id = $1 AND EXISTS (SELECT 1 FROM fence))
                 SELECT (SELECT count(*) FROM fence)",
                fence(2)
            ))
            .await?;
        let journal = client
            .prepare(&format!(
                "SELECT seq, record FROM {s}.journal WHERE id = $1 ORDER BY seq"
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
        let post = client
            .prepare(&format!(
                "INSERT INTO {s}.inbox (id, intent) VALUES ($1, $2)"
            ))
            .await?;
        let posts = client
            .prepare(&format!(
                "SELECT n, id, intent FROM {s}.inbox ORDER BY n LIMIT $1"
            ))
            .await?;
        let done_post = client
            .prepare(&format!(
                "DELETE FROM {s}.inbox WHERE n = $1
                 AND EXISTS (SELECT 1 FROM {s}.lease WHERE epoch = $2 FOR SHARE)"
            ))
            .await?;
        Ok(Conn {
            client,
            post,
            posts,
            done_post,
            create,
            append,
            append_many,
            same_rows,
            put_index,
            remove,
            journal,
            last_seq,
            index,
            entries,
        })
    }

    /// A connection for writes: commits do not wait for the disk (a flush
    /// does).
    async fn connect_writer(&self) -> std::result::Result<Conn, tokio_postgres::Error> {
        let conn = self.connect().await?;
        conn.client
            .batch_execute("SET synchronous_commit TO off")
            .await?;
        Ok(conn)
    }
}

struct Server {
    target: Arc<Target>,
    owner: String,
    lease: Duration,
    timeout: Duration,
    epoch: i64,
    writer: Option<Arc<Conn>>,
    reader: Arc<tokio::sync::Mutex<Option<Arc<Conn>>>>,
    /// The writes since the last flush that succeeded, in order.
    unflushed: Vec<Op>,
    fenced: bool,
    /// A write nobody waited for failed: every later flush says so (the
    /// engine stops the instances it could not make durable).
    failed: Option<String>,
    /// Takes no lease and writes nothing (the caller refuses writes).
    read_only: bool,
}

impl Server {
    async fn start(options: PgOptions, ready: &oneshot::Sender<Result<()>>) -> Result<Server> {
        let config: Config = options
            .url
            .parse()
            .map_err(|e| Error::DatabaseUnreachable {
                url: String::from("(unparsable URL)"),
                detail: format!("{e}"),
            })?;
        let mut config = config;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        if config.get_application_name().is_none() {
            // So an operator (or a test) can tell a schema's connections.
            config.application_name(format!("saga:{}", options.schema));
        }
        let shown = describe(&config);
        let target = Arc::new(Target {
            config,
            shown,
            schema: options.schema.clone(),
        });
        let unreachable = |e: tokio_postgres::Error| Error::DatabaseUnreachable {
            url: target.shown.clone(),
            detail: db_error(e).to_string(),
        };
        let (mut client, connection) = target.config.connect(NoTls).await.map_err(unreachable)?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        schema::migrate(&mut client, &target.schema).await?;
        let owner = owner_name();
        // A reader takes no lease; epoch 0 is no worker's (they start at 1).
        let epoch = if options.read_only {
            0
        } else {
            lease::take(&client, &target.schema, &owner, options.lease, || {
                ready.is_closed()
            })
            .await?
        };
        let read_only = options.read_only;
        drop(client);
        let writer = target.connect_writer().await.map_err(unreachable)?;
        Ok(Server {
            target,
            owner,
            lease: options.lease,
            timeout: options.timeout,
            epoch,
            writer: Some(Arc::new(writer)),
            reader: Arc::new(tokio::sync::Mutex::new(None)),
            unflushed: Vec::new(),
            fenced: false,
            failed: None,
            read_only,
        })
    }

    async fn serve(mut self, mut jobs: UnboundedReceiver<Job>) {
        if self.read_only {
            // Nothing to renew: only reads and the release come.
            while let Some(job) = jobs.recv().await {
                match job {
                    Job::Read { read, reply } => {
                        let deadline = Instant::now() + self.timeout;
                        let answer =
                            read_with_retry(&self.target, &self.reader, &read, deadline).await;
                        let _ = reply.send(answer);
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
        tracing::info!(owner = %self.owner, epoch = self.epoch, "driving the PostgreSQL schema {:?}", self.target.schema);
        // Renewals keep the lease while no flush does.
        let mut heartbeat = tokio::time::interval(self.lease / 3);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let job = tokio::select! {
                job = jobs.recv() => job,
                _ = heartbeat.tick() => {
                    if !self.fenced
                        && let Err(e) = self.flush().await
                    {
                        tracing::warn!(error = %e, "could not renew the PostgreSQL lease");
                    }
                    continue;
                }
            };
            let Some(job) = job else { return };
            // Whatever queued meanwhile goes with it: appends nobody waits
            // for become one statement.
            let mut batch = vec![job];
            while batch.len() < MAX_BATCH
                && let Ok(job) = jobs.try_recv()
            {
                batch.push(job);
            }
            let mut appends = Vec::new();
            for job in batch {
                let job = match job {
                    Job::Write {
                        op: op @ Op::Append { .. },
                        reply: None,
                    } => {
                        appends.push(op);
                        continue;
                    }
                    job => job,
                };
                self.append_unwaited(std::mem::take(&mut appends)).await;
                match job {
                    Job::Write { op, reply } => {
                        let result = self.write(op).await;
                        match reply {
                            Some(reply) => {
                                let _ = reply.send(result);
                            }
                            None => self.note_unwaited(result.map(drop)),
                        }
                    }
                    Job::Flush { reply } => {
                        let _ = reply.send(self.flush().await);
                        heartbeat.reset();
                    }
                    Job::Read { read, reply } => {
                        // Every write queued before it is applied: it sees them.
                        let read = match read {
                            Read::DonePost { n, .. } => Read::DonePost {
                                n,
                                epoch: self.epoch,
                            },
                            read => read,
                        };
                        let reader = self.reader.clone();
                        let target = self.target.clone();
                        let deadline = Instant::now() + self.timeout;
                        tokio::spawn(async move {
                            let _ = reply
                                .send(read_with_retry(&target, &reader, &read, deadline).await);
                        });
                    }
                    Job::Release { reply } => {
                        let _ = reply.send(self.release().await);
                        return;
                    }
                }
            }
            self.append_unwaited(appends).await;
        }
    }

    /// Applies appends nobody waits for, in one statement.
    async fn append_unwaited(&mut self, ops: Vec<Op>) {
        if ops.is_empty() {
            return;
        }
        if self.failed.is_some() || self.fenced {
            return;
        }
        let deadline = Instant::now() + self.timeout;
        let result = self
            .with_writer(deadline, |conn, epoch| apply_many(conn, epoch, ops.clone()))
            .await;
        if result.is_ok() {
            self.unflushed.extend(ops);
        }
        self.note_unwaited(result);
    }

    fn note_unwaited(&mut self, result: Result<()>) {
        if let Err(e) = result
            && self.failed.is_none()
            && !self.fenced
        {
            tracing::error!(error = %e, "a PostgreSQL write failed; the next flush reports it");
            self.failed = Some(e.to_string());
        }
    }

    async fn write(&mut self, op: Op) -> Result<bool> {
        if let Some(failed) = &self.failed {
            return Err(Error::Store(failed.clone()));
        }
        let deadline = Instant::now() + self.timeout;
        let created = self
            .with_writer(deadline, |conn, epoch| apply(conn, epoch, op.clone()))
            .await?;
        self.unflushed.push(op);
        Ok(created)
    }

    async fn flush(&mut self) -> Result<()> {
        if let Some(failed) = &self.failed {
            return Err(Error::Store(failed.clone()));
        }
        let deadline = Instant::now() + self.timeout;
        let sql = lease::renew_sql(&self.target.schema, self.epoch, self.lease);
        self.with_writer(deadline, |conn, _| renew(conn, sql.clone()))
            .await?;
        self.unflushed.clear();
        Ok(())
    }

    async fn release(&mut self) -> Result<()> {
        if self.fenced {
            return Ok(());
        }
        self.flush().await?;
        let sql = lease::release_sql(&self.target.schema, self.epoch);
        if let Some(conn) = &self.writer {
            conn.client.batch_execute(&sql).await.map_err(db_error)?;
        }
        Ok(())
    }

    /// Runs `f` on the write connection; on a broken connection, connects
    /// again, applies the unflushed writes again, and retries, until
    /// `deadline`.
    async fn with_writer<T, F, Fut>(&mut self, deadline: Instant, f: F) -> Result<T>
    where
        F: Fn(Arc<Conn>, i64) -> Fut,
        Fut: Future<Output = std::result::Result<T, Failure>>,
    {
        if self.fenced {
            return Err(lease::fenced(&self.target.schema));
        }
        let mut backoff = Duration::from_millis(20);
        loop {
            let failure = match self.writer.as_ref() {
                Some(conn) if !conn.client.is_closed() => match f(conn.clone(), self.epoch).await {
                    Ok(value) => return Ok(value),
                    Err(failure) => failure,
                },
                _ => match self.reconnect().await {
                    Ok(()) => continue,
                    Err(failure) => failure,
                },
            };
            match failure {
                Failure::Fenced => {
                    self.fenced = true;
                    tracing::error!(
                        schema = %self.target.schema,
                        "another worker took over this worker's lease: it writes nothing more; restart it"
                    );
                    return Err(lease::fenced(&self.target.schema));
                }
                Failure::Other(e) => return Err(e),
                Failure::Connection(e) => {
                    self.writer = None;
                    if Instant::now() + backoff > deadline {
                        return Err(Error::Store(format!(
                            "lost the connection to PostgreSQL at {} and could not get it back: {}",
                            self.target.shown,
                            db_error(e)
                        )));
                    }
                    tracing::warn!(error = %e, "lost the PostgreSQL connection; connecting again");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// A new write connection, with every unflushed write applied again:
    /// the server may have restarted and lost them.
    async fn reconnect(&mut self) -> std::result::Result<(), Failure> {
        let conn = self.target.connect_writer().await?;
        let conn = Arc::new(conn);
        for op in &self.unflushed {
            apply(conn.clone(), self.epoch, op.clone()).await?;
        }
        self.writer = Some(conn);
        Ok(())
    }
}

/// One write, with its fencing check. `true` for a create that created.
async fn apply(conn: Arc<Conn>, epoch: i64, op: Op) -> std::result::Result<bool, Failure> {
    let row = match &op {
        Op::Create { id, index, record } => {
            conn.client
                .query_one(&conn.create, &[id, index, record, &epoch])
                .await?
        }
        Op::Append { id, seq, record } => {
            conn.client
                .query_one(&conn.append, &[id, seq, record, &epoch])
                .await?
        }
        Op::PutIndex { id, summary } => {
            conn.client
                .query_one(&conn.put_index, &[id, summary, &epoch])
                .await?
        }
        Op::Remove { id } => conn.client.query_one(&conn.remove, &[id, &epoch]).await?,
    };
    let fence: i64 = row.get(0);
    if fence == 0 {
        return Err(Failure::Fenced);
    }
    match op {
        Op::Create { .. } => Ok(row.get::<_, i64>(1) == 1),
        Op::Append { id, seq, .. } => {
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
        Op::PutIndex { .. } | Op::Remove { .. } => Ok(true),
    }
}

/// Appends, in one statement with one fencing check.
async fn apply_many(conn: Arc<Conn>, epoch: i64, ops: Vec<Op>) -> std::result::Result<(), Failure> {
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
        .query_one(&conn.append_many, &[&ids, &seqs, &records, &epoch])
        .await?;
    let fence: i64 = row.get(0);
    if fence == 0 {
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

async fn read_with_retry(
    target: &Target,
    reader: &tokio::sync::Mutex<Option<Arc<Conn>>>,
    read: &Read,
    deadline: Instant,
) -> Result<ReadAnswer> {
    let mut backoff = Duration::from_millis(20);
    loop {
        let conn = {
            let mut slot = reader.lock().await;
            match slot.as_ref() {
                Some(conn) if !conn.client.is_closed() => Ok(conn.clone()),
                _ => match target.connect().await {
                    Ok(conn) => {
                        let conn = Arc::new(conn);
                        *slot = Some(conn.clone());
                        Ok(conn)
                    }
                    Err(e) => Err(e),
                },
            }
        };
        let result = match conn {
            Ok(conn) => query(&conn, read).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(answer) => return Ok(answer),
            Err(e) if is_connection_error(&e) && Instant::now() + backoff <= deadline => {
                tracing::warn!(error = %e, "lost the PostgreSQL read connection; connecting again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            Err(e) => return Err(db_error(e)),
        }
    }
}

async fn query(conn: &Conn, read: &Read) -> std::result::Result<ReadAnswer, tokio_postgres::Error> {
    Ok(match read {
        Read::Journal(id) => {
            let rows = conn.client.query(&conn.journal, &[id]).await?;
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
        Read::Post { id, intent } => {
            conn.client.execute(&conn.post, &[id, intent]).await?;
            ReadAnswer::Done
        }
        Read::Posts(limit) => {
            let rows = conn.client.query(&conn.posts, &[limit]).await?;
            ReadAnswer::Posts(
                rows.iter()
                    .map(|row| (row.get(0), row.get(1), row.get(2)))
                    .collect(),
            )
        }
        Read::DonePost { n, epoch } => {
            conn.client.execute(&conn.done_post, &[n, epoch]).await?;
            ReadAnswer::Done
        }
    })
}

/// The database a config points at, without its password.
fn describe(config: &Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{host}:{port}/{}",
        config.get_user().unwrap_or(""),
        config.get_dbname().unwrap_or("")
    )
}

/// This worker's name in the lease: host, process and a random part, so
/// two engines in one process differ too.
fn owner_name() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}:{}:{nanos:08x}", std::process::id())
}
