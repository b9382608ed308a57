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
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;
use tokio_postgres::{Config, SimpleQueryMessage};

use super::fault::{self, PgFailure, Reconnect, roll_back};
use super::ssl_options::{self};
use super::writers::{self, Writer};

pub(super) mod apply;
pub(super) mod connect;
mod flushing;
pub(super) mod jobs;
mod keeper;
mod query;

use self::connect::*;
pub(super) use self::jobs::{Job, Op, Read, ReadAnswer, Row, Unordered};
use self::query::*;
use super::{PgOptions, lease, schema, tls};

/// The most jobs taken from the queue at once.
const MAX_BATCH: usize = 1024;
use crate::error::{Error, Result};
use crate::lock::lock;

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
            let mut backoff = Reconnect::until(deadline);
            loop {
                let failure =
                    match Server::join(target.clone(), options.clone(), owned.clone()).await {
                        Ok(server) => return Ok(server),
                        Err(failure) => failure,
                    };
                // Undone (a cancelled migration, a deadlock): again.
                if matches!(failure, PgFailure::Retry(_)) && backoff.wait().await {
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
    ) -> std::result::Result<Server, PgFailure> {
        let unreachable = |failure| PgFailure::Other(fault::unreachable(failure, &target.shown));
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
        Fut: Future<Output = std::result::Result<T, PgFailure>>,
    {
        self.with_writer_of(0, deadline, f).await
    }

    /// Runs `f` on write connection `i`; on a broken connection, connects
    /// again, applies its unflushed writes again, and retries, until
    /// `deadline`.
    async fn with_writer_of<T, F, Fut>(&mut self, i: usize, deadline: Instant, f: F) -> Result<T>
    where
        F: Fn(Arc<Conn>, Arc<str>) -> Fut,
        Fut: Future<Output = std::result::Result<T, PgFailure>>,
    {
        if self.fenced {
            return Err(lease::fenced(&self.target.schema));
        }
        let answer = self.writers[i]
            .with(&self.target, &self.worker, deadline, f)
            .await;
        match answer {
            Ok(value) => Ok(value),
            Err(PgFailure::Fenced) => {
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

/// A flush: renews the lease in a transaction committed synchronously.
async fn renew(conn: Arc<Conn>, sql: String) -> std::result::Result<(), PgFailure> {
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
        Some(_) => Err(PgFailure::Fenced),
        None => Err(PgFailure::Other(Error::Store(format!(
            "PostgreSQL answered a flush with {} results, not 4",
            counts.len()
        )))),
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
