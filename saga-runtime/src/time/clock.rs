//! Time, injectable: the engine never reads the wall clock or sleeps except
//! through a [`Clock`], so tests run days of workflow time in milliseconds.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{Notify, oneshot};

/// A future that completes at a point in time.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The engine's source of time.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> SystemTime;

    /// Completes at `deadline` (at once if it has passed). Used for durable
    /// sleeps, event-wait deadlines and retry delays.
    fn sleep_until(&self, deadline: SystemTime) -> Sleep;

    /// Completes at `deadline`, for a per-attempt timeout. A clock that skips
    /// time forward (such as [`TestClock::auto_advancing`]) must not skip to
    /// these, or every running attempt would time out.
    fn timeout_at(&self, deadline: SystemTime) -> Sleep {
        self.sleep_until(deadline)
    }

    /// Completes at `deadline`, the timeout of an event wait: the time a
    /// test still has to send the event. A clock that skips time forward
    /// in the mode [`TestClock::auto_advancing_to_sleeps`] does not skip to
    /// these.
    fn event_deadline(&self, deadline: SystemTime) -> Sleep {
        self.sleep_until(deadline)
    }
}

/// The real clock: the system's wall time and Tokio's timers.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

/// Tokio's timer wheel cannot hold deadlines far in the future; longer
/// waits wake early and sleep again.
const LONGEST_TIMER: Duration = Duration::from_secs(60 * 60 * 24 * 365);

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep_until(&self, deadline: SystemTime) -> Sleep {
        Box::pin(async move {
            while let Ok(left) = deadline.duration_since(SystemTime::now()) {
                if left.is_zero() {
                    break;
                }
                tokio::time::sleep(left.min(LONGEST_TIMER)).await;
            }
        })
    }
}

/// A clock for tests: time moves only when the test says so.
///
/// - [`TestClock::new`] stands still until [`advance`](TestClock::advance)
///   or [`advance_to`](TestClock::advance_to).
/// - [`TestClock::auto_advancing`] jumps to the next sleep's deadline as
///   soon as one starts, so retry delays and durable sleeps pass at once
///   while still being recorded with their real lengths. It jumps to event
///   waits' deadlines too: a wait times out before a test can send its
///   event.
/// - [`TestClock::auto_advancing_to_sleeps`] jumps to durable sleeps and
///   retry delays only: an event wait waits for its event (or for the test
///   to move time past its deadline), as in production.
///
/// Attempt timeouts are never jumped to.
#[derive(Clone)]
pub struct TestClock {
    shared: Arc<TestTime>,
}

struct TestTime {
    state: Mutex<Timeline>,
    changed: Notify,
}

struct Timeline {
    now: SystemTime,
    auto: Auto,
    next_id: u64,
    sleepers: BTreeMap<(SystemTime, u64), Sleeper>,
}

/// What an auto-advancing clock jumps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Auto {
    Off,
    /// Sleeps, retry delays and event waits' deadlines.
    Everything,
    /// Sleeps and retry delays.
    Sleeps,
}

struct Sleeper {
    /// `None` for a deadline noted without a future of its own (see
    /// [`TestClock::note`]): nothing to wake, only to count.
    wake: Option<oneshot::Sender<()>>,
    kind: Kind,
}

/// What a sleeper waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A durable sleep or a retry delay.
    Sleep,
    /// An event wait's deadline.
    EventDeadline,
    /// An attempt's timeout.
    Timeout,
    /// The engine's own wait for deadlines it noted already (the shared
    /// timer of hibernating instances): neither counted nor jumped to,
    /// since each of those deadlines is, once.
    Unseen,
}

impl Kind {
    /// Whether `sleepers()` counts it and `advance_to_next_wake` moves to it.
    fn pending(self) -> bool {
        matches!(self, Kind::Sleep | Kind::EventDeadline)
    }
}

impl TestClock {
    /// A clock standing still at 2030-01-01T00:00:00Z.
    pub fn new() -> Self {
        TestClock::starting_at(UNIX_EPOCH + Duration::from_secs(1_893_456_000))
    }

    /// A clock standing still at `start`.
    pub fn starting_at(start: SystemTime) -> Self {
        TestClock {
            shared: Arc::new(TestTime {
                state: Mutex::new(Timeline {
                    now: start,
                    auto: Auto::Off,
                    next_id: 0,
                    sleepers: BTreeMap::new(),
                }),
                changed: Notify::new(),
            }),
        }
    }

