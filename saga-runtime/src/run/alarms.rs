//! The wakes of the instances that only wait, kept together: one ordered
//! queue and one task that sleeps until the earliest, rather than a task
//! (and a sleep) per instance.
//!
//! On a store that keeps a timer index (`Store::timers_kept`), the queue
//! holds only a window of the next ones: every timer filed in the store at
//! or before the window's end (by wake time, then id) is here, and no
//! other. An alarm set past the end is not kept (the instance is in the
//! store's index, and nothing of it stays in memory); once the queue runs
//! dry the task reads the next [`WINDOW`] from the store. A store without
//! one keeps every alarm here, as before.
//!
//! An alarm rings the instance's id: the runner looks at the instance
//! then, so an alarm that went stale (it woke or ended since) is harmless.
//!
//! The task sleeps on the engine's clock, with the kind of wait each
//! alarm is (a durable sleep, or an event wait's deadline, which a
//! [`TestClock`] in the mode `auto_advancing_to_sleeps` does not jump
//! to), and is re-armed when an alarm earlier than those it sleeps for
//! comes. On a [`TestClock`] each sleeping instance is also noted with the
//! clock, kept in the window or not, so that a test counts (and moves time
//! to) one sleeper per instance that waits, as it would with a sleep each.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use tokio::sync::Notify;

use crate::lock::lock;
use crate::names::id::InstanceId;
use crate::store::Store;
use crate::time::clock::{Clock, Sleep, TestClock, from_millis, to_millis};

/// How many alarms the window holds at most, on a store with a timer index.
pub(crate) const WINDOW: usize = 256;

/// Every alarm set here, and the task that rings them.
pub(crate) struct Alarms {
    shared: Arc<Shared>,
    /// Started with the first alarm; stopped by [`Alarms::stop`].
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Told when an alarm comes that rings before those the task sleeps for.
    rearm: Notify,
    clock: Arc<dyn Clock>,
    /// The engine's clock, when it is a [`TestClock`]: sleeping instances
    /// are noted with it (`TestClock::note`).
    test: Option<TestClock>,
    /// The store whose timer index the window is refilled from, once it
    /// is trusted ([`Alarms::bound`]).
    store: OnceLock<Arc<dyn Store>>,
}

/// An alarm's place: wake time (stored milliseconds), then id.
type Key = (u64, InstanceId);

#[derive(Default)]
struct Queue {
    /// Durable sleeps.
    sleeps: BTreeSet<Key>,
    /// Event waits' deadlines.
    deadlines: BTreeSet<Key>,
    /// The alarm of each instance in the window: its time and kind.
    by_id: HashMap<InstanceId, (u64, bool)>,
    /// With a [`TestClock`]: each sleeping instance's count with it.
    noted: HashMap<InstanceId, (SystemTime, u64)>,
    /// The window's end (inclusive) on a store with a timer index; `None`:
    /// every alarm is here.
    end: Option<Key>,
    /// A refill reads the store: alarms set past the end meanwhile wait
    /// here, to be kept if the new end covers them.
    refilling: Option<Vec<(u64, InstanceId, bool)>>,
    /// The window is bounded ([`Alarms::bound`]): past [`WINDOW`] alarms,
    /// the latest are let go of.
    bounded: bool,
    /// Shut down: no alarm is set or rung again.
    stopped: bool,
}

impl Queue {
    fn of(&mut self, deadline: bool) -> &mut BTreeSet<Key> {
        if deadline {
            &mut self.deadlines
        } else {
            &mut self.sleeps
        }
    }

    fn len(&self) -> usize {
        self.sleeps.len() + self.deadlines.len()
    }

    /// Whether the window holds `key`'s place.
    fn covers(&self, key: &Key) -> bool {
        self.end.as_ref().is_none_or(|end| key <= end)
    }

    /// Keeps the alarm of `id` (which has none here).
    fn insert(&mut self, id: InstanceId, at: u64, deadline: bool) {
        self.by_id.insert(id.clone(), (at, deadline));
        self.of(deadline).insert((at, id));
    }

    /// Drops the alarm of `id` from the window: whether it had one.
    fn remove(&mut self, id: &str) -> bool {
        let Some((at, deadline)) = self.by_id.remove(id) else {
            return false;
        };
        self.of(deadline).remove(&(at, InstanceId::stored(id)));
        true
    }

