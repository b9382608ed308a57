//! The wakes of the instances that hibernate here, kept together: one
//! ordered queue and one task that sleeps until the earliest, rather than
//! a task (and a sleep) per instance. A sleeping instance then costs an
//! entry here and a key in its `Resident`, which is what 10,000 of them
//! asleep are measured by.
//!
//! The task sleeps on the engine's clock, with the kind of wait each
//! alarm is (a durable sleep, or an event wait's deadline, which a
//! [`TestClock`] in the mode `auto_advancing_to_sleeps` does not jump
//! to), and is re-armed when an alarm earlier than those it sleeps for
//! comes. On a [`TestClock`] each alarm is also noted with the clock, so
//! that a test counts (and moves time to) one sleeper per hibernating
//! instance, as it would with a sleep each.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::Notify;

use crate::lock::lock;
use crate::names::id::InstanceId;
use crate::time::clock::{Clock, Sleep, TestClock, from_millis, to_millis};

/// What a `Resident` keeps of its alarm: enough to find it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AlarmKey {
    /// When it rings, in stored milliseconds.
    at: u64,
    /// Tells apart the alarms of one millisecond; in the order set.
    seq: u64,
    /// An event wait's deadline (rather than a durable sleep).
    deadline: bool,
}

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
    /// The engine's clock, when it is a [`TestClock`]: alarms are noted
    /// with it (`TestClock::note`).
    test: Option<TestClock>,
}

#[derive(Default)]
struct Queue {
    next_seq: u64,
    /// Durable sleeps, by `(at, seq)`.
    sleeps: BTreeMap<(u64, u64), Alarm>,
    /// Event waits' deadlines, by `(at, seq)`.
    deadlines: BTreeMap<(u64, u64), Alarm>,
    /// Shut down: no alarm is set or rung again.
    stopped: bool,
}

/// Kept small: 10,000 sleeping instances are 10,000 of these.
struct Alarm {
    id: InstanceId,
    /// Its count with a [`TestClock`] (at the alarm's time), to take back
    /// if it is stopped; [`NOT_NOTED`] when there is none.
    noted: u64,
}

/// [`Alarm::noted`] of an alarm the clock does not count.
const NOT_NOTED: u64 = u64::MAX;

impl Alarm {
    /// The key of its count with a [`TestClock`], if it has one.
    fn noted(&self, at: u64) -> Option<(SystemTime, u64)> {
        (self.noted != NOT_NOTED).then(|| (from_millis(at), self.noted))
    }
}

impl Queue {
    fn of(&mut self, deadline: bool) -> &mut BTreeMap<(u64, u64), Alarm> {
        if deadline {
            &mut self.deadlines
        } else {
            &mut self.sleeps
        }
    }

    /// Takes out the alarms due: those of each queue at or before its
    /// `through`, in the order they ring.
    fn take_due(
        &mut self,
        sleeps_through: u64,
        deadlines_through: u64,
    ) -> Vec<(AlarmKey, InstanceId)> {
        let mut due = Vec::new();
        for (deadline, through) in [(false, sleeps_through), (true, deadlines_through)] {
            let queue = self.of(deadline);
            while let Some(entry) = queue.first_entry() {
                let (at, seq) = *entry.key();
                if at > through {
                    break;
                }
                let alarm = entry.remove();
                due.push((AlarmKey { at, seq, deadline }, alarm.id));
            }
        }
        due.sort_by_key(|(key, _)| (key.at, key.seq));
        due
    }

