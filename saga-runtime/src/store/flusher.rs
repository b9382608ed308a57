//! Group commit: many writers that each need their write on disk share one
//! `flush` at a time, so durable throughput grows with concurrency while
//! every writer still waits for its own durability.
//!
//! Every write takes a *ticket* (a number that grows by one per write) once
//! it is in the store. A flush that starts after a ticket was handed out
//! covers it, and wakes exactly the writers it covered.
//!
//! A dedicated thread flushes, one flush at a time, each covering every
//! writer waiting when it starts. sled 0.34's `flush_async` can deadlock
//! (sled issue 1308), so the blocking `flush` runs off the async runtime.
//!
//! A lone writer could flush inline (`block_in_place`) and save the two
//! thread hops; that was tried and left out: a flush that hangs (a full or
//! dead disk) would then hold the caller's thread, where no timeout can
//! fire. Waiting on the thread, every waiter gets an answer in bounded time
//! ([`Flusher::durable`]).
//!
//! Lifecycle events wait for the flush that makes them durable; when no
//! writer needs one, the thread flushes for them after a short delay, so
//! one flush serves them and the writer that usually comes right after.
//!
//! A store that flushes in memory ([`Store::flushes_inline`], the
//! simulated one of `testing::sim`) gets no thread: a writer flushes it
//! on its own task, and events no writer waits for are flushed by a task
//! of the runtime once the writer yields. A thread would let the OS
//! decide when a flush ends, and a simulated run would not replay.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{broadcast, oneshot};

use super::Store;
use crate::error::{Error, Result};
use crate::model::history::Event;

/// How long an event that no writer waits on may wait for a flush.
const PUBLISH_DELAY: Duration = Duration::from_millis(2);

pub(crate) struct Flusher {
    shared: Arc<FlushQueue>,
    /// How long a writer waits for its flush before it is told the store
    /// does not answer.
    timeout: Duration,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// A store flushed on the caller's task, without a thread.
    inline: Option<Arc<dyn Store>>,
}

struct FlushQueue {
    state: Mutex<Tickets>,
    /// Flushes done so far, for the benchmarks' flushes-per-step figure.
    flushes: AtomicU64,
    wake: Condvar,
    events: broadcast::Sender<Event>,
}

/// What a flush tells the writer waiting on it.
type Outcome = std::result::Result<(), Failed>;

/// A failed flush, as every waiter gets it: a worker fenced off its
/// store stays [`Error::Fenced`], anything else is [`Error::Store`].
#[derive(Clone, Debug)]
struct Failed {
    fenced: bool,
    message: String,
}

impl Failed {
    fn of(error: &Error) -> Failed {
        match error {
            Error::Fenced { detail } => Failed {
                fenced: true,
                message: detail.clone(),
            },
            // Its message as it was: `Error::Store` says "store error" once.
            Error::Store(message) => Failed {
                fenced: false,
                message: message.clone(),
            },
            other => Failed {
                fenced: false,
                message: other.to_string(),
            },
        }
    }

    fn error(self) -> Error {
        if self.fenced {
            Error::Fenced {
                detail: self.message,
            }
        } else {
            Error::Store(self.message)
        }
    }
}

#[derive(Default)]
struct Tickets {
    /// The highest ticket handed out; a flush that starts later covers it.
    requested: u64,
    /// The highest ticket known to be on disk.
    completed: u64,
    /// Writers waiting for their ticket, in ticket order.
    waiters: Vec<(u64, oneshot::Sender<Outcome>)>,
    /// Lifecycle events waiting for the flush that makes them durable.
    unpublished: Vec<(u64, Event)>,
    failure: Option<Failed>,
    stopping: bool,
    /// The flusher thread is done.
    exited: bool,
    /// When the flush under way began.
    flushing_since: Option<std::time::Instant>,
    /// The flusher thread waits on the condvar (so a request must wake it).
    idle: bool,
    /// An inline flusher's task that flushes for events is on its way.
    publishing: bool,
}

impl Tickets {
    fn outcome(&self) -> Outcome {
        match &self.failure {
            None => Ok(()),
            Some(failure) => Err(failure.clone()),
        }
    }
}

