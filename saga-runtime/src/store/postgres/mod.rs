//! The PostgreSQL store: journals in tables, so workers on many machines
//! share one database (feature `postgres`).
//!
//! - **Layout.** `journal (id, seq, record)`, one row per record (the
//!   run of an instance that continued as new in the high 32 bits of
//!   `seq`, `journal::runs`: a `bigint` holds runs up to 2^31 - 1, and
//!   run 0 is every release's layout, so no migration rewrites rows), and
//!   `instances (id, summary, owner, workflow, status, active)`, the
//!   index, and `timers (id, wake, deadline, filed_by)`, the wakes of the
//!   instances that only wait ([`timers`]), in one schema (default
//!   `saga`); [`schema`] migrates it on connect.
//! - **Who writes.** Every worker (engine) drives the instances it owns:
//!   those it started, and those it claimed. Each worker holds a lease
//!   ([`lease`]), renewed by every flush and by a heartbeat, and while a
//!   job the database holds up (a table lock) holds up the heartbeat, by
//!   a keeper on a connection of its own (`server::keeper`). When a worker
//!   dies or closes, its lease ends, and the other workers claim its
//!   unfinished instances (`FOR UPDATE SKIP LOCKED`, a batch at a time, so
//!   they share them) and resume them by replay. Every write checks, in
//!   its own statement, that the instance's row still names this worker,
//!   so a worker that stalled past its lease (a GC pause, SIGSTOP) writes
//!   nothing once another claimed its instances: it is *fenced*, and its
//!   calls answer [`Error::Fenced`]. A worker never gets an expired lease
//!   back.
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
//!   no lease and runs no migration: the `saga` command and dashboards
//!   read while workers run (`schema` lists the privileges each needs).
//! - **The inbox.** `inbox (n, id, intent)`: what other processes post
//!   (events, control calls) for the worker that owns the instance, which
//!   acts on them. Posting needs no lease; removing a post checks the
//!   owner, so a fenced worker, whose acts were refused, leaves it for the
//!   worker that claims the instance next.
//! - **TLS.** Every connection (writer, readers, `LISTEN`) speaks TLS as
//!   the URL's `sslmode` says, with libpq's meaning ([`tls`]); the TLS
//!   options are taken out of the URL before tokio-postgres reads it
//!   ([`ssl_options`]).
//! - **Faults.** A lost connection is reconnected, with backoff, until the
//!   call's deadline; a statement the server undid (cancelled, a deadlock)
//!   is tried again ([`fault`]). The writes made since the last flush that succeeded
//!   are kept in memory and applied again on the new connection: a write
//!   committed asynchronously may have died with a restarted server, and
//!   applying one twice is harmless (a journal row that is there already
//!   with the same bytes is taken as written).
//!
//! The store's calls are served by a thread with its own Tokio runtime and
//! connections. A caller never waits there on a thread: a write is queued,
//! and a read or a create answers a future that the caller awaits (see
//! [`StoreFuture`]). Only [`Store::flush`] blocks, on the flusher's own
//! thread. Reads of this worker's own instances come after its queued
//! writes (read-your-writes); reads of other workers' instances, `list()`,
//! the inbox and the tail go to a small pool of connections of their own,
//! so a write stuck on a lock holds none of them up.

mod fault;
mod lease;
mod listen;
mod page;
mod queued;
mod schedules;
mod schema;
mod server;
mod ssl_options;
mod timer_reads;
mod timers;
mod tls;
mod writers;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;

use tokio::sync::oneshot;

use self::server::{Job, Op, Read, ReadAnswer, Row, Unordered};
use super::{
    Accept, IndexPage, IndexQuery, IndexRow, Store, StoreFuture, TailPosition, TailRecords, Told,
};
use crate::error::{Error, Result};
use crate::lock::lock;