    /// A clock that jumps to each sleep's deadline as soon as the sleep
    /// starts (timeouts excepted), event waits' deadlines included.
    pub fn auto_advancing() -> Self {
        let clock = TestClock::new();
        clock.lock().auto = Auto::Everything;
        clock
    }

    /// A clock that jumps to each durable sleep's wake time and each retry
    /// delay's end as soon as it starts, but not to an event wait's
    /// deadline: the test sends the event, or moves time on
    /// ([`advance`](TestClock::advance), [`advance_to`](TestClock::advance_to))
    /// to make the wait time out.
    pub fn auto_advancing_to_sleeps() -> Self {
        let clock = TestClock::new();
        clock.lock().auto = Auto::Sleeps;
        clock
    }

    /// Moves time forward to `at` (nothing happens if it has passed),
    /// waking every sleep whose deadline passed: for instance to the wake
    /// time of a `SleepStarted` event of one instance.
    pub fn advance_to(&self, at: SystemTime) {
        let mut state = self.lock();
        let due = state.advance_to(at);
        drop(state);
        wake_all(due);
        self.shared.changed.notify_waiters();
    }

    /// Moves time forward by `by`, waking every sleep whose deadline passed.
    pub fn advance(&self, by: Duration) {
        let mut state = self.lock();
        // Saturates at the latest time a SystemTime holds here.
        let to = state
            .now
            .checked_add(by)
            .unwrap_or_else(|| from_millis(u64::MAX));
        let due = state.advance_to(to);
        drop(state);
        wake_all(due);
        self.shared.changed.notify_waiters();
    }

    /// Moves time to the earliest pending sleep's deadline (timeouts
    /// excepted) and wakes it; returns that time, or `None` if nothing sleeps.
    pub fn advance_to_next_wake(&self) -> Option<SystemTime> {
        let mut state = self.lock();
        let next = state
            .sleepers
            .iter()
            .find(|(_, s)| s.kind.pending())
            .map(|((at, _), _)| *at)?;
        let to = next.max(state.now);
        let due = state.advance_to(to);
        drop(state);
        wake_all(due);
        self.shared.changed.notify_waiters();
        Some(to)
    }

    /// How many sleeps, retry delays and event waits (timeouts excepted)
    /// are waiting for time to pass.
    pub fn sleepers(&self) -> usize {
        self.count(Kind::pending)
    }

    /// How many event waits are waiting for their event or deadline.
    pub fn event_waits(&self) -> usize {
        self.count(|kind| kind == Kind::EventDeadline)
    }

    /// Waits until at least `n` sleeps (timeouts excepted, event waits
    /// included) are pending.
    pub async fn wait_for_sleepers(&self, n: usize) {
        self.wait_for(n, Kind::pending).await;
    }

    /// Waits until at least `n` durable sleeps or retry delays (not event
    /// waits) are pending.
    pub async fn wait_for_sleeps(&self, n: usize) {
        self.wait_for(n, |kind| kind == Kind::Sleep).await;
    }

    /// Waits until at least `n` event waits are pending: a test then sends
    /// their events.
    pub async fn wait_for_event_waits(&self, n: usize) {
        self.wait_for(n, |kind| kind == Kind::EventDeadline).await;
    }

    fn count(&self, counted: impl Fn(Kind) -> bool) -> usize {
        self.lock()
            .sleepers
            .values()
            .filter(|s| counted(s.kind))
            .count()
    }

