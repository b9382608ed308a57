//! The write connections. Each instance's writes go to one of them, the
//! same one every time (by a hash of its id), in call order; the writes
//! of instances on different connections run at once, so one worker keeps
//! more than one server process busy.
//!
//! Order across instances is only promised through a flush, and a flush
//! covers every connection: it begins once each has applied what was
//! queued before it, and its synchronous commit makes all of it durable
//! (every connection's commits share one WAL). It commits on a connection
//! of its own while the writers go on (`server::flushing`); done the slow
//! way (`Server::flush`), it renews the lease on the first writer, then
//! checks that every other one with writes not yet durable lived through
//! it: a server restart in between would have lost what that connection
//! applied, and such a connection is opened again (applying its writes
//! again) and the flush repeated.

use std::collections::HashSet;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::fault::{PgFailure, Reconnect, roll_back};
use super::lease;
use super::server::apply::{apply, apply_many};
use super::server::connect::{Conn, Target};
use super::server::jobs::Op;
use crate::error::{Error, Result};
use crate::lock::lock;

/// How many write connections a worker keeps. Two: on a 2-core database
/// host a second one runs while the first waits for its client; more
/// contend for the same index pages.
pub(super) const WRITERS: usize = 2;

/// How often a write connection plans its statements again. They are
/// prepared once and then run with a generic plan, which PostgreSQL keeps
/// until the table is analyzed again: one planned while the table was
/// small (a new schema, a burst of starts before autovacuum's next look)
/// scans `instances` whole for each batch of appends (`id = ANY($1)`), so
/// each batch costs as much as the table is large. Planned again, they
/// find their rows by index once the table has grown.
const REPLAN_EVERY: Duration = Duration::from_secs(2);

/// A write, and whom to answer (no one: the caller did not wait, and a
/// failure is told by the next flush).
pub(super) type Write = (Op, Option<oneshot::Sender<Result<bool>>>);

/// One write connection, and the writes it applied since the last flush
/// that succeeded, in order (to apply again on a new connection: the
/// server may have restarted and lost them).
#[derive(Default)]
pub(super) struct Writer {
    pub(super) conn: Option<Arc<Conn>>,
    pub(super) unflushed: Vec<Op>,
    /// How many times its connection was made again: a flush under way
    /// covers only what the connection it began with applied.
    pub(super) generation: u64,
    /// When its statements were last planned afresh (see [`REPLAN_EVERY`]).
    planned_at: Option<Instant>,
}

/// What the writes of one connection share.
pub(super) struct Context<'a> {
    pub(super) target: &'a Target,
    pub(super) worker: &'a Arc<str>,
    pub(super) owned: &'a Mutex<HashSet<String>>,
    pub(super) timeout: Duration,
}

/// How a run of writes on one connection went, for the worker.
#[derive(Default)]
pub(super) struct Ran {
    /// A write found the lease gone.
    pub(super) fenced: bool,
    /// A write nobody waited for failed.
    pub(super) failed: Option<String>,
}

/// The connection that takes the writes of instance `id`.
pub(super) fn of(id: &str) -> usize {
    let mut hasher = std::hash::DefaultHasher::new();
    id.hash(&mut hasher);
    (hasher.finish() % WRITERS as u64) as usize
}

/// The instance a write is to.
pub(super) fn instance(op: &Op) -> &str {
    match op {
        Op::Create { id, .. }
        | Op::Append { id, .. }
        | Op::AppendIndexed { id, .. }
        | Op::PutIndex { id, .. }
        | Op::Remove { id }
        | Op::RemoveBefore { id, .. }
        | Op::Disown { id } => id,
    }
}

impl Writer {
    /// A writer on `conn`, just opened.
    pub(super) fn new(conn: Conn) -> Writer {
        Writer {
            conn: Some(Arc::new(conn)),
            planned_at: Some(Instant::now()),
            ..Writer::default()
        }
    }

    /// Runs `f` on this connection; on a broken one, connects again,
    /// applies the unflushed writes again, and retries, until `deadline`.
    /// Answers the failure that ended it: `Fenced` at once.
    pub(super) async fn with<T, F, Fut>(
        &mut self,
        target: &Target,
        worker: &Arc<str>,
        deadline: Instant,
        f: F,
    ) -> std::result::Result<T, PgFailure>
    where
        F: Fn(Arc<Conn>, Arc<str>) -> Fut,
        Fut: Future<Output = std::result::Result<T, PgFailure>>,
    {
        let mut backoff = Reconnect::until(deadline);
        loop {
            let failure = match self.conn.as_ref() {
                Some(conn) if !conn.client.is_closed() => {
                    match f(conn.clone(), worker.clone()).await {
                        Ok(value) => return Ok(value),
                        Err(failure) => failure,
                    }
                }
                _ => match self.reconnect(target, worker).await {
                    Ok(()) => continue,
                    Err(failure) => failure,
                },
            };
            match &failure {
                PgFailure::Fenced => return Err(failure),
                PgFailure::Other(_) => {}
                PgFailure::Connection(detail) => {
                    self.conn = None;
                    tracing::warn!(error = %detail, "lost the PostgreSQL connection; connecting again");
                }
                PgFailure::Retry(detail) => {
                    if let Some(conn) = &self.conn
                        && !roll_back(&conn.client).await
                    {
                        self.conn = None;
                    }
                    tracing::warn!(error = %detail, "a PostgreSQL statement was undone; trying it again");
                }
            }
            if matches!(failure, PgFailure::Other(_)) || !backoff.wait().await {
                return Err(failure);
            }
        }
    }