/// The default schema of a saga database.
pub(crate) const DEFAULT_SCHEMA: &str = "saga";
/// The default lease time: how long a worker's instances wait for it after
/// it stops answering, before other workers claim them.
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
    /// Reads that need no write queued before them (see the module).
    unordered: UnboundedSender<Unordered>,
    read_only: bool,
    /// The schema of its tables.
    schema: String,
    /// The instances this worker owns; kept by the store's thread.
    owned: Arc<Mutex<HashSet<String>>>,
    /// How many notifications of each kind this engine heard (see
    /// `listen`).
    heard: listen::Heard<tokio::sync::watch::Receiver<u64>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// How long a caller waits for the store's thread to answer.
    patience: Duration,
    /// Calls waiting for the store's thread to answer (see `Store::quiet`).
    calls: Arc<AtomicUsize>,
    /// Writes queued with nobody waiting that the thread has not applied.
    unapplied: Arc<AtomicUsize>,
    /// Whether the timers are trusted (`timers`): this worker keeps them,
    /// and no live worker of a release that does not was registered when
    /// it connected.
    timers_trusted: bool,
}

/// Counts one call while its caller waits for the answer.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn on(calls: &'a AtomicUsize) -> Self {
        calls.fetch_add(1, Ordering::SeqCst);
        Waiting(calls)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl PgStore {
    /// Connects, migrates the schema, and joins the schema's workers with
    /// a lease of its own (a reader does not).
    pub async fn connect(options: PgOptions) -> Result<PgStore> {
        schema::validate(&options.schema)?;
        if options.lease < Duration::from_millis(300) {
            return Err(Error::InvalidArgument(format!(
                "a lease of {:?} is too short to renew: use at least 300 ms",
                options.lease
            )));
        }
        let (jobs, receiver) = tokio::sync::mpsc::unbounded_channel();
        let (unordered, unordered_receiver) = tokio::sync::mpsc::unbounded_channel();
        let (ready, started) = tokio::sync::oneshot::channel();
        let patience = options.timeout + options.lease + Duration::from_secs(5);
        let read_only = options.read_only;
        let schema = options.schema.clone();
        let owned = Arc::new(Mutex::new(HashSet::new()));
        let kept = owned.clone();
        let (told, heard) = listen::channels();
        let unapplied = Arc::new(AtomicUsize::new(0));
        let counted = unapplied.clone();
        let thread = std::thread::Builder::new()
            .name("saga-postgres".into())
            .spawn(move || {
                server::run(
                    options,
                    kept,
                    counted,
                    told,
                    receiver,
                    unordered_receiver,
                    ready,
                )
            })
            .map_err(|e| Error::Store(format!("could not start the PostgreSQL thread: {e}")))?;
        // Cancel safety: dropped here, the receiver tells the thread, which
        // ends the lease it just took; nothing here waits for the thread.
        let store = match started.await {
            Ok(Ok(())) => PgStore {
                schema,
                jobs,
                unordered,
                read_only,
                owned,
                heard,
                thread: Mutex::new(Some(thread)),
                patience,
                calls: Arc::default(),
                unapplied,
                timers_trusted: false,
            },
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(Error::Store(
                    "the PostgreSQL thread stopped while connecting".into(),
                ));
            }
        };
        store.trust_timers().await
    }

    /// Trusts the timers unless a live worker of a release that keeps
    /// none is registered (see `timers`).
    async fn trust_timers(mut self) -> Result<PgStore> {
        if !self.read_only {
            self.timers_trusted = !self.older_workers().await?;
            if !self.timers_trusted {
                tracing::info!(
                    "a worker of a release before runs on this schema: every waiting instance is resumed, as that release does"
                );
            }
        }
        Ok(self)
    }

    /// Sends a job to the store's thread and awaits its answer, at most
    /// the store's patience: no thread waits.
    async fn call<T>(&self, job: impl FnOnce(oneshot::Sender<Result<T>>) -> Job) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        self.jobs.send(job(reply)).map_err(|_| Error::Closed)?;
        self.answer(answer).await
    }

    async fn answer<T>(&self, answer: oneshot::Receiver<Result<T>>) -> Result<T> {
        // Let go once answered, inside the poll the answer woke.
        let _waiting = Waiting::on(&self.calls);
        match tokio::time::timeout(self.patience, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(Error::Store("the PostgreSQL store's thread stopped".into())),
            Err(_) => Err(self.no_answer()),
        }
    }

    fn no_answer(&self) -> Error {
        Error::Store(format!(
            "PostgreSQL did not answer within {:?}",
            self.patience
        ))
    }

    /// Like [`PgStore::call`], for the two calls made from threads of
    /// their own (the flusher's flush, the release on close): blocks.
    fn call_blocking(&self, job: impl FnOnce(mpsc::SyncSender<Result<()>>) -> Job) -> Result<()> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.jobs.send(job(reply)).map_err(|_| Error::Closed)?;
        match answer.recv_timeout(self.patience) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(self.no_answer()),
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
    async fn write(&self, op: Op) -> Result<bool> {
        self.refuse_if_read_only()?;
        self.call(|reply| Job::Write {
            op,
            reply: Some(reply),
        })
        .await
    }

    /// A write the caller does not wait for: it is applied in call order
    /// before any later read or flush, and a failure fails the next flush
    /// (a write is durable only once a flush returns anyway).
    fn queue(&self, op: Op) -> Result<()> {
        self.refuse_if_read_only()?;
        // Counted before it is sent: the thread counts it down once applied.
        self.unapplied.fetch_add(1, Ordering::SeqCst);
        self.jobs.send(Job::Write { op, reply: None }).map_err(|_| {
            self.unapplied.fetch_sub(1, Ordering::SeqCst);
            Error::Closed
        })
    }

    /// A read of this worker's own instance `id` comes after the writes
    /// queued before it; any other read goes to the pool at once.
    async fn read_of(&self, id: &str, read: Read) -> Result<ReadAnswer> {
        if self.owns(id) {
            self.call(|reply| Job::Read { read, reply }).await
        } else {
            self.read(read).await
        }
    }

    /// A call on the schedules table: on the pool, committed at once
    /// (synchronously: the pool's connections keep the server's default).
    async fn schedule_call(
        &self,
        call: schedules::ScheduleCall,
    ) -> Result<schedules::ScheduleAnswer> {
        match self.read(Read::Schedule(call)).await? {
            ReadAnswer::Schedule(answer) => Ok(answer),
            other => Err(other.unexpected()),
        }
    }

    /// A read that needs no write queued before it.
    async fn read(&self, read: Read) -> Result<ReadAnswer> {
        let (reply, answer) = oneshot::channel();
        self.unordered
            .send(Unordered { read, reply })
            .map_err(|_| Error::Closed)?;
        self.answer(answer).await
    }
}