    async fn wait_for(&self, n: usize, counted: impl Fn(Kind) -> bool) {
        loop {
            let changed = self.shared.changed.notified();
            if self.count(&counted) >= n {
                return;
            }
            changed.await;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Timeline> {
        // A panic while holding this lock leaves plain data behind; keep going.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn sleep(&self, deadline: SystemTime, kind: Kind) -> Sleep {
        let (wake, woken) = oneshot::channel();
        match self.insert(deadline, kind, Some(wake)) {
            Some(key) => Box::pin(TestSleep {
                clock: self.clone(),
                key,
                woken,
            }),
            None => Box::pin(std::future::ready(())),
        }
    }

    /// Adds a sleeper (jumping to it if the clock auto-advances to its
    /// kind): its key, or `None` if `deadline` has passed.
    fn insert(
        &self,
        deadline: SystemTime,
        kind: Kind,
        wake: Option<oneshot::Sender<()>>,
    ) -> Option<(SystemTime, u64)> {
        let mut state = self.lock();
        if deadline <= state.now {
            return None;
        }
        let key = (deadline, state.next_id);
        state.next_id += 1;
        state.sleepers.insert(key, Sleeper { wake, kind });
        let jump = match (state.auto, kind) {
            (_, Kind::Timeout | Kind::Unseen) | (Auto::Off, _) => false,
            (Auto::Everything, _) => true,
            (Auto::Sleeps, kind) => kind == Kind::Sleep,
        };
        let due = if jump {
            state.advance_to(deadline)
        } else {
            Vec::new()
        };
        drop(state);
        wake_all(due);
        self.shared.changed.notify_waiters();
        Some(key)
    }

    /// Counts a durable sleep (or, `event`, an event wait's deadline) that
    /// the engine waits for without a future of its own: a hibernating
    /// instance, whose wake the runner's shared timer keeps. Counted, and
    /// jumped to, as [`Clock::sleep_until`] (or [`Clock::event_deadline`])
    /// would be, until time passes it or [`TestClock::unnote`] takes it
    /// back; the key for that, or `None` if `deadline` has passed.
    pub(crate) fn note(&self, deadline: SystemTime, event: bool) -> Option<(SystemTime, u64)> {
        let kind = if event {
            Kind::EventDeadline
        } else {
            Kind::Sleep
        };
        self.insert(deadline, kind, None)
    }

    /// Takes back a deadline [`TestClock::note`] counted (nothing if time
    /// passed it already).
    pub(crate) fn unnote(&self, key: (SystemTime, u64)) {
        let removed = self.lock().sleepers.remove(&key);
        if removed.is_some() {
            self.shared.changed.notify_waiters();
        }
    }

    /// Completes at `deadline`, not counted by [`TestClock::sleepers`] nor
    /// jumped to: the shared timer's wait for the deadlines it noted.
    pub(crate) fn sleep_unseen(&self, deadline: SystemTime) -> Sleep {
        self.sleep(deadline, Kind::Unseen)
    }
}

impl Default for TestClock {
    fn default() -> Self {
        TestClock::new()
    }
}

impl std::fmt::Debug for TestClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("TestClock")
            .field("now", &state.now)
            .field("auto", &state.auto)
            .field("sleepers", &state.sleepers.len())
            .finish()
    }
}

impl Timeline {
    /// Moves time to `to`; returns the sleeps that are due, to be woken
    /// once the lock is released.
    fn advance_to(&mut self, to: SystemTime) -> Vec<Sleeper> {
        self.now = self.now.max(to);
        let mut due = Vec::new();
        while let Some(entry) = self.sleepers.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            due.push(entry.remove());
        }
        due
    }
}

/// Wakes sleeps. Never called with the clock's lock held: a wake-up (or
/// dropping a sender) runs task code that may take the lock again.
fn wake_all(due: Vec<Sleeper>) {
    for sleeper in due {
        // The sleep may have been dropped already; nothing to wake then.
        if let Some(wake) = sleeper.wake {
            let _ = wake.send(());
        }
    }
}

impl Clock for TestClock {
    fn now(&self) -> SystemTime {
        self.lock().now
    }

    fn sleep_until(&self, deadline: SystemTime) -> Sleep {
        self.sleep(deadline, Kind::Sleep)
    }

    fn timeout_at(&self, deadline: SystemTime) -> Sleep {
        self.sleep(deadline, Kind::Timeout)
    }

    fn event_deadline(&self, deadline: SystemTime) -> Sleep {
        self.sleep(deadline, Kind::EventDeadline)
    }
}

struct TestSleep {
    clock: TestClock,
    key: (SystemTime, u64),
    woken: oneshot::Receiver<()>,
}

impl Future for TestSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // The sender is only dropped by waking or by removal on drop.
        Pin::new(&mut self.woken).poll(cx).map(|_| ())
    }
}

impl Drop for TestSleep {
    fn drop(&mut self) {
        let removed = self.clock.lock().sleepers.remove(&self.key);
        // The sender is dropped here, after the lock is released.
        if removed.is_some() {
            self.clock.shared.changed.notify_waiters();
        }
    }
}

/// Milliseconds since the Unix epoch, the unit times are stored in.
pub(crate) fn to_millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The inverse of [`to_millis`].
pub(crate) fn from_millis(millis: u64) -> SystemTime {
    UNIX_EPOCH
        .checked_add(Duration::from_millis(millis))
        .unwrap_or(UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX) * 1000))
}

/// `at + by` in stored milliseconds, saturating instead of overflowing.
pub(crate) fn add_millis(at: u64, by: Duration) -> u64 {
    at.saturating_add(u64::try_from(by.as_millis()).unwrap_or(u64::MAX))
}