    /// A new connection, with every unflushed write applied again.
    async fn reconnect(
        &mut self,
        target: &Target,
        worker: &Arc<str>,
    ) -> std::result::Result<(), PgFailure> {
        crate::metrics::reconnected();
        let conn = Arc::new(target.connect_writer().await?);
        self.generation += 1;
        self.planned_at = Some(Instant::now());
        for op in &self.unflushed {
            apply(conn.clone(), worker.clone(), op.clone()).await?;
        }
        self.conn = Some(conn);
        Ok(())
    }

    /// Applies `writes` in order: appends nobody waits for, one after
    /// another, as one statement; each other write on its own.
    pub(super) async fn run(
        &mut self,
        cx: &Context<'_>,
        fenced: bool,
        failed: Option<String>,
        writes: Vec<Write>,
    ) -> Ran {
        let mut ran = Ran { fenced, failed };
        self.replan_if_due().await;
        let mut appends = Vec::new();
        for (op, reply) in writes {
            if matches!(op, Op::Append { .. }) && reply.is_none() {
                appends.push(op);
                continue;
            }
            self.append_unwaited(cx, &mut ran, std::mem::take(&mut appends))
                .await;
            let result = self.write(cx, &mut ran, op).await;
            match reply {
                Some(reply) => {
                    let _ = reply.send(result);
                }
                None => note_unwaited(&mut ran, result.map(drop)),
            }
        }
        self.append_unwaited(cx, &mut ran, appends).await;
        ran
    }

    async fn append_unwaited(&mut self, cx: &Context<'_>, ran: &mut Ran, ops: Vec<Op>) {
        if ops.is_empty() || ran.failed.is_some() || ran.fenced {
            return;
        }
        let deadline = Instant::now() + cx.timeout;
        let result = self
            .with(cx.target, cx.worker, deadline, |conn, worker| {
                apply_many(conn, worker, ops.clone())
            })
            .await;
        if result.is_ok() {
            self.unflushed.extend(ops);
        }
        let result = settled(cx, ran, result);
        note_unwaited(ran, result);
    }

    async fn write(&mut self, cx: &Context<'_>, ran: &mut Ran, op: Op) -> Result<bool> {
        if let Some(failed) = &ran.failed {
            return Err(Error::Store(failed.clone()));
        }
        if ran.fenced {
            return Err(lease::fenced(&cx.target.schema));
        }
        let deadline = Instant::now() + cx.timeout;
        let done = self
            .with(cx.target, cx.worker, deadline, |conn, worker| {
                apply(conn, worker, op.clone())
            })
            .await;
        let done = settled(cx, ran, done)?;
        match &op {
            // One created waiting in a queue is its creator's until the
            // creator wrote what it writes with the creation (its tags)
            // and let go of it (`Store::disown`): then the worker that
            // takes it gets it.
            Op::Create { id, .. } if done => {
                lock(cx.owned).insert(id.clone());
            }
            Op::Remove { id } => {
                lock(cx.owned).remove(id);
            }
            _ => {}
        }
        self.unflushed.push(op);
        Ok(done)
    }

    /// Drops the plans of its statements, if they are older than
    /// [`REPLAN_EVERY`]: their next runs plan them again. A failure is
    /// the next statement's to meet.
    async fn replan_if_due(&mut self) {
        let due = self
            .planned_at
            .is_none_or(|at| at.elapsed() >= REPLAN_EVERY);
        if let (true, Some(conn)) = (due, &self.conn) {
            self.planned_at = Some(Instant::now());
            if let Err(e) = conn.client.batch_execute("DISCARD PLANS").await {
                tracing::debug!(error = %e, "could not drop the plans of a write connection");
            }
        }
    }

    /// Whether this connection is still the one that applied its unflushed
    /// writes (a round trip on it, without connecting again).
    pub(super) async fn lived(&self) -> bool {
        match &self.conn {
            Some(conn) => conn.client.simple_query("").await.is_ok(),
            None => false,
        }
    }
}

/// A write's failure as the caller sees it; a lost lease is noted.
fn settled<T>(
    cx: &Context<'_>,
    ran: &mut Ran,
    result: std::result::Result<T, PgFailure>,
) -> Result<T> {
    result.map_err(|failure| {
        if matches!(failure, PgFailure::Fenced) {
            ran.fenced = true;
        }
        failure.into_error(&cx.target.shown, || lease::fenced(&cx.target.schema))
    })
}

fn note_unwaited(ran: &mut Ran, result: Result<()>) {
    if let Err(e) = result
        && ran.failed.is_none()
        && !ran.fenced
    {
        tracing::error!(error = %e, "a PostgreSQL write failed; the next flush reports it");
        ran.failed = Some(e.to_string());
    }
}

/// Runs `futures` at once; their answers, in order.
pub(super) async fn all<T>(futures: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>) -> Vec<T> {
    let mut futures: Vec<_> = futures.into_iter().map(Some).collect();
    let mut answers: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, answer) in futures.iter_mut().zip(answers.iter_mut()) {
            if let Some(f) = future {
                match f.as_mut().poll(cx) {
                    Poll::Ready(value) => {
                        *answer = Some(value);
                        *future = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    answers.into_iter().flatten().collect()
}
