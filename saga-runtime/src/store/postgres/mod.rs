//! The PostgreSQL store: journals in tables, so workers on many machines
//! share one database (feature `postgres`).
//!
//! - **Layout.** `journal (id, seq, record)`, one row per record, and
//!   `instances (id, summary)`, the index, in one schema (default `saga`);
//!   [`schema`] migrates it on connect.
//! - **Who writes.** One worker at a time drives a schema's instances: it
//!   holds the schema's lease ([`lease`]), renewed by every flush and by a
//!   heartbeat. Every write checks the lease's epoch in its own statement,
//!   under a share lock of the lease row, so a worker that stalled past
//!   its lease (a GC pause, SIGSTOP) writes nothing once another took
//!   over: it is *fenced*, and its calls answer [`Error::Fenced`]. Other
//!   workers wait in [`PgStore::connect`] as hot standbys and take over
//!   when the lease expires, resuming the instances by replay.
//! - **Durability.** Appends, index updates and removals are queued: the
//!   caller goes on at once, and the store's thread applies what queued
//!   meanwhile in call order, the appends of many instances as one
//!   statement, committed without waiting for the disk
//!   (`synchronous_commit = off`). A read or a flush is served after every
//!   write queued before it, so it sees them. A flush is one small
//!   transaction committed with `synchronous_commit = on`; PostgreSQL
//!   writes its WAL in order, so that commit makes every earlier write
//!   durable with one disk flush (group commit). A queued write that fails
//!   fails the next flush, and every one after it: the engine stops what it
//!   could not make durable, as on a failed disk.
//! - **Readers.** A read-only connection ([`PgOptions::read_only`]) takes
//!   no lease: the `saga` command and dashboards read while workers run.
//! - **The inbox.** `inbox (n, id, intent)`: what readers post (events,
//!   control calls) for the driving worker, which acts on them. Posting
//!   needs no lease; removing a post checks the epoch, so a fenced worker,
//!   whose acts were refused, leaves it for the next.
//! - **Faults.** A lost connection is reconnected, with backoff, until the
//!   call's deadline. The writes made since the last flush that succeeded
//!   are kept in memory and applied again on the new connection: a write
//!   committed asynchronously may have died with a restarted server, and
//!   applying one twice is harmless (a journal row that is there already
//!   with the same bytes is taken as written).
//!
//! The store's calls are synchronous (the [`Store`] trait): they are served
//! by a thread with its own Tokio runtime and connections, and a caller
//! waits for the answer.

mod lease;
mod schema;
mod server;

use std::sync::Mutex;
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;

use self::server::{Job, Op, Read, ReadAnswer};
use super::Store;
use crate::error::{Error, Result};

/// The default schema of a saga database.
pub(crate) const DEFAULT_SCHEMA: &str = "saga";
/// The default lease time: how long a worker's instances wait for it after
/// it stops answering, before another worker takes them over.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// How a [`PgStore`] connects.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// `postgres://user@host:port/db`, or a key-value string.
    pub url: String,
    /// The schema that holds the tables.
    pub schema: String,
    /// How long the lease lasts without a renewal.
    pub lease: Duration,
    /// How long a call waits through a lost connection before it fails.
    pub timeout: Duration,
    /// Only read: take no lease, refuse writes ([`Error::ReadOnly`]).
    pub read_only: bool,
}

impl PgOptions {
    /// Options with the defaults, for `url`.
    pub fn new(url: &str) -> PgOptions {
        PgOptions {
            url: url.to_owned(),
            schema: DEFAULT_SCHEMA.to_owned(),
            lease: DEFAULT_LEASE,
            timeout: Duration::from_secs(30),
            read_only: false,
        }
    }
}

/// The PostgreSQL store. Not yet a stable API (see [`Store`]).
#[doc(hidden)]
pub struct PgStore {
    jobs: UnboundedSender<Job>,
    read_only: bool,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// How long a caller waits for the store's thread to answer.
    patience: Duration,
}

impl PgStore {
    /// Connects, migrates the schema, and waits until this worker holds
    /// the schema's lease (another worker may hold it: this one is then a
    /// standby until that lease expires).
    pub async fn connect(options: PgOptions) -> Result<PgStore> {
        schema::validate(&options.schema)?;
        if options.lease < Duration::from_millis(300) {
            return Err(Error::InvalidArgument(format!(
                "a lease of {:?} is too short to renew: use at least 300 ms",
                options.lease
            )));
        }
        let (jobs, receiver) = tokio::sync::mpsc::unbounded_channel();
        let (ready, started) = tokio::sync::oneshot::channel();
        let patience = options.timeout + options.lease + Duration::from_secs(5);
        let read_only = options.read_only;
        let thread = std::thread::Builder::new()
            .name("saga-postgres".into())
            .spawn(move || server::run(options, receiver, ready))
            .map_err(|e| Error::Store(format!("could not start the PostgreSQL thread: {e}")))?;
        // Cancel safety: dropped here (a standby given up on), the receiver
        // tells the thread, which stops waiting for the lease, or hands it
        // back if it just took it; nothing here waits for the thread.
        match started.await {
            Ok(Ok(())) => Ok(PgStore {
                jobs,
                read_only,
                thread: Mutex::new(Some(thread)),
                patience,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::Store(
                "the PostgreSQL thread stopped while connecting".into(),
            )),
        }
    }

    fn call<T>(&self, job: impl FnOnce(SyncSender<Result<T>>) -> Job) -> Result<T> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.jobs.send(job(reply)).map_err(|_| Error::Closed)?;
        match answer.recv_timeout(self.patience) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(Error::Store(format!(
                "PostgreSQL did not answer within {:?}",
                self.patience
            ))),
            Err(RecvTimeoutError::Disconnected) => {
                Err(Error::Store("the PostgreSQL store's thread stopped".into()))
            }
        }
    }

    fn refuse_if_read_only(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly {
                what: "a write to the journal".into(),
            });
        }
        Ok(())
    }

    /// A write whose answer the caller needs.
    fn write(&self, op: Op) -> Result<bool> {
        self.refuse_if_read_only()?;
        self.call(|reply| Job::Write {
            op,
            reply: Some(reply),
        })
    }

    /// A write the caller does not wait for: it is applied in call order
    /// before any later read or flush, and a failure fails the next flush
    /// (a write is durable only once a flush returns anyway).
    fn queue(&self, op: Op) -> Result<()> {
        self.refuse_if_read_only()?;
        self.jobs
            .send(Job::Write { op, reply: None })
            .map_err(|_| Error::Closed)
    }

    fn read(&self, read: Read) -> Result<ReadAnswer> {
        self.call(|reply| Job::Read { read, reply })
    }
}