    /// On a bounded window: lets go of the latest alarms past [`WINDOW`],
    /// the end moving back to the latest kept.
    fn shrink(&mut self) {
        if !self.bounded {
            return;
        }
        while self.len() > WINDOW {
            let last_sleep = self.sleeps.last().cloned();
            let last_deadline = self.deadlines.last().cloned();
            let (last, deadline) = match (last_sleep, last_deadline) {
                (Some(s), Some(d)) if d > s => (d, true),
                (Some(s), _) => (s, false),
                (None, Some(d)) => (d, true),
                (None, None) => return,
            };
            self.of(deadline).remove(&last);
            self.by_id.remove(&last.1);
            let kept = [self.sleeps.last(), self.deadlines.last()]
                .into_iter()
                .flatten()
                .max()
                .cloned();
            self.end = kept;
        }
    }

    /// Takes out the alarms due: those of each queue at or before its
    /// `through`, in the order they ring.
    fn take_due(&mut self, sleeps_through: u64, deadlines_through: u64) -> Vec<(u64, InstanceId)> {
        let mut due = Vec::new();
        for (deadline, through) in [(false, sleeps_through), (true, deadlines_through)] {
            let queue = self.of(deadline);
            while queue.first().is_some_and(|first| first.0 <= through) {
                due.extend(queue.pop_first());
            }
        }
        for (_, id) in &due {
            self.by_id.remove(id);
        }
        due.sort();
        due
    }

    fn earliest(&self, deadline: bool) -> Option<u64> {
        let queue = if deadline {
            &self.deadlines
        } else {
            &self.sleeps
        };
        queue.first().map(|(at, _)| *at)
    }
}

impl Alarms {
    /// Alarms on `clock` (`test`: the same clock, when it is a [`TestClock`]).
    pub(crate) fn new(clock: Arc<dyn Clock>, test: Option<TestClock>) -> Alarms {
        Alarms {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                rearm: Notify::new(),
                clock,
                test,
                store: OnceLock::new(),
            }),
            task: Mutex::new(None),
        }
    }

    /// From now on the window is bounded, refilled from `store`'s timer
    /// index (which files every alarm set here): only the next [`WINDOW`]
    /// alarms stay in memory.
    pub(crate) fn bound(&self, store: Arc<dyn Store>) {
        if self.shared.store.set(store).is_err() {
            return;
        }
        let mut queue = lock(&self.shared.queue);
        // Every alarm is here so far: the window is bounded from now on.
        queue.bounded = true;
        queue.shrink();
    }

    /// Sets the alarm of `id` at `at` (stored milliseconds; `deadline`: an
    /// event wait's deadline), replacing the one it had; kept in memory
    /// only within the window. The first one starts the task that rings
    /// them on `runtime`, which hands each due alarm's id to `ring` (in
    /// the order they ring) and ends once `ring` answers `false`.
    pub(crate) fn set<R>(
        &self,
        id: &InstanceId,
        at: u64,
        deadline: bool,
        runtime: &tokio::runtime::Handle,
        quiet: &Arc<crate::quiet::Quiet>,
        ring: impl FnOnce() -> R,
    ) where
        R: FnMut(InstanceId, u64) -> bool + Send + 'static,
    {
        let mut queue = lock(&self.shared.queue);
        if queue.stopped {
            return;
        }
        if let Some(test) = &self.shared.test {
            if let Some(noted) = queue.noted.remove(id.as_str()) {
                test.unnote(noted);
            }
            if let Some(noted) = test.note(from_millis(at), deadline) {
                queue.noted.insert(id.clone(), noted);
            }
        }
        queue.remove(id);
        if let Some(waiting) = &mut queue.refilling {
            waiting.retain(|(_, other, _)| other != id);
        }
        let key = (at, id.clone());
        let earliest = queue.earliest(deadline);
        if queue.covers(&key) {
            queue.insert(id.clone(), at, deadline);
            queue.shrink();
        } else if let Some(waiting) = &mut queue.refilling {
            waiting.push((at, id.clone(), deadline));
        }
        let kept = queue.by_id.contains_key(id.as_str());
        drop(queue);
        if kept && earliest.is_none_or(|earliest| at < earliest) {
            // A permit is kept if the task is not waiting right now.
            self.shared.rearm.notify_one();
        }
        let mut task = lock(&self.task);
        if task.is_none() {
            *task = Some(quiet.spawn(runtime, run(self.shared.clone(), ring())));
        }
    }

    /// Stops the alarm of `id` (it woke, ended or was removed), and its
    /// count with a [`TestClock`]: whether it had either.
    pub(crate) fn forget(&self, id: &str) -> bool {
        let mut queue = lock(&self.shared.queue);
        let mut had = queue.remove(id);
        if let Some(waiting) = &mut queue.refilling {
            waiting.retain(|(_, other, _)| other.as_str() != id);
        }
        let noted = queue.noted.remove(id);
        drop(queue);
        if let (Some(test), Some(noted)) = (&self.shared.test, noted) {
            had = true;
            test.unnote(noted);
        }
        had
    }

    /// Shutdown: drops every alarm and stops the task; answers it, to
    /// wait for.
    pub(crate) fn stop(&self) -> Option<tokio::task::JoinHandle<()>> {
        let mut queue = lock(&self.shared.queue);
        queue.stopped = true;
        queue.sleeps.clear();
        queue.deadlines.clear();
        queue.by_id.clear();
        let noted: Vec<(SystemTime, u64)> = queue.noted.drain().map(|(_, n)| n).collect();
        drop(queue);
        if let Some(test) = &self.shared.test {
            for noted in noted {
                test.unnote(noted);
            }
        }
        let task = lock(&self.task).take();
        if let Some(task) = &task {
            task.abort();
        }
        task
    }

    /// How many alarms are held in memory (tests of leaks).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.shared.queue).len()
    }
}

