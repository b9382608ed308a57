//! The lifecycle event stream.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::journal::Tail;
use crate::model::history::Event;
use crate::workflow::engine_core::Core;

/// Lifecycle events of every instance, each sent after it is durable: a
/// subscriber that saw `StepCompleted` knows that step will never run again.
///
/// On a store shared by workers (PostgreSQL), a subscription sees the
/// events of every worker's instances: it follows the journals in the
/// database, in an order that a late commit never breaks, so it loses and
/// repeats nothing, across lost connections too. It looks twice per poll
/// interval (`EngineBuilder::poll_interval`, every 100 ms by default), and
/// at once when an instance ends; it may begin with events from moments
/// before it was made. It sees every record written after
/// `subscribe()` returns; on a current-thread Tokio runtime, where
/// `subscribe()` cannot wait for the database off the runtime's thread,
/// it begins moments after instead (once the first `recv` learns where).
pub struct Subscription {
    source: Source,
}

enum Source {
    /// The events this engine writes, told as they become durable.
    Local(broadcast::Receiver<Event>),
    /// Waiting for the store to say where a tail of its journals begins.
    Starting {
        core: Weak<Core>,
        start: tokio::sync::oneshot::Receiver<crate::Result<Option<Tail>>>,
    },
    /// The journals of a store that other processes write too.
    Shared {
        core: Weak<Core>,
        tail: Box<Tail>,
        ready: VecDeque<Event>,
        told: Option<tokio::sync::watch::Receiver<u64>>,
    },
}

/// Why [`Subscription::recv`] returned no event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// The subscriber fell behind and this many events were dropped for it;
    /// read `history()` of the instances it cares about to catch up.
    #[error("the subscriber fell behind; {0} events were skipped")]
    Lagged(u64),
    /// The engine was closed.
    #[error("the engine was closed")]
    Closed,
}

impl Subscription {
    pub(crate) fn new(core: &Arc<Core>) -> Self {
        // Asked now (a store of one process answers at once), answered in
        // a task otherwise: the first `recv` waits for it.
        let (answer, start) = tokio::sync::oneshot::channel();
        let asking = core.clone();
        let ask = async move {
            let _ = answer.send(asking.journal.tail().await);
        };
        if let Some(task) = crate::store::now_or_spawn(&core.runtime, &core.quiet, ask) {
            core.track(task);
        }
        let mut start = start;
        if let Ok(started) = start.try_recv() {
            return Subscription {
                source: Source::started(core, started),
            };
        }
        // A server answers later. On a runtime of several worker threads,
        // this call waits for it off the worker threads (`block_in_place`
        // hands this thread's tasks to another), so the subscription sees
        // every record written after it returns; on a current-thread
        // runtime it cannot wait, and begins when the first `recv` learns
        // where (moments after it was made).
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi_thread {
            let started = tokio::task::block_in_place(|| core.runtime.block_on(start))
                .unwrap_or(Err(crate::Error::Closed));
            return Subscription {
                source: Source::started(core, started),
            };
        }
        Subscription {
            source: Source::Starting {
                core: Arc::downgrade(core),
                start,
            },
        }
    }

    /// The next event.
    ///
    /// # Cancel safety
    ///
    /// dropping the future loses no event: the next call receives it.
    pub async fn recv(&mut self) -> Result<Event, RecvError> {
        if let Source::Starting { core, start } = &mut self.source {
            let started = start.await.unwrap_or(Err(crate::Error::Closed));
            let Some(core) = core.upgrade().filter(|c| !c.is_closed()) else {
                return Err(RecvError::Closed);
            };
            self.source = Source::started(&core, started);
        }
        match &mut self.source {
            Source::Starting { .. } => Err(RecvError::Closed),
            Source::Local(receiver) => receiver.recv().await.map_err(|e| match e {
                broadcast::error::RecvError::Lagged(n) => RecvError::Lagged(n),
                broadcast::error::RecvError::Closed => RecvError::Closed,
            }),
            Source::Shared {
                core,
                tail,
                ready,
                told,
            } => loop {
                if let Some(event) = ready.pop_front() {
                    return Ok(event);
                }
                // Read and folded before any await: a dropped call leaves
                // what it read in `ready`.
                {
                    let Some(core) = core.upgrade().filter(|c| !c.is_closed()) else {
                        return Err(RecvError::Closed);
                    };
                    match core.journal.follow(tail, ready).await {
                        Ok(true) => continue,
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "could not follow the journals; trying again");
                        }
                    }
                }
                // Twice per poll interval: records are not told of.
                let every = core.upgrade().map_or(Duration::ZERO, |c| c.poll / 2);
                tokio::select! {
                    // Either wakes the same read.
                    // Biased: a simulated run picks the same on every replay of its seed.
                    biased;
                    () = tokio::time::sleep(every) => {}
                    Some(()) = crate::journal::told_of_change(told) => {}
                }
            },
        }
    }
}

impl Source {
    /// What a subscription reads once the store said where a tail begins.
    fn started(core: &Arc<Core>, started: crate::Result<Option<Tail>>) -> Source {
        match started {
            Ok(Some(tail)) => Source::Shared {
                core: Arc::downgrade(core),
                tail: Box::new(tail),
                ready: VecDeque::new(),
                told: core.journal.changes(crate::store::Told::Stops),
            },
            Ok(None) => Source::Local(core.journal.subscribe_events()),
            Err(e) => {
                // Answers `Closed` at once rather than never.
                tracing::error!(error = %e, "could not begin following the journals; this subscription is closed");
                let (sender, receiver) = broadcast::channel(1);
                drop(sender);
                Source::Local(receiver)
            }
        }
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").finish_non_exhaustive()
    }
}