impl Store for PgStore {
    fn create<'a>(
        &'a self,
        id: &'a str,
        index: &'a IndexRow<'_>,
        record: &'a [u8],
    ) -> StoreFuture<'a, bool> {
        let op = Op::Create {
            id: id.to_owned(),
            index: Row::of(index),
            record: record.to_vec(),
        };
        Box::pin(self.write(op))
    }

    fn append_indexed(
        &self,
        id: &str,
        seq: u64,
        record: &[u8],
        index: &IndexRow<'_>,
    ) -> Result<()> {
        self.queue(Op::AppendIndexed {
            id: id.to_owned(),
            seq: to_db_seq(seq)?,
            record: record.to_vec(),
            index: Row::of(index),
        })
    }

    fn append(&self, id: &str, seq: u64, record: &[u8]) -> Result<()> {
        self.queue(Op::Append {
            id: id.to_owned(),
            seq: to_db_seq(seq)?,
            record: record.to_vec(),
        })
    }

    fn journal<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Vec<(u64, Vec<u8>)>> {
        self.journal_range(id, 0..u64::MAX)
    }

    fn journal_range<'a>(
        &'a self,
        id: &'a str,
        seqs: std::ops::Range<u64>,
    ) -> StoreFuture<'a, Vec<(u64, Vec<u8>)>> {
        Box::pin(async move {
            // `seq` is a bigint: past i64 there is nothing to read.
            let clamp = |seq: u64| i64::try_from(seq).unwrap_or(i64::MAX);
            let read = Read::Journal(id.to_owned(), clamp(seqs.start), clamp(seqs.end));
            match self.read_of(id, read).await? {
                ReadAnswer::Journal(records) => Ok(records),
                other => Err(other.unexpected()),
            }
        })
    }

    fn last_seq<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<u64>> {
        Box::pin(async move {
            match self.read_of(id, Read::LastSeq(id.to_owned())).await? {
                ReadAnswer::LastSeq(seq) => Ok(seq),
                other => Err(other.unexpected()),
            }
        })
    }

    fn put_index(&self, id: &str, index: &IndexRow<'_>) -> Result<()> {
        self.queue(Op::PutIndex {
            id: id.to_owned(),
            index: Row::of(index),
        })
    }

    fn index<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            match self.read_of(id, Read::Index(id.to_owned())).await? {
                ReadAnswer::Index(summary) => Ok(summary),
                other => Err(other.unexpected()),
            }
        })
    }

    fn index_entries(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        Box::pin(async move {
            match self.read(Read::IndexEntries).await? {
                ReadAnswer::Entries(entries) => Ok(entries),
                other => Err(other.unexpected()),
            }
        })
    }

    /// Only this worker's: it drives no other (the others are claimed,
    /// and resumed by the claim).
    fn active_entries(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        Box::pin(async move {
            match self.read(Read::ActiveEntries).await? {
                ReadAnswer::Entries(entries) => Ok(entries),
                other => Err(other.unexpected()),
            }
        })
    }

    fn active_entries_by(&self, now: u64) -> StoreFuture<'_, super::ActiveSet> {
        if !self.timers_trusted {
            return Box::pin(async move {
                let may_run = self.active_entries().await?;
                Ok(super::ActiveSet {
                    may_run,
                    asleep: Vec::new(),
                })
            });
        }
        Box::pin(self.active_by(now))
    }

    fn timers_kept(&self) -> bool {
        self.timers_trusted
    }

    fn timer_of<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<(u64, bool)>> {
        Box::pin(self.timer(id))
    }

    fn timers_after<'a>(
        &'a self,
        after: Option<(u64, &'a str)>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<(u64, String, bool)>> {
        Box::pin(self.timers_from(after, limit))
    }

    fn index_entries_where<'a>(
        &'a self,
        status: Option<&'a str>,
        workflow: Option<&'a str>,
    ) -> StoreFuture<'a, Vec<(String, Vec<u8>)>> {
        let read = Read::EntriesWhere {
            status: status.map(str::to_owned),
            workflow: workflow.map(str::to_owned),
        };
        Box::pin(async move {
            match self.read(read).await? {
                ReadAnswer::Entries(entries) => Ok(entries),
                other => Err(other.unexpected()),
            }
        })
    }

    fn index_page<'a>(
        &'a self,
        query: &'a IndexQuery<'a>,
        accept: Accept<'a>,
    ) -> StoreFuture<'a, IndexPage> {
        let read = Read::Page(page::PageSql::of(&self.schema, query));
        Box::pin(async move {
            let ReadAnswer::Page(rows, full) = self.read(read).await? else {
                return Err(Error::Store(
                    "the PostgreSQL thread answered another question".into(),
                ));
            };
            // The next page begins after the last row read, accepted or not.
            let next = full
                .then(|| rows.last().map(|e| e.position.clone()))
                .flatten();
            let entries = rows.into_iter().filter(|e| accept(e)).collect();
            Ok(IndexPage { entries, next })
        })
    }

    fn explain_page<'a>(&'a self, query: &'a IndexQuery<'a>) -> StoreFuture<'a, Option<String>> {
        let read = Read::Explain(page::PageSql::of(&self.schema, query));
        Box::pin(async move {
            match self.read(read).await? {
                ReadAnswer::Ids(lines) => Ok(Some(lines.join("\n"))),
                other => Err(other.unexpected()),
            }
        })
    }

    fn unindexed(&self, limit: usize) -> StoreFuture<'_, Vec<String>> {
        let read = Read::Unindexed(i64::try_from(limit).unwrap_or(i64::MAX));
        Box::pin(async move {
            match self.read(read).await? {
                ReadAnswer::Ids(ids) => Ok(ids),
                other => Err(other.unexpected()),
            }
        })
    }

    fn backfill_index<'a>(&'a self, id: &'a str, index: &'a IndexRow<'_>) -> StoreFuture<'a, ()> {
        let read = Read::Backfill(id.to_owned(), Row::of(index));
        Box::pin(async move {
            match self.read(read).await? {
                ReadAnswer::Done => Ok(()),
                other => Err(other.unexpected()),
            }
        })
    }

    fn server_clock(&self) -> bool {
        true
    }

    fn owner_of<'a>(
        &'a self,
        id: &'a str,
    ) -> StoreFuture<'a, Option<(String, std::time::SystemTime)>> {
        let read = Read::OwnerOf(id.to_owned());
        Box::pin(async move {
            match self.read(read).await? {
                ReadAnswer::Owner(owner) => Ok(owner),
                other => Err(other.unexpected()),
            }
        })
    }

    fn remove(&self, id: &str) -> Result<()> {
        self.queue(Op::Remove { id: id.to_owned() })
    }

    fn remove_before(&self, id: &str, seq: u64) -> Result<()> {
        self.queue(Op::RemoveBefore {
            id: id.to_owned(),
            seq: to_db_seq(seq)?,
        })
    }

    fn disown(&self, id: &str) -> Result<()> {
        // Not this worker's from now on: later calls post to it, and the
        // writes queued before go first.
        lock(&self.owned).remove(id);
        self.queue(Op::Disown { id: id.to_owned() })
    }

    fn flush(&self) -> Result<()> {
        if self.read_only {
            // It wrote nothing.
            return Ok(());
        }
        self.call_blocking(|reply| Job::Flush { reply })
    }

    fn quiet(&self) -> bool {
        self.calls.load(Ordering::SeqCst) == 0 && self.unapplied.load(Ordering::SeqCst) == 0
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn settle(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            match self.read(Read::Settle).await? {
                ReadAnswer::Done => Ok(()),
                other => Err(other.unexpected()),
            }
        })
    }

    fn shared(&self) -> bool {
        !self.read_only
    }

    fn tail_start(&self) -> StoreFuture<'_, Option<TailPosition>> {
        Box::pin(async move {
            // In the queue, ahead of the writes made after it: a tail
            // begun now sees them all.
            let read = Read::TailStart;
            match self.call(|reply| Job::Read { read, reply }).await? {
                ReadAnswer::Position(position) => Ok(Some(position)),
                other => Err(other.unexpected()),
            }
        })
    }

    fn tail<'a>(
        &'a self,
        from: &'a TailPosition,
        limit: usize,
    ) -> StoreFuture<'a, (TailRecords, TailPosition)> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let read = Read::Tail {
            from: from.clone(),
            limit,
        };
        Box::pin(async move {
            match self.read(read).await? {
                ReadAnswer::Tail(records, position) => Ok((records, position)),
                other => Err(other.unexpected()),
            }
        })
    }

    fn changes(&self, what: Told) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(match what {
            Told::Posts => self.heard.posts.clone(),
            Told::Stops => self.heard.stops.clone(),
        })
    }

    fn owns(&self, id: &str) -> bool {
        lock(&self.owned).contains(id)
    }

    fn claim<'a>(&'a self, workflows: &'a [&'a str], limit: usize) -> StoreFuture<'a, Vec<String>> {
        let workflows = workflows.iter().map(|w| (*w).to_owned()).collect();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        Box::pin(async move {
            if self.read_only {
                return Ok(Vec::new());
            }
            self.call(|reply| Job::Claim {
                workflows,
                limit,
                reply,
            })
            .await
        })
    }

    fn take_queued<'a>(
        &'a self,
        take: &'a super::QueueTake<'a>,
    ) -> StoreFuture<'a, super::QueueTaken> {
        let take = queued::Take::of(take);
        Box::pin(async move {
            if self.read_only {
                return Ok(super::QueueTaken::default());
            }
            self.call(|reply| Job::TakeQueued { take, reply }).await
        })
    }

    fn post<'a>(&'a self, id: &'a str, intent: &'a [u8]) -> StoreFuture<'a, String> {
        let token = post_token();
        let read = Read::Post {
            id: id.to_owned(),
            intent: intent.to_vec(),
            token: token.clone(),
        };
        Box::pin(async move {
            match self.read(read).await? {
                ReadAnswer::Done => Ok(token),
                other => Err(other.unexpected()),
            }
        })
    }

    fn answer<'a>(&'a self, token: &'a str) -> StoreFuture<'a, Option<Option<Vec<u8>>>> {
        Box::pin(async move {
            match self.read(Read::Answer(token.to_owned())).await? {
                ReadAnswer::Answer(answer) => Ok(answer),
                other => Err(other.unexpected()),
            }
        })
    }

    fn forget_post<'a>(&'a self, token: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            match self.read(Read::ForgetPost(token.to_owned())).await? {
                ReadAnswer::Done => Ok(()),
                other => Err(other.unexpected()),
            }
        })
    }

    fn owner_live<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<bool>> {
        Box::pin(async move {
            match self.read(Read::OwnerLive(id.to_owned())).await? {
                ReadAnswer::OwnerLive(live) => Ok(live),
                other => Err(other.unexpected()),
            }
        })
    }

    fn posts(&self, limit: usize) -> StoreFuture<'_, Vec<(i64, String, Vec<u8>)>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        Box::pin(async move {
            match self.read(Read::Posts(limit)).await? {
                ReadAnswer::Posts(posts) => Ok(posts),
                other => Err(other.unexpected()),
            }
        })
    }

    fn answer_post<'a>(&'a self, n: i64, answer: &'a [u8]) -> StoreFuture<'a, ()> {
        let read = Read::AnswerPost(n, answer.to_vec());
        Box::pin(async move {
            match self.read(read).await? {
                ReadAnswer::Done => Ok(()),
                other => Err(other.unexpected()),
            }
        })
    }

    fn queue_limits<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        let call = schedules::ScheduleCall::one(&self.schema, schedules::Table::Queues, name);
        Box::pin(async move { self.schedule_call(call).await?.state() })
    }

    fn all_queue_limits(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        let call = schedules::ScheduleCall::all(&self.schema, schedules::Table::Queues);
        Box::pin(async move { self.schedule_call(call).await?.states() })
    }

    fn swap_queue_limits<'a>(
        &'a self,
        name: &'a str,
        old: Option<&'a [u8]>,
        new: &'a [u8],
    ) -> StoreFuture<'a, bool> {
        let call =
            schedules::ScheduleCall::swap(&self.schema, schedules::Table::Queues, name, old, new);
        Box::pin(async move {
            self.refuse_if_read_only()?;
            self.schedule_call(call).await?.swapped()
        })
    }

    fn schedules(&self) -> StoreFuture<'_, Vec<(String, Vec<u8>)>> {
        let call = schedules::ScheduleCall::all(&self.schema, schedules::Table::Schedules);
        Box::pin(async move { self.schedule_call(call).await?.states() })
    }

    fn schedule<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        let call = schedules::ScheduleCall::one(&self.schema, schedules::Table::Schedules, name);
        Box::pin(async move { self.schedule_call(call).await?.state() })
    }

    fn swap_schedule<'a>(
        &'a self,
        name: &'a str,
        old: Option<&'a [u8]>,
        new: &'a [u8],
    ) -> StoreFuture<'a, bool> {
        let call = schedules::ScheduleCall::swap(
            &self.schema,
            schedules::Table::Schedules,
            name,
            old,
            new,
        );
        Box::pin(async move {
            self.refuse_if_read_only()?;
            self.schedule_call(call).await?.swapped()
        })
    }

    fn remove_schedule<'a>(&'a self, name: &'a str, old: &'a [u8]) -> StoreFuture<'a, bool> {
        let call = schedules::ScheduleCall::remove(&self.schema, name, old);
        Box::pin(async move {
            self.refuse_if_read_only()?;
            self.schedule_call(call).await?.swapped()
        })
    }

    /// Flushes and ends the lease, so other workers claim this one's
    /// unfinished instances at once instead of after the lease time; the
    /// store's thread then ends.
    fn close(&self) {
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(thread) = thread else { return };
        if let Err(e) = self.call_blocking(|reply| Job::Release { reply }) {
            tracing::warn!(error = %e, "could not end the PostgreSQL lease; other workers claim this one's instances when it expires");
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

/// A token no other post has: this process, the time, and a count.
fn post_token() -> String {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{nanos:x}-{n}", std::process::id())
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
