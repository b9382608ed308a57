//! The declared queues as the runner holds them: which queue each
//! instance starts on, and whether one may get a driver
//! ([`Dispatch::admits`]): only once it holds a slot. The task that hands
//! the slots out is `run::dequeue`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::journal::queued::QueueSpot;
use crate::lock::lock;
use crate::model::status::Status;
use crate::queue::order::{Local, Waiting};
use crate::queue::{Queue, Queues};

/// The declared queues and their waiting instances, held by the runner.
pub(crate) struct Dispatch {
    pub(super) queues: Queues,
    /// On a store shared by workers the store keeps who waits.
    pub(super) shared: bool,
    /// By queue, on a store of one process.
    pub(super) local: Mutex<BTreeMap<String, Local>>,
    /// Wakes the dispatcher: an instance waits, or one let go of a slot.
    pub(super) poke: Arc<tokio::sync::Notify>,
}

impl Dispatch {
    pub(crate) fn new(queues: Queues, shared: bool) -> Dispatch {
        let local = queues
            .all()
            .map(|q| (q.name.clone(), Local::default()))
            .collect();
        Dispatch {
            queues,
            shared,
            local: Mutex::new(local),
            poke: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// The declared queue `name`, or [`Error::UnknownQueue`](crate::Error::UnknownQueue).
    pub(crate) fn queue(&self, name: &str) -> Result<&Queue> {
        self.queues.get(name)
    }

    /// The rate limit of the declared queue `name`, if it has one.
    pub(super) fn rate_of(&self, name: &str) -> Option<crate::queue::rate::Rate> {
        self.queues.get(name).ok().and_then(|q| q.limits().rate)
    }

    /// The queue of `start` and `start_with`, if one was declared so.
    pub(crate) fn default_queue(&self) -> Option<&str> {
        self.queues.default_queue()
    }

    /// Every declared queue.
    pub(crate) fn declared(&self) -> impl Iterator<Item = &Queue> {
        self.queues.all()
    }

    /// The names of the declared queues.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.queues.all().map(Queue::name)
    }

    /// Wakes the dispatcher to look at the queues again.
    pub(crate) fn poke(&self) {
        self.poke.notify_one();
    }

    /// Whether the declared queue `name` gives slots back while its
    /// instances wait.
    pub(crate) fn releases_while_waiting(&self, name: &str) -> bool {
        self.queues
            .get(name)
            .is_ok_and(|q| q.limits().release_while_waiting)
    }

    /// Whether instance `id`, on the queue of `spot` and in `status`, may
    /// get a driver: only once it holds a slot, or while it gave its slot
    /// back for a wait (`released`: the driver replays up to the wait,
    /// and asks for a slot when the wait is over), or while it rolls back.
    /// One that waits is noted as waiting (on a store of one process), for the dispatcher.
    pub(crate) fn admits(
        &self,
        id: &str,
        spot: &QueueSpot,
        status: Status,
        released: bool,
    ) -> bool {
        // A rollback never waits for a slot: once begun, compensation
        // must finish, whatever runs in the queue meanwhile.
        if released || status == Status::RollingBack {
            return true;
        }
        if self.shared {
            return spot.taken;
        }
        let mut local = lock(&self.local);
        let queue = local.get_mut(&spot.queue);
        if spot.taken {
            if let Some(queue) = queue {
                queue.hold(id, spot.key.clone());
            }
            return true;
        }
        // What this task read may be stale: one the dispatcher took
        // meanwhile is left a holder (the dispatcher reads the journal of
        // each holder, and puts one back that waits again).
        if let Some(queue) = queue
            && status == Status::Queued
        {
            queue.arrive(waiting(id, spot));
        }
        drop(local);
        self.poke();
        false
    }
}

pub(super) fn waiting(id: &str, spot: &QueueSpot) -> Waiting {
    Waiting {
        id: id.to_owned(),
        key: spot.key.clone(),
        priority: spot.priority,
        order: spot.order,
    }
}
