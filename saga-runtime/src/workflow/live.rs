//! The in-memory side of an instance that a driver is running: how users'
//! requests (pause, terminate, restart, events) reach the running code.
//!
//! Control flow is not failure: these signals stop the workflow future
//! from outside; they are never errors the workflow code could catch.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

use crate::error::failure::Failure;

/// Why a driver stops running the workflow future before it finished.
#[derive(Debug)]
pub(crate) enum Interrupt {
    /// Paused at a step boundary.
    Suspend,
    /// A user ended the instance.
    Terminate { rollback: bool },
    /// A user restarts the instance; the restarter rewrites its records.
    Stop,
    /// Its queue's slot was given back while it waited, and the wait is
    /// over: it waits in its queue again, and goes on once it takes one.
    Requeue,
    /// The workflow code no longer matches the instance's history
    /// (non-determinism, a stored value that no longer decodes): the
    /// instance is parked `Blocked`.
    Fail(Failure),
}

pub(crate) struct Live {
    interrupt: Mutex<Option<Interrupt>>,
    interrupted: Notify,
    pause_requested: AtomicBool,
    /// Woken when an event is sent to the instance.
    pub(crate) event_sent: Notify,
    /// Set by every send that told this driver: one that came as the
    /// driver let go is looked for again (see `runner`).
    event_came: AtomicBool,
    /// Set when a child of the instance ended: the driver that let go as
    /// it was told runs the instance again (see `runner`).
    child_ended: AtomicBool,
    /// Set once the driver let go. A flag and a `Notify` rather than a
    /// `watch` channel: every waiting instance holds one, and a watch
    /// channel is ten times the size.
    stopped: AtomicBool,
    stopped_changed: Notify,
    /// The store failure that stops this driver, if one does: the runner
    /// keeps it for `result()` once the driver let go.
    store_failure: Mutex<Option<String>>,
}

impl Live {
    pub(crate) fn new() -> Self {
        Live {
            interrupt: Mutex::new(None),
            interrupted: Notify::new(),
            pause_requested: AtomicBool::new(false),
            event_sent: Notify::new(),
            event_came: AtomicBool::new(false),
            child_ended: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            stopped_changed: Notify::new(),
            store_failure: Mutex::new(None),
        }
    }

    /// Tells the driver that an event was sent to its instance.
    pub(crate) fn tell_event(&self) {
        self.event_came.store(true, Ordering::SeqCst);
        self.event_sent.notify_waiters();
    }

    /// Tells the driver that a child workflow of its instance ended.
    pub(crate) fn tell_child(&self) {
        self.child_ended.store(true, Ordering::SeqCst);
        self.event_sent.notify_waiters();
    }

    /// Whether a child's end was told to this driver (ever).
    pub(crate) fn was_told_of_child(&self) -> bool {
        self.child_ended.load(Ordering::SeqCst)
    }

    /// Whether a send told this driver of an event (ever).
    pub(crate) fn was_told_of_events(&self) -> bool {
        self.event_came.load(Ordering::SeqCst)
    }

    /// Asks the driver to stop; the first request wins.
    pub(crate) fn interrupt(&self, why: Interrupt) {
        let mut slot = self.interrupt.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(why);
        }
        drop(slot);
        self.interrupted.notify_one();
    }

    pub(crate) fn is_interrupted(&self) -> bool {
        self.interrupt
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Completes with the first interrupt.
    pub(crate) async fn interrupted(&self) -> Interrupt {
        loop {
            let notified = self.interrupted.notified();
            if let Some(why) = self
                .interrupt
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
            {
                return why;
            }
            notified.await;
        }
    }

    /// Notes that the store failed under this driver (the first failure
    /// is kept), and asks it to stop.
    pub(crate) fn store_failed(&self, error: &crate::Error) {
        let mut slot = self.store_failure.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert_with(|| error.to_string());
        drop(slot);
        self.interrupt(Interrupt::Stop);
    }

    /// The store failure that stopped this driver, if one did.
    pub(crate) fn take_store_failure(&self) -> Option<String> {
        self.store_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    pub(crate) fn request_pause(&self, pause: bool) {
        self.pause_requested.store(pause, Ordering::SeqCst);
    }

    pub(crate) fn pause_requested(&self) -> bool {
        self.pause_requested.load(Ordering::SeqCst)
    }

    pub(crate) fn mark_stopped(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.stopped_changed.notify_waiters();
    }

    /// Completes once the driver has let go of the instance.
    pub(crate) async fn wait_stopped(&self) {
        loop {
            // Registered before the check, so a `mark_stopped` in between
            // still wakes it.
            let changed = self.stopped_changed.notified();
            if self.stopped.load(Ordering::SeqCst) {
                return;
            }
            changed.await;
        }
    }
}