    fn earliest(&self, deadline: bool) -> Option<u64> {
        let queue = if deadline {
            &self.deadlines
        } else {
            &self.sleeps
        };
        queue.first_key_value().map(|((at, _), _)| *at)
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
            }),
            task: Mutex::new(None),
        }
    }

    /// Sets an alarm for `id` (kept with it, not copied) at `at` (stored milliseconds; `deadline`: an
    /// event wait's deadline); `None` once shut down. The first one starts
    /// the task that rings them on `runtime`, which hands each due alarm
    /// to `ring` (in the order they ring) and ends once `ring` answers
    /// `false`.
    pub(crate) fn set<R>(
        &self,
        id: &InstanceId,
        at: u64,
        deadline: bool,
        runtime: &tokio::runtime::Handle,
        quiet: &Arc<crate::quiet::Quiet>,
        ring: impl FnOnce() -> R,
    ) -> Option<AlarmKey>
    where
        R: FnMut(AlarmKey, InstanceId) -> bool + Send + 'static,
    {
        let mut queue = lock(&self.shared.queue);
        if queue.stopped {
            return None;
        }
        let seq = queue.next_seq;
        queue.next_seq += 1;
        let earliest = queue.earliest(deadline);
        let noted = self
            .shared
            .test
            .as_ref()
            .and_then(|test| test.note(from_millis(at), deadline))
            .map_or(NOT_NOTED, |(_, noted)| noted);
        let alarm = Alarm {
            id: id.clone(),
            noted,
        };
        queue.of(deadline).insert((at, seq), alarm);
        drop(queue);
        if earliest.is_none_or(|earliest| at < earliest) {
            // A permit is kept if the task is not waiting right now.
            self.shared.rearm.notify_one();
        }
        let mut task = lock(&self.task);
        if task.is_none() {
            *task = Some(quiet.spawn(runtime, run(self.shared.clone(), ring())));
        }
        Some(AlarmKey { at, seq, deadline })
    }

    /// Stops the alarm of `key`, if it has not rung.
    pub(crate) fn cancel(&self, key: AlarmKey) {
        let removed = lock(&self.shared.queue)
            .of(key.deadline)
            .remove(&(key.at, key.seq));
        let noted = removed.and_then(|alarm| alarm.noted(key.at));
        if let (Some(test), Some(noted)) = (&self.shared.test, noted) {
            test.unnote(noted);
        }
    }

    /// Shutdown: drops every alarm and stops the task; answers it, to
    /// wait for.
    pub(crate) fn stop(&self) -> Option<tokio::task::JoinHandle<()>> {
        let mut queue = lock(&self.shared.queue);
        queue.stopped = true;
        let noted: Vec<(SystemTime, u64)> = std::mem::take(&mut queue.sleeps)
            .into_iter()
            .chain(std::mem::take(&mut queue.deadlines))
            .filter_map(|((at, _), alarm)| alarm.noted(at))
            .collect();
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

    /// How many alarms are set (tests of leaks).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let queue = lock(&self.shared.queue);
        queue.sleeps.len() + queue.deadlines.len()
    }
}

/// The task: rings what is due, then sleeps until the earliest alarm of
/// each kind, or until one earlier comes.
async fn run(shared: Arc<Shared>, mut ring: impl FnMut(AlarmKey, InstanceId) -> bool) {
    // The times the clock said have come, by a sleep of each kind that
    // completed: what is at or before them is due, whatever `now()` says.
    let (mut sleeps_through, mut deadlines_through) = (0, 0);
    loop {
        let now = to_millis(shared.clock.now());
        let due = lock(&shared.queue).take_due(now.max(sleeps_through), now.max(deadlines_through));
        if !due.is_empty() {
            for (key, id) in due {
                if !ring(key, id) {
                    return;
                }
            }
            continue;
        }
        let (next_sleep, next_deadline) = {
            let queue = lock(&shared.queue);
            if queue.stopped {
                return;
            }
            (queue.earliest(false), queue.earliest(true))
        };
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
    ) -> impl FnOnce() -> Box<dyn FnMut(AlarmKey, InstanceId) -> bool + Send> {
        move || Box::new(move |_, id: InstanceId| rung.send(id.to_string()).is_ok())
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
        let gone = alarms.set(
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
        alarms.cancel(gone.expect("set"));
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
        assert!(
            alarms
                .set(
                    &InstanceId::stored("c"),
                    start + 1000,
                    false,
                    &runtime,
                    &Default::default(),
                    ringer(tx.clone())
                )
                .is_none()
        );
        clock.advance(Duration::from_secs(1));
        quiet(&mut rung).await;
        assert_eq!(clock.sleepers(), 0);
    }
}
