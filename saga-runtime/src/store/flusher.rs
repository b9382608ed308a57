//! Group commit: many writers that each need their write on disk share one
//! `flush` at a time, so durable throughput grows with concurrency while
//! every writer still waits for its own durability.
//!
//! A dedicated thread does the flushing: sled 0.34's `flush_async` can
//! deadlock (sled issue 1308), so the blocking `flush` runs off the async
//! runtime. It wakes exactly the writers a flush covered, no others.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{broadcast, oneshot};

use super::Store;
use crate::error::{Error, Result};
use crate::history::Event;

/// How long an event that no writer waits on may wait for a flush.
const PUBLISH_DELAY: Duration = Duration::from_millis(2);

pub(crate) struct Flusher {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    state: Mutex<State>,
    /// Flushes done so far, for the benchmarks' flushes-per-step figure.
    flushes: std::sync::atomic::AtomicU64,
    wake: Condvar,
    events: broadcast::Sender<Event>,
}

/// What a flush tells the writer waiting on it.
type Outcome = std::result::Result<(), String>;

#[derive(Default)]
struct State {
    /// The highest ticket handed out; a flush that starts later covers it.
    requested: u64,
    /// The highest ticket known to be on disk.
    completed: u64,
    /// Writers waiting for their ticket, in ticket order.
    waiters: Vec<(u64, oneshot::Sender<Outcome>)>,
    /// Lifecycle events waiting for the flush that makes them durable.
    unpublished: Vec<(u64, Event)>,
    failure: Option<String>,
    stopping: bool,
    /// The flusher thread waits on the condvar (so a request must wake it).
    idle: bool,
}

enum Request {
    Flush(oneshot::Sender<Outcome>),
    Publish(Event),
}

impl Flusher {
    pub(crate) fn start(store: Arc<dyn Store>, events: broadcast::Sender<Event>) -> Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            flushes: std::sync::atomic::AtomicU64::new(0),
            wake: Condvar::new(),
            events,
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("saga-flusher".into())
            .spawn(move || worker.run(store.as_ref()))
            .map_err(|e| Error::Store(format!("could not start the flusher thread: {e}")))?;
        Ok(Flusher {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Waits until everything written before this call is on disk.
    pub(crate) async fn flush(&self) -> Result<()> {
        let (done, flushed) = oneshot::channel();
        if !self.shared.request(Request::Flush(done)) {
            return Err(Error::Closed);
        }
        match flushed.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(failure)) => Err(Error::Store(failure)),
            Err(_) => Err(Error::Closed),
        }
    }

    /// Sends `event` to subscribers once everything written before this
    /// call is on disk, without waiting for it.
    pub(crate) fn publish_when_durable(&self, event: Event) {
        self.shared.request(Request::Publish(event));
    }

    /// How many flushes the store did so far.
    pub(crate) fn flushes(&self) -> u64 {
        self.shared
            .flushes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Flushes what is pending and stops the thread.
    pub(crate) fn stop(&self) {
        self.shared.lock().stopping = true;
        self.shared.wake.notify_all();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(thread) = thread {
            // A panic in the flusher thread already reported itself.
            let _ = thread.join();
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues a request that a later flush will cover; `false` once stopped.
    fn request(&self, request: Request) -> bool {
        let mut state = self.lock();
        if state.stopping {
            return false;
        }
        state.requested += 1;
        let ticket = state.requested;
        // Wake the thread only when it would not look by itself: a waiting
        // writer, or the first publication since it went idle. Each wake is
        // a syscall and a context switch on the hot path.
        let wake =
            state.idle && (matches!(request, Request::Flush(_)) || ticket == state.completed + 1);
        match request {
            Request::Flush(done) => state.waiters.push((ticket, done)),
            Request::Publish(event) => state.unpublished.push((ticket, event)),
        }
        drop(state);
        if wake {
            self.wake.notify_one();
        }
        true
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
                drop(state);
                let result = store.flush();
                self.flushes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                state = self.lock();
                if let Err(e) = result {
                    tracing::error!(error = %e, "saga store flush failed");
                    state.failure = Some(e.to_string());
                }
                state.completed = target;
                let outcome: Outcome = match &state.failure {
                    None => Ok(()),
                    Some(failure) => Err(failure.clone()),
                };
                let covered = state.waiters.partition_point(|(t, _)| *t <= target);
                for (_, done) in state.waiters.drain(..covered) {
                    // A writer that stopped waiting is fine.
                    let _ = done.send(outcome.clone());
                }
                let ready = state.unpublished.partition_point(|(t, _)| *t <= target);
                let events: Vec<_> = state.unpublished.drain(..ready).collect();
                if outcome.is_ok() {
                    for (_, event) in events {
                        // No subscriber is fine.
                        let _ = self.events.send(event);
                    }
                }
                continue;
            }
            if state.stopping {
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
