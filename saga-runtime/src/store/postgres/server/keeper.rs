//! The lease's keeper: renews this worker's lease, on a connection of its
//! own, while the server is held up in one piece of work.
//!
//! The server renews the lease with every flush and with a heartbeat
//! between jobs. A job the database holds up (a write waiting on a table
//! lock, a slow statement) holds up the heartbeat with it, and a lease
//! that lapses meanwhile fences the worker for good, though nothing was
//! wrong with it. So while the server has been busy for a sixth of the
//! lease, the keeper renews it instead: the `workers` table is not the
//! one a migration or a `VACUUM FULL` locks.
//!
//! It keeps a lease only for a server that is alive: once the server has
//! been in one piece of work for longer than the store timeout and the
//! lease together (every call of its gives up within the timeout), the
//! keeper stops renewing, so a stuck worker's instances go to others.
//! Like every renewal, its own only extends a lease that has not expired
//! (see `lease::keep_sql`), so it never brings a fenced worker back, and
//! racing the server's release or another renewal is harmless. It commits
//! asynchronously: a renewal lost in a crash of the database only makes
//! the lease end sooner, which the fencing of every write covers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::super::lease;
use super::connect::Target;

/// When the server's current piece of work began, if it is busy.
struct Busy {
    base: Instant,
    /// Milliseconds since `base`, plus one; 0 while idle.
    since: AtomicU64,
}

impl Busy {
    /// How long the server has been busy; `None` while idle.
    fn for_how_long(&self) -> Option<Duration> {
        match self.since.load(Ordering::Acquire) {
            0 => None,
            since => {
                let began = Duration::from_millis(since - 1);
                Some(self.base.elapsed().saturating_sub(began))
            }
        }
    }
}

/// The keeper's task; dropping it stops the task.
pub(super) struct Keeper {
    busy: Arc<Busy>,
    task: JoinHandle<()>,
}

impl Keeper {
    /// Starts keeping `worker`'s lease of `lease` on `target`, for a
    /// server whose calls give up within `timeout`.
    pub(super) fn spawn(
        target: Arc<Target>,
        worker: Arc<str>,
        lease: Duration,
        timeout: Duration,
    ) -> Keeper {
        let busy = Arc::new(Busy {
            base: Instant::now(),
            since: AtomicU64::new(0),
        });
        let task = tokio::spawn(keep(target, worker, lease, timeout, busy.clone()));
        Keeper { busy, task }
    }

    /// The server begins a piece of work (a job, a flush, a heartbeat).
    pub(super) fn busy(&self) {
        let now = u64::try_from(self.busy.base.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.busy.since.store(now + 1, Ordering::Release);
    }

    /// The server waits for work: its own heartbeat keeps the lease.
    pub(super) fn idle(&self) {
        self.busy.since.store(0, Ordering::Release);
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn keep(
    target: Arc<Target>,
    worker: Arc<str>,
    lease: Duration,
    timeout: Duration,
    busy: Arc<Busy>,
) {
    // Looked at twice as often as the heartbeat ticks: a job that began
    // just before the heartbeat was due is covered within a third of the
    // lease, well before it runs out.
    let every = lease / 6;
    let alive_for = timeout + lease;
    let sql = lease::keep_sql(&target.schema, lease);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut client = None;
    loop {
        tick.tick().await;
        match busy.for_how_long() {
            Some(held) if held >= every && held < alive_for => {}
            _ => continue,
        }
        if client
            .as_ref()
            .is_none_or(|c: &tokio_postgres::Client| c.is_closed())
        {
            client = connect(&target).await;
        }
        let Some(c) = &client else { continue };
        match tokio::time::timeout(lease / 3, c.execute(&sql, &[&&*worker])).await {
            Ok(Ok(1)) => tracing::debug!(
                worker = %worker,
                "renewed the lease while the server was held up"
            ),
            Ok(Ok(_)) => {
                // Expired: the server finds itself fenced at its next write.
                tracing::debug!(worker = %worker, "the lease ran out; the keeper stops");
                return;
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "the lease's keeper could not renew it");
                client = None;
            }
            Err(_) => {
                tracing::debug!("the lease's keeper gave up on a renewal");
                client = None;
            }
        }
    }
}

/// The keeper's connection, committing asynchronously.
async fn connect(target: &Target) -> Option<tokio_postgres::Client> {
    let (client, connection) = match target.open().await {
        Ok(opened) => opened,
        Err(e) => {
            tracing::debug!(error = %e, "the lease's keeper could not connect");
            return None;
        }
    };
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "the lease keeper's connection ended");
        }
    });
    match client.batch_execute("SET synchronous_commit TO off").await {
        Ok(()) => Some(client),
        Err(e) => {
            tracing::debug!(error = %e, "the lease's keeper could not set up its connection");
            None
        }
    }
}
