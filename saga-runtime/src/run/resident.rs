//! What this process holds for an instance it runs, in one place: its
//! driver, the timer of its hibernation, its control lock and the store
//! failure that stopped it, one entry per instance behind one lock, so a
//! change to one (a driver letting go as an event comes) is seen whole by
//! every other. An entry goes once it holds nothing.
//!
//! Its folded state is the journal's (`journal::Journal` caches it): the
//! entry pins it while a driver runs (`keep`), and lets it go with the
//! driver.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::lock::lock;
use crate::names::id::InstanceId;
use crate::run::alarms::Alarms;
use crate::workflow::live::Live;

/// One instance's entry.
#[derive(Default)]
pub(crate) struct Resident {
    /// Its driver here, while one runs it.
    pub(crate) driver: Option<Arc<Live>>,
    /// The task of that driver, for shutdown to stop and wait for. Held
    /// here rather than with the engine's other tasks: it goes with the
    /// driver, so a finished driver's task is freed at once.
    pub(crate) task: Option<tokio::task::JoinHandle<()>>,
    /// While it hibernates here waiting for children on a store shared
    /// by workers: the task that looks at them. (An instance that waits
    /// for time has its alarm among the runner's, `run::alarms`, and no
    /// entry here.)
    pub(crate) timer: Option<Timer>,
    /// Serializes the control calls that stop its driver and write what
    /// replaces it (restart, terminate), so two never interleave; held by
    /// the calls under way.
    pub(crate) control: Option<Arc<tokio::sync::Mutex<()>>>,
    /// The store failure that stopped its last driver here: `result()`
    /// says so, until a driver runs it again.
    pub(crate) store_failure: Option<String>,
}

/// What wakes a hibernating instance that has an entry here.
pub(crate) enum Timer {
    /// A task of its own: a parent that looks at its children now and
    /// then, on a store shared by workers.
    Task(tokio::task::JoinHandle<()>),
}

impl Resident {
    fn holds_nothing(&self) -> bool {
        self.driver.is_none()
            && self.task.is_none()
            && self.timer.is_none()
            && self.control.is_none()
            && self.store_failure.is_none()
    }

    /// Stops its hibernation timer, if any: whether it hibernated.
    pub(crate) fn stop_timer(&mut self) -> bool {
        match self.timer.take() {
            Some(Timer::Task(task)) => {
                task.abort();
                true
            }
            None => false,
        }
    }
}

/// Every instance's entry, and the alarms that wake those that hibernate.
pub(crate) struct Residents {
    entries: Mutex<BTreeMap<InstanceId, Resident>>,
    /// Locked after `entries` when both are (a timer stopped in `with`).
    pub(crate) alarms: Alarms,
}

impl Residents {
    pub(crate) fn new(alarms: Alarms) -> Residents {
        Residents {
            entries: Mutex::new(BTreeMap::new()),
            alarms,
        }
    }

    /// Runs `f` on the entry of `id` (an empty one if it has none) under
    /// the lock, and drops the entry if it then holds nothing.
    pub(crate) fn with<R>(&self, id: &str, f: impl FnOnce(&mut Resident) -> R) -> R {
        let mut entries = lock(&self.entries);
        match entries.get_mut(id) {
            Some(resident) => {
                let answer = f(resident);
                if resident.holds_nothing() {
                    entries.remove(id);
                }
                answer
            }
            None => {
                let mut resident = Resident::default();
                let answer = f(&mut resident);
                if !resident.holds_nothing() {
                    entries.insert(InstanceId::stored(id), resident);
                }
                answer
            }
        }
    }

    /// Reads the entry of `id`, if it has one.
    pub(crate) fn read<R>(&self, id: &str, f: impl FnOnce(&Resident) -> R) -> Option<R> {
        lock(&self.entries).get(id).map(f)
    }

    /// The driver of `id` here, if one runs it.
    pub(crate) fn driver(&self, id: &str) -> Option<Arc<Live>> {
        self.read(id, |r| r.driver.clone()).flatten()
    }

    /// Shutdown: stops every driver and timer (and the alarms' task), and
    /// answers their tasks to wait for.
    pub(crate) fn stop_all(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let mut entries = lock(&self.entries);
        let mut tasks = Vec::new();
        for resident in entries.values_mut() {
            if let Some(Timer::Task(timer)) = resident.timer.take() {
                timer.abort();
                tasks.push(timer);
            }
            if let Some(task) = resident.task.take() {
                task.abort();
                tasks.push(task);
            }
        }
        entries.retain(|_, resident| !resident.holds_nothing());
        drop(entries);
        tasks.extend(self.alarms.stop());
        tasks
    }

    /// How many instances hold an entry (tests of memory and of leaks).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.entries).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_goes_once_it_holds_nothing() {
        let clock = crate::time::clock::TestClock::new();
        let residents = Residents::new(Alarms::new(Arc::new(clock.clone()), Some(clock)));
        residents.with("a", |_| ());
        assert_eq!(
            residents.len(),
            0,
            "an entry that holds nothing is not kept"
        );
        residents.with("a", |r| r.store_failure = Some("disk".into()));
        assert_eq!(residents.len(), 1);
        assert!(residents.driver("a").is_none());
        residents.with("a", |r| r.store_failure = None);
        assert_eq!(residents.len(), 0);
    }
}