/// Reads the next window from the store's timer index, once the queue ran
/// dry: the end moves to the last read, or goes (every alarm is here) when
/// the store had fewer than [`WINDOW`].
async fn refill(shared: &Shared, store: &Arc<dyn Store>) {
    let end = {
        let mut queue = lock(&shared.queue);
        queue.refilling = Some(Vec::new());
        queue.end.clone()
    };
    let Some((at, id)) = end else { return };
    let read = store.timers_after(Some((at, id.as_str())), WINDOW).await;
    let mut queue = lock(&shared.queue);
    let waiting = queue.refilling.take().unwrap_or_default();
    let read = match read {
        Ok(read) => read,
        Err(e) => {
            // Every alarm is kept from now on: none is lost.
            tracing::warn!(error = %e, "could not read the next timers; every sleeping instance stays in memory");
            queue.end = None;
            Vec::new()
        }
    };
    if queue.end.is_some() {
        queue.end = if read.len() < WINDOW {
            None
        } else {
            read.last().map(|(at, id, _)| (*at, InstanceId::stored(id)))
        };
    }
    for (at, id, deadline) in read {
        let id = InstanceId::stored(&id);
        if !queue.by_id.contains_key(id.as_str()) {
            queue.insert(id, at, deadline);
        }
    }
    for (at, id, deadline) in waiting {
        if queue.covers(&(at, id.clone())) && !queue.by_id.contains_key(id.as_str()) {
            queue.insert(id, at, deadline);
        }
    }
    queue.shrink();
}

/// The task: rings what is due, then sleeps until the earliest alarm of
/// each kind, or until one earlier comes; refills the window from the
/// store once it ran dry.
async fn run(shared: Arc<Shared>, mut ring: impl FnMut(InstanceId, u64) -> bool) {
    // The times the clock said have come, by a sleep of each kind that
    // completed: what is at or before them is due, whatever `now()` says.
    let (mut sleeps_through, mut deadlines_through) = (0, 0);
    loop {
        let now = to_millis(shared.clock.now());
        let (due, noted) = {
            let mut queue = lock(&shared.queue);
            let due = queue.take_due(now.max(sleeps_through), now.max(deadlines_through));
            let noted: Vec<_> = due
                .iter()
                .filter_map(|(_, id)| queue.noted.remove(id.as_str()))
                .collect();
            (due, noted)
        };
        if let Some(test) = &shared.test {
            for noted in noted {
                test.unnote(noted);
            }
        }
        if !due.is_empty() {
            for (at, id) in due {
                if !ring(id, at) {
                    return;
                }
            }
            continue;
        }
        let (next_sleep, next_deadline, dry) = {
            let queue = lock(&shared.queue);
            if queue.stopped {
                return;
            }
            let dry = queue.len() == 0 && queue.end.is_some();
            (queue.earliest(false), queue.earliest(true), dry)
        };
        if dry && let Some(store) = shared.store.get() {
            refill(&shared, store).await;
            if lock(&shared.queue).len() > 0 {
                continue;
            }
        }
        match &shared.test {
            // One wait, not counted: each alarm is counted by itself.
            Some(test) => {
                let next = next_sleep.into_iter().chain(next_deadline).min();
                let wait = next.map(|at| test.sleep_unseen(from_millis(at)));
                tokio::select! {
                    // A rearm first: the alarms are read again and a due one fires on that pass.
                    // Biased: a simulated run picks the same on every replay of its seed.
                    biased;
                    () = shared.rearm.notified() => {}
                    () = maybe(wait) => {}
                }
            }
            None => {
                let clock = &shared.clock;
                let sleep = next_sleep.map(|at| clock.sleep_until(from_millis(at)));
                let deadline = next_deadline.map(|at| clock.event_deadline(from_millis(at)));
                tokio::select! {
                    // A rearm first: the alarms are read again and a due one fires
                    // on that pass (its sleep is made again, ready at once).
                    // Biased: a simulated run picks the same on every replay of its seed.
                    biased;
                    () = shared.rearm.notified() => {}
                    () = maybe(sleep) => sleeps_through = sleeps_through.max(next_sleep.unwrap_or(0)),
                    () = maybe(deadline) => {
                        deadlines_through = deadlines_through.max(next_deadline.unwrap_or(0));
                    }
                }
            }
        }
    }
}