impl Flusher {
    pub(crate) fn start(
        store: Arc<dyn Store>,
        events: broadcast::Sender<Event>,
        timeout: Duration,
    ) -> Result<Self> {
        let shared = Arc::new(FlushQueue {
            state: Mutex::new(Tickets::default()),
            flushes: AtomicU64::new(0),
            wake: Condvar::new(),
            events,
        });
        if store.flushes_inline() {
            return Ok(Flusher {
                shared,
                timeout,
                thread: Mutex::new(None),
                inline: Some(store),
            });
        }
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("saga-flusher".into())
            .spawn(move || worker.run(store.as_ref()))
            .map_err(|e| Error::Store(format!("could not start the flusher thread: {e}")))?;
        Ok(Flusher {
            shared,
            timeout,
            thread: Mutex::new(Some(thread)),
            inline: None,
        })
    }

    /// Takes the ticket of a write that is in the store now; publishes
    /// `events` once a flush covers it. `None` once stopped.
    pub(crate) fn written(&self, events: Vec<Event>) -> Option<u64> {
        let mut state = self.shared.lock();
        if state.stopping {
            return None;
        }
        state.requested += 1;
        let ticket = state.requested;
        // The thread looks by itself once it is busy; an idle one is woken
        // for the first publication since it went idle (not per event: each
        // wake is a syscall on the hot path).
        let wake = state.idle && !events.is_empty() && ticket == state.completed + 1;
        // Inline, every write is flushed soon, as the thread flushes one
        // that no writer waits on after `PUBLISH_DELAY`: a write without
        // events (a compensation's retry time) is not left pending, which
        // would keep `Engine::idle` from ever returning.
        let publish = self.inline.is_some() && !state.publishing;
        state.publishing |= publish;
        state
            .unpublished
            .extend(events.into_iter().map(|event| (ticket, event)));
        drop(state);
        if wake {
            self.shared.wake.notify_one();
        }
        if publish {
            self.publish_soon();
        }
        Some(ticket)
    }

    /// An inline flusher: flushes what was written so far once the writer
    /// yields (so one flush serves the writes that follow at once).
    fn publish_soon(&self) {
        let (Some(store), Ok(runtime)) = (&self.inline, tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let (store, shared) = (store.clone(), self.shared.clone());
        runtime.spawn(async move {
            tokio::task::yield_now().await;
            let target = {
                let mut state = shared.lock();
                state.publishing = false;
                state.requested
            };
            if shared.lock().completed < target {
                shared.finish(target, store.flush());
            }
        });
    }

    /// An inline flusher: flushes on the caller's task.
    fn flush_inline(&self, store: &dyn Store, ticket: u64) -> Result<()> {
        let target = {
            let state = self.shared.lock();
            if state.completed >= ticket {
                return state.outcome().map_err(Failed::error);
            }
            if state.stopping {
                return Err(Error::Closed);
            }
            state.requested
        };
        self.shared.finish(target, store.flush());
        self.shared.lock().outcome().map_err(Failed::error)
    }

    /// Waits until the write of `ticket` is durable, at most the store
    /// timeout.
    pub(crate) async fn durable(&self, ticket: u64) -> Result<()> {
        if let Some(store) = &self.inline {
            // Other tasks run (and write) before the flush, as they do
            // while a real one takes its time: a crash can land between a
            // write and the flush that makes it durable.
            tokio::task::yield_now().await;
            return self.flush_inline(store.as_ref(), ticket);
        }
        let waiting = {
            let mut state = self.shared.lock();
            if state.completed >= ticket {
                return state.outcome().map_err(Failed::error);
            }
            if state.stopping {
                return Err(Error::Closed);
            }
            // A store that has not finished a flush for the whole timeout
            // does not answer: say so now, rather than make every caller
            // wait out the timeout again.
            if let Some(since) = state.flushing_since
                && since.elapsed() >= self.timeout
            {
                return Err(self.not_answering());
            }
            let (done, flushed) = oneshot::channel();
            state.waiters.push((ticket, done));
            let wake = state.idle;
            drop(state);
            if wake {
                self.shared.wake.notify_one();
            }
            flushed
        };
        match tokio::time::timeout(self.timeout, waiting).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(failure))) => Err(failure.error()),
            Ok(Err(_)) => Err(Error::Closed),
            // Real time, not the engine's clock: it is the disk that hangs.
            Err(_) => Err(self.not_answering()),
        }
    }

    fn not_answering(&self) -> Error {
        Error::Store(format!(
            "the store did not finish a flush within {:?} (a full or unresponsive disk?); \
             nothing stored is lost, and unfinished instances resume when the store is opened again",
            self.timeout
        ))
    }

    /// The latest ticket handed out: every write whose ticket was taken
    /// before this call is covered by it.
    pub(crate) fn latest_ticket(&self) -> u64 {
        self.shared.lock().requested
    }

    /// Waits until everything written before this call is durable.
    pub(crate) async fn flush(&self) -> Result<()> {
        let ticket = self.written(Vec::new()).ok_or(Error::Closed)?;
        self.durable(ticket).await
    }

    /// Whether every write is flushed and its waiters told: the flusher
    /// has nothing to do.
    pub(crate) fn is_quiet(&self) -> bool {
        let state = self.shared.lock();
        state.completed >= state.requested && state.flushing_since.is_none()
    }

    /// How many flushes the store did so far.
    pub(crate) fn flushes(&self) -> u64 {
        self.shared.flushes.load(Ordering::Relaxed)
    }

    /// Flushes what is pending and stops the thread.
    pub(crate) fn stop(&self) {
        if let Some(store) = &self.inline {
            let target = self.shared.lock().requested;
            self.flush_inline(store.as_ref(), target).ok();
            self.shared.lock().stopping = true;
            return;
        }
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        // Stopped already.
        let Some(thread) = thread else { return };
        let mut state = self.shared.lock();
        state.stopping = true;
        self.shared.wake.notify_all();
        // Its last flush may hang on a dead disk: wait for it at most the
        // store timeout, then let the thread go rather than hang the caller
        // (a `Drop`).
        let deadline = std::time::Instant::now() + self.timeout;
        while !state.exited {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                tracing::error!(timeout = ?self.timeout, "the store's last flush did not finish; not waiting for it");
                return;
            }
            state = self
                .shared
                .wake
                .wait_timeout(state, left)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        drop(state);
        // A panic in the flusher thread already reported itself.
        let _ = thread.join();
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.stop();
    }
}