impl Store for PgStore {
    fn create(&self, id: &str, index: &[u8], record: &[u8]) -> Result<bool> {
        self.write(Op::Create {
            id: id.to_owned(),
            index: index.to_vec(),
            record: record.to_vec(),
        })
    }

    fn append(&self, id: &str, seq: u64, record: &[u8]) -> Result<()> {
        self.queue(Op::Append {
            id: id.to_owned(),
            seq: to_db_seq(seq)?,
            record: record.to_vec(),
        })
    }

    fn journal(&self, id: &str) -> Result<Vec<(u64, Vec<u8>)>> {
        match self.read(Read::Journal(id.to_owned()))? {
            ReadAnswer::Journal(records) => Ok(records),
            other => Err(other.unexpected()),
        }
    }

    fn last_seq(&self, id: &str) -> Result<Option<u64>> {
        match self.read(Read::LastSeq(id.to_owned()))? {
            ReadAnswer::LastSeq(seq) => Ok(seq),
            other => Err(other.unexpected()),
        }
    }

    fn put_index(&self, id: &str, summary: &[u8]) -> Result<()> {
        self.queue(Op::PutIndex {
            id: id.to_owned(),
            summary: summary.to_vec(),
        })
    }

    fn index(&self, id: &str) -> Result<Option<Vec<u8>>> {
        match self.read(Read::Index(id.to_owned()))? {
            ReadAnswer::Index(summary) => Ok(summary),
            other => Err(other.unexpected()),
        }
    }

    fn index_entries(&self) -> Result<Vec<(String, Vec<u8>)>> {
        match self.read(Read::IndexEntries)? {
            ReadAnswer::Entries(entries) => Ok(entries),
            other => Err(other.unexpected()),
        }
    }

    fn remove(&self, id: &str) -> Result<()> {
        self.queue(Op::Remove { id: id.to_owned() })
    }

    fn flush(&self) -> Result<()> {
        if self.read_only {
            // It wrote nothing.
            return Ok(());
        }
        self.call(|reply| Job::Flush { reply })
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn has_inbox(&self) -> bool {
        !self.read_only
    }

    fn post(&self, id: &str, intent: &[u8]) -> Result<()> {
        match self.read(Read::Post {
            id: id.to_owned(),
            intent: intent.to_vec(),
        })? {
            ReadAnswer::Done => Ok(()),
            other => Err(other.unexpected()),
        }
    }

    fn posts(&self, limit: usize) -> Result<Vec<(i64, String, Vec<u8>)>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        match self.read(Read::Posts(limit))? {
            ReadAnswer::Posts(posts) => Ok(posts),
            other => Err(other.unexpected()),
        }
    }

    fn done_post(&self, n: i64) -> Result<()> {
        // The epoch is the store thread's own.
        match self.read(Read::DonePost { n, epoch: 0 })? {
            ReadAnswer::Done => Ok(()),
            other => Err(other.unexpected()),
        }
    }

    /// Flushes and hands the lease back, so a standby takes over within
    /// 100 ms instead of after the lease time; the store's thread then ends.
    fn close(&self) {
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(thread) = thread else { return };
        if let Err(e) = self.call(|reply| Job::Release { reply }) {
            tracing::warn!(error = %e, "could not hand the PostgreSQL lease back; a standby takes over when it expires");
        }
        // The thread ends once it answered the release.
        let _ = thread.join();
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.close();
    }
}

fn to_db_seq(seq: u64) -> Result<i64> {
    i64::try_from(seq).map_err(|_| Error::Store(format!("sequence number {seq} is over i64")))
}

/// PostgreSQL's errors, as the store's: no driver type reaches the API.
fn db_error(error: tokio_postgres::Error) -> Error {
    match error.as_db_error() {
        Some(db) => Error::Store(format!(
            "PostgreSQL: {} ({})",
            db.message(),
            db.code().code()
        )),
        None => Error::Store(format!("PostgreSQL: {error}")),
    }
}

/// Whether a failed call may succeed on a new connection: the connection
/// broke, the server shut down or restarted, or it does not accept
/// connections yet.
fn is_connection_error(error: &tokio_postgres::Error) -> bool {
    match error.code() {
        None => true,
        Some(code) => {
            let code = code.code();
            code.starts_with("08") || code.starts_with("57P")
        }
    }
}