/// Completes with `sleep`, or never if there is none.
async fn maybe(sleep: Option<Sleep>) {
    match sleep {
        Some(sleep) => sleep.await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::*;

    /// Alarms on a clock standing still at 0 ms past the test clock's start,
    /// ringing into a channel; `test`: the clock is known as a `TestClock`
    /// (else only its `Clock` methods are used, as a user's clock would be).
    fn alarms(test: bool) -> (Alarms, TestClock, u64) {
        let clock = TestClock::new();
        let start = to_millis(clock.now());
        let alarms = Alarms::new(Arc::new(clock.clone()), test.then(|| clock.clone()));
        (alarms, clock, start)
    }

    fn ringer(
        rung: mpsc::UnboundedSender<String>,
    ) -> impl FnOnce() -> Box<dyn FnMut(InstanceId, u64) -> bool + Send> {
        move || Box::new(move |id: InstanceId, _| rung.send(id.to_string()).is_ok())
    }

    async fn next(rung: &mut mpsc::UnboundedReceiver<String>) -> String {
        tokio::time::timeout(Duration::from_secs(10), rung.recv())
            .await
            .expect("an alarm rings")
            .expect("the task runs")
    }

    /// Nothing more rings once the task had its chance to.
    async fn quiet(rung: &mut mpsc::UnboundedReceiver<String>) {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(rung.try_recv().is_err(), "nothing else rang");
    }

    #[tokio::test]
    async fn alarms_ring_in_order_and_an_earlier_one_rearms_the_task() {
        for test in [true, false] {
            let (alarms, clock, start) = alarms(test);
            let runtime = tokio::runtime::Handle::current();
            let (tx, mut rung) = mpsc::unbounded_channel();
            // Set latest first: each comes before those the task sleeps for.
            for (id, secs) in [("c", 30), ("b", 20), ("a", 10)] {
                alarms.set(
                    &InstanceId::stored(id),
                    start + secs * 1000,
                    false,
                    &runtime,
                    &Default::default(),
                    ringer(tx.clone()),
                );
            }
            // A deadline between them, on the other queue.
            alarms.set(
                &InstanceId::stored("b2"),
                start + 25_000,
                true,
                &runtime,
                &Default::default(),
                ringer(tx.clone()),
            );
            quiet(&mut rung).await;
            if test {
                assert_eq!(clock.sleepers(), 4, "each alarm counts");
                assert_eq!(clock.event_waits(), 1);
            }
            clock.advance(Duration::from_secs(10));
            assert_eq!(next(&mut rung).await, "a");
            quiet(&mut rung).await;
            clock.advance(Duration::from_secs(20));
            for id in ["b", "b2", "c"] {
                assert_eq!(next(&mut rung).await, id);
            }
            assert_eq!(alarms.len(), 0);
            assert_eq!(clock.sleepers(), 0, "nothing waits for time");
        }
    }

    #[tokio::test]
    async fn a_cancelled_alarm_does_not_ring_and_is_not_counted() {
        let (alarms, clock, start) = alarms(true);
        let runtime = tokio::runtime::Handle::current();
        let (tx, mut rung) = mpsc::unbounded_channel();
        alarms.set(
            &InstanceId::stored("gone"),
            start + 1000,
            false,
            &runtime,
            &Default::default(),
            ringer(tx.clone()),
        );
        alarms.set(
            &InstanceId::stored("kept"),
            start + 2000,
            false,
            &runtime,
            &Default::default(),
            ringer(tx.clone()),
        );
        assert_eq!(clock.sleepers(), 2);
        assert!(alarms.forget("gone"));
        assert_eq!(clock.sleepers(), 1);
        assert_eq!(
            clock.advance_to_next_wake(),
            Some(from_millis(start + 2000))
        );
        assert_eq!(next(&mut rung).await, "kept");
        quiet(&mut rung).await;
    }

    #[tokio::test]
    async fn a_passed_alarm_rings_at_once_and_an_auto_advancing_clock_jumps_to_one() {
        let clock = TestClock::auto_advancing_to_sleeps();
        let start = to_millis(clock.now());
        let alarms = Alarms::new(Arc::new(clock.clone()), Some(clock.clone()));
        let runtime = tokio::runtime::Handle::current();
        let (tx, mut rung) = mpsc::unbounded_channel();
        alarms.set(
            &InstanceId::stored("past"),
            start,
            false,
            &runtime,
            &Default::default(),
            ringer(tx.clone()),
        );
        assert_eq!(next(&mut rung).await, "past");
        // A deadline is not jumped to; a sleep after it is, and wakes both.
        alarms.set(
            &InstanceId::stored("deadline"),
            start + 5000,
            true,
            &runtime,
            &Default::default(),
            ringer(tx.clone()),
        );
        quiet(&mut rung).await;
        assert_eq!(clock.event_waits(), 1);
        alarms.set(
            &InstanceId::stored("sleep"),
            start + 9000,
            false,
            &runtime,
            &Default::default(),
            ringer(tx.clone()),
        );
        assert_eq!(next(&mut rung).await, "deadline");
        assert_eq!(next(&mut rung).await, "sleep");
        assert_eq!(clock.sleepers(), 0);
    }

    #[tokio::test]
    async fn stopped_alarms_neither_ring_nor_count_and_none_is_set_after() {
        let (alarms, clock, start) = alarms(true);
        let runtime = tokio::runtime::Handle::current();
        let (tx, mut rung) = mpsc::unbounded_channel();
        alarms.set(
            &InstanceId::stored("a"),
            start + 1000,
            false,
            &runtime,
            &Default::default(),
            ringer(tx.clone()),
        );
        alarms.set(
            &InstanceId::stored("b"),
            start + 1000,
            true,
            &runtime,
            &Default::default(),
            ringer(tx.clone()),
        );
        let task = alarms.stop().expect("the task ran");
        assert!(task.await.is_err_and(|e| e.is_cancelled()));
        assert_eq!(clock.sleepers(), 0);
        alarms.set(
            &InstanceId::stored("c"),
            start + 1000,
            false,
            &runtime,
            &Default::default(),
            ringer(tx.clone()),
        );
        assert_eq!(alarms.len(), 0, "none is set once stopped");
        clock.advance(Duration::from_secs(1));
        quiet(&mut rung).await;
        assert_eq!(clock.sleepers(), 0);
    }

    #[tokio::test]
    async fn a_bounded_window_keeps_only_the_next_alarms_and_refills_from_the_store() {
        let (alarms, clock, start) = alarms(true);
        let store: Arc<dyn Store> =
            Arc::new(crate::store::SledStore::temporary().expect("a store"));
        alarms.bound(store.clone());
        let runtime = tokio::runtime::Handle::current();
        let (tx, mut rung) = mpsc::unbounded_channel();
        let n = WINDOW * 2 + 10;
        let ids: Vec<String> = (0..n).map(|i| format!("i{i:04}")).collect();
        // Set latest first: each one set pushes a later one out.
        for (i, id) in ids.iter().enumerate().rev() {
            let at = start + 1000 + i as u64;
            let mut row = crate::store::IndexRow::opaque(b"summary");
            row.wake = Some((at, false));
            store.put_index(id, &row).expect("filed");
            alarms.set(
                &InstanceId::stored(id),
                at,
                false,
                &runtime,
                &Default::default(),
                ringer(tx.clone()),
            );
        }
        assert!(alarms.len() <= WINDOW, "{} kept", alarms.len());
        assert_eq!(clock.sleepers(), n, "each is counted, kept or not");
        // One filed again later: its old place in the store is stale.
        let moved = &ids[0];
        let mut row = crate::store::IndexRow::opaque(b"summary");
        row.wake = Some((start + 5000, false));
        store.put_index(moved, &row).expect("filed");
        alarms.set(
            &InstanceId::stored(moved),
            start + 5000,
            false,
            &runtime,
            &Default::default(),
            ringer(tx.clone()),
        );
        clock.advance(Duration::from_secs(60));
        let mut got = Vec::new();
        for _ in 0..n {
            got.push(next(&mut rung).await);
        }
        let mut want: Vec<String> = ids[1..].to_vec();
        want.push(moved.clone());
        assert_eq!(got, want, "each rang once, in order");
        quiet(&mut rung).await;
        assert_eq!(clock.sleepers(), 0);
    }
}