impl FlushQueue {
    fn lock(&self) -> MutexGuard<'_, Tickets> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a flush that covered every ticket up to `target`: wakes the
    /// writers it covered and publishes its events.
    fn finish(&self, target: u64, result: Result<()>) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        let mut state = self.lock();
        let took = state.flushing_since.map(|since| since.elapsed());
        if let Err(e) = result {
            tracing::error!(error = %e, "saga store flush failed");
            state.failure = Some(Failed::of(&e));
        }
        state.completed = state.completed.max(target);
        state.flushing_since = None;
        let outcome = state.outcome();
        let covered = state.waiters.partition_point(|(t, _)| *t <= target);
        if let Some(took) = took {
            crate::metrics::flushed(took, covered);
        }
        for (_, done) in state.waiters.drain(..covered) {
            // A writer that stopped waiting is fine.
            let _ = done.send(outcome.clone());
        }
        let ready = state.unpublished.partition_point(|(t, _)| *t <= target);
        let events: Vec<_> = state.unpublished.drain(..ready).collect();
        // Sent before the lock goes (a send only queues): once `is_quiet`
        // sees the flush done, its subscribers are woken already.
        if outcome.is_ok() {
            for (_, event) in events {
                // No subscriber is fine.
                let _ = self.events.send(event);
            }
        }
    }

    fn run(&self, store: &dyn Store) {
        let mut state = self.lock();
        loop {
            if state.requested > state.completed {
                if state.waiters.is_empty() && !state.stopping {
                    // Only publications wait: give a writer that needs its
                    // own flush a moment to ask, so one flush serves both.
                    state.idle = true;
                    state = self
                        .wake
                        .wait_timeout(state, PUBLISH_DELAY)
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .0;
                    state.idle = false;
                }
                let target = state.requested;
                state.flushing_since = Some(std::time::Instant::now());
                drop(state);
                let result = store.flush();
                self.finish(target, result);
                state = self.lock();
                continue;
            }
            if state.stopping {
                state.exited = true;
                self.wake.notify_all();
                return;
            }
            state.idle = true;
            state = self
                .wake
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            state.idle = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Failed;
    use crate::error::Error;

    #[test]
    fn a_failed_flush_tells_each_waiter_the_error_once() {
        let store = Failed::of(&Error::Store("disk full".into())).error();
        assert_eq!(store.to_string(), "store error: disk full");
        let fenced = Failed::of(&Error::Fenced {
            detail: "lease ran out".into(),
        })
        .error();
        assert!(matches!(&fenced, Error::Fenced { detail } if detail == "lease ran out"));
        let other = Failed::of(&Error::Closed).error();
        assert_eq!(other.to_string(), format!("store error: {}", Error::Closed));
    }
}
