//! Durable sleeps on the injectable clock: the wake time is stored, so a
//! process that dies mid-sleep resumes it for the rest (or goes on at once
//! when it has passed); a sleep's cache key is its name, never its length;
//! `now()`/`random()` replay their recorded values; many instances sleep at
//! once without holding threads. The workflows are written with
//! `#[workflow]`, as users write them.

#[path = "support/child.rs"]
mod child;

#[path = "support/helpers.rs"]
mod helpers;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use saga_runtime::time::Clock;

use child::{DataDir, child_dir, report};
use helpers::within;

const SECOND: u64 = 1;
const HOUR: u64 = 60 * 60;
const DAY: u64 = 24 * HOUR;

/// `TestClock::new()`'s start, 2030-01-01T00:00:00Z, in Unix seconds: every
/// process of a crash test puts its clock on the same time line.
const EPOCH: u64 = 1_893_456_000;

/// `secs` after the time line's start.
fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(EPOCH + secs)
}

/// What `settle_for_a_week` saw: the recorded time before its sleep, a
/// recorded random number, and the time after it woke.
type Settled = (SystemTime, u64, SystemTime);

/// `now()` and `random()`, then `sleep("settle", "7 days")`, then `now()`.
#[workflow(name = "settle-for-a-week")]
async fn settle_for_a_week(ctx: WorkflowContext, (): ()) -> Result<Settled, WorkflowError> {
    let before = ctx.now().await;
    let lucky = ctx.random().await;
    // Seen by the parent of a crash test; a replay reports it again.
    report(&format!("random {lucky}"));
    ctx.sleep("settle", "7 days").await?;
    let after = ctx.now().await;
    Ok((before, lucky, after))
}

/// A sleep named "nap" of seven days, then the time it woke at.
#[workflow(name = "nap")]
async fn nap_a_week(ctx: WorkflowContext, (): ()) -> Result<SystemTime, WorkflowError> {
    ctx.sleep("nap", "7 days").await?;
    Ok(ctx.now().await)
}

/// The same sleep "nap" of one hour (a later release of `nap_a_week`),
/// then the time it woke at.
#[workflow(name = "nap")]
async fn nap_an_hour(ctx: WorkflowContext, (): ()) -> Result<SystemTime, WorkflowError> {
    ctx.sleep("nap", "1 hour").await?;
    Ok(ctx.now().await)
}

/// A sleep into the past, then one until three hours after the start; the
/// times it went on at.
#[workflow(name = "until")]
async fn until(ctx: WorkflowContext, (): ()) -> Result<(SystemTime, SystemTime), WorkflowError> {
    ctx.sleep_until("past", at(0) - Duration::from_secs(HOUR))
        .await?;
    let after_past = ctx.now().await;
    ctx.sleep_until("deadline", at(3 * HOUR)).await?;
    Ok((after_past, ctx.now().await))
}

/// Two sleeps of zero length, then the time.
#[workflow(name = "blink")]
async fn blink(ctx: WorkflowContext, (): ()) -> Result<SystemTime, WorkflowError> {
    ctx.sleep("blink", Duration::ZERO).await?;
    ctx.sleep("blink-again", "0 seconds").await?;
    Ok(ctx.now().await)
}

/// The child of a crash test: on a clock at the time line's start, starts
/// `settle_for_a_week`, reports once it sleeps, and waits to be killed.
async fn run_sleeping_child() {
    let Some(dir) = child_dir() else { return };
    let clock = TestClock::starting_at(at(0));
    let engine = Engine::builder()
        .clock(clock.clone())
        .open(&dir)
        .expect("child opens the store");
    let run = engine
        .start(settle_for_a_week, "settle-1", ())
        .await
        .expect("child starts the instance");
    within("the child's sleep", clock.wait_for_sleepers(1)).await;
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    report("sleeping");
    std::future::pending::<()>().await;
}

/// Runs the child of `test` until it sleeps, kills it, and returns the
/// random number its workflow drew.
fn kill_while_sleeping(test: &str, dir: &DataDir) -> u64 {
    let mut child = child::spawn(test, dir.path());
    let lucky = child.wait_for("random ").parse().expect("a number");
    child.wait_for("sleeping");
    child.kill();
    lucky
}

fn sleep_events(history: &[saga_runtime::inspect::Event]) -> (Vec<SystemTime>, Vec<SystemTime>) {
    let started = history
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SleepStarted { wake_at, .. } => Some(*wake_at),
            _ => None,
        })
        .collect();
    let completed = history
        .iter()
        .filter(|e| matches!(e.kind, EventKind::SleepCompleted { .. }))
        .map(|e| e.at)
        .collect();
    (started, completed)
}

#[tokio::test]
async fn a_restart_before_the_wake_time_sleeps_only_for_the_rest() {
    const TEST: &str = "a_restart_before_the_wake_time_sleeps_only_for_the_rest";
    if child_dir().is_some() {
        return run_sleeping_child().await;
    }
    let dir = DataDir::new("sleep-before-wake");
    let lucky = kill_while_sleeping(TEST, &dir);

    // One day later, by the clock, a new process opens the store.
    let clock = TestClock::starting_at(at(DAY));
    let engine = Engine::builder()
        .clock(clock.clone())
        .register(settle_for_a_week)
        .open(dir.path())
        .unwrap();
    let run = engine.instance("settle-1").await.unwrap();
    within("the resumed sleep", clock.wait_for_sleepers(1)).await;
    assert_eq!(run.status().await.unwrap(), Status::Waiting);

    // Six days minus a second later it still sleeps...
    clock.advance(Duration::from_secs(6 * DAY - SECOND));
    // The clock wakes what is due inside `advance`: still holding the
    // sleep, it says the sleep was not due.
    assert_eq!(clock.sleepers(), 1);
    assert_eq!(run.status().await.unwrap(), Status::Waiting);

    // ...and at the stored wake time (seven days after the start, not
    // seven days after the restart) it goes on.
    clock.advance(Duration::from_secs(SECOND));
    let (before, replayed_lucky, after) =
        within("the result", run.result::<Settled>()).await.unwrap();
    assert_eq!(before, at(0), "now() before the sleep replays its value");
    assert_eq!(replayed_lucky, lucky, "random() replays its value");
    assert_eq!(after, at(7 * DAY));

    let (started, completed) = sleep_events(&run.history().await.unwrap());
    assert_eq!(started, vec![at(7 * DAY)], "the sleep started once");
    assert_eq!(completed, vec![at(7 * DAY)]);
}

#[tokio::test]
async fn a_restart_after_the_wake_time_goes_on_at_once() {
    const TEST: &str = "a_restart_after_the_wake_time_goes_on_at_once";
    if child_dir().is_some() {
        return run_sleeping_child().await;
    }
    let dir = DataDir::new("sleep-after-wake");
    let lucky = kill_while_sleeping(TEST, &dir);

    // Eight days later nothing is left to sleep: no advance needed.
    let clock = TestClock::starting_at(at(8 * DAY));
    let engine = Engine::builder()
        .clock(clock.clone())
        .register(settle_for_a_week)
        .open(dir.path())
        .unwrap();
    let run = engine.instance("settle-1").await.unwrap();
    let (before, replayed_lucky, after) =
        within("the result", run.result::<Settled>()).await.unwrap();
    assert_eq!(before, at(0));
    assert_eq!(replayed_lucky, lucky);
    assert_eq!(after, at(8 * DAY));
    let (started, completed) = sleep_events(&run.history().await.unwrap());
    assert_eq!(started, vec![at(7 * DAY)]);
    assert_eq!(completed, vec![at(8 * DAY)]);
}

#[tokio::test]
async fn a_sleeps_cache_key_is_its_name_not_its_duration() {
    let dir = DataDir::new("sleep-key");
    let clock = TestClock::starting_at(at(0));
    let engine = Engine::builder()
        .clock(clock.clone())
        .open(dir.path())
        .unwrap();
    let run = engine.start(nap_a_week, "nap-1", ()).await.unwrap();
    within("the first sleep", clock.wait_for_sleepers(1)).await;
    drop(run);
    engine.close().await;

    // The new release sleeps "1 hour" under the same name: the instance
    // that already sleeps keeps its stored wake time.
    let engine = Engine::builder()
        .clock(clock.clone())
        .register(nap_an_hour)
        .open(dir.path())
        .unwrap();
    let run = engine.instance("nap-1").await.unwrap();
    within("the replayed sleep", clock.wait_for_sleepers(1)).await;
    clock.advance(Duration::from_secs(HOUR));
    assert_eq!(clock.sleepers(), 1, "the stored wake time is not due");
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    clock.advance(Duration::from_secs(7 * DAY - HOUR));
    let woke = within("the result", run.result::<SystemTime>())
        .await
        .unwrap();
    assert_eq!(woke, at(7 * DAY));
}

#[tokio::test]
async fn sleep_until_wakes_at_the_given_time_and_a_past_time_at_once() {
    let clock = TestClock::starting_at(at(0));
    let engine = helpers::fresh(Engine::builder().clock(clock.clone())).await;
    let run = engine.start(until, "until-1", ()).await.unwrap();
    within("the sleep", clock.wait_for_sleepers(1)).await;
    clock.advance(Duration::from_secs(3 * HOUR - SECOND));
    assert_eq!(clock.sleepers(), 1, "the deadline is not due");
    assert_eq!(run.status().await.unwrap(), Status::Waiting);
    clock.advance(Duration::from_secs(SECOND));
    let (after_past, after_deadline) = within("the result", run.result()).await.unwrap();
    assert_eq!(after_past, at(0), "a past time does not wait");
    assert_eq!(after_deadline, at(3 * HOUR));
}

#[tokio::test]
async fn a_zero_length_sleep_completes_at_once() {
    let clock = TestClock::starting_at(at(0));
    let engine = helpers::fresh(Engine::builder().clock(clock.clone())).await;
    let run = engine.start(blink, "blink-1", ()).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), at(0));
    let (started, completed) = sleep_events(&run.history().await.unwrap());
    assert_eq!(started, vec![at(0), at(0)]);
    assert_eq!(completed.len(), 2);
}

/// Ten thousand instances sleep at once, on the tasks of a two-thread
/// runtime (no thread each), and all wake when their hour has passed.
/// `benches/waiting_memory.rs` does the same in a release build and
/// measures their memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_instances_sleep_at_once_and_all_wake() {
    const N: usize = 10_000;
    let clock = TestClock::starting_at(at(0));
    let engine = helpers::fresh(Engine::builder().clock(clock.clone())).await;
    let mut starts = tokio::task::JoinSet::new();
    for i in 0..N {
        let engine = engine.clone();
        starts.spawn(async move { engine.start(nap_an_hour, &format!("nap-{i}"), ()).await });
    }
    let mut runs = Vec::with_capacity(N);
    while let Some(started) = within("the starts", starts.join_next()).await {
        runs.push(started.unwrap().unwrap());
    }
    within("every sleep", clock.wait_for_sleepers(N)).await;
    let waiting = engine
        .list(&saga_runtime::inspect::ListFilter::all().status(Status::Waiting))
        .await
        .unwrap();
    assert_eq!(waiting.len(), N);

    clock.advance(Duration::from_secs(HOUR));
    let mut woke = 0;
    for run in &runs {
        let at_wake = within("a wake-up", run.result()).await.unwrap();
        assert_eq!(at_wake, at(HOUR));
        woke += 1;
    }
    println!("{woke} of {N} sleeping instances woke at the hour");
    assert_eq!(woke, N);
    assert_eq!(clock.sleepers(), 0);
}

/// Sleeps a week, then waits a day for a go-ahead.
#[workflow(name = "settle-then-ask")]
async fn settle_then_ask(ctx: WorkflowContext, (): ()) -> Result<bool, WorkflowError> {
    ctx.sleep("settle", "7 days").await?;
    match ctx.wait_for_event::<bool>("ask", "go", "1 day").await {
        Ok(go) => Ok(go),
        Err(WaitError::Timeout { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// `auto_advancing_to_sleeps` skips a sleep at once but leaves an event
/// wait waiting: the test sends the event (told by `wait_for_event_waits`,
/// without a real sleep), or moves time past the deadline itself.
#[tokio::test]
async fn a_clock_that_skips_to_sleeps_leaves_event_waits_to_the_test() {
    let clock = TestClock::auto_advancing_to_sleeps();
    let engine = helpers::engine_on(&clock).await;
    let sent = engine.start(settle_then_ask, "ask-1", ()).await.unwrap();
    within("the event wait", clock.wait_for_event_waits(1)).await;
    assert_eq!(clock.now(), at(7 * DAY), "the week passed at once");
    engine.send_event("ask-1", "go", &true).await.unwrap();
    assert!(within("the result", sent.result()).await.unwrap());
    assert_eq!(clock.now(), at(7 * DAY), "the day was not skipped");

    // Nobody sends: the test moves time to the deadline, and it times out.
    let mut events = engine.subscribe();
    let timed_out = engine.start(settle_then_ask, "ask-2", ()).await.unwrap();
    let deadline = within("the wait's start", async {
        loop {
            let event = events.recv().await.unwrap();
            if let (true, EventKind::EventWaitStarted { deadline, .. }) =
                (event.instance == "ask-2", &event.kind)
            {
                break *deadline;
            }
        }
    })
    .await;
    within("the event wait", clock.wait_for_event_waits(1)).await;
    clock.advance_to(deadline);
    assert!(!within("the result", timed_out.result()).await.unwrap());
}

/// `next_wake` names one instance's next wake, so a test moves the clock
/// to it and no further, while another instance sleeps longer.
#[tokio::test]
async fn a_test_advances_to_one_instances_next_wake() {
    let clock = TestClock::starting_at(at(0));
    let engine = helpers::engine_on(&clock).await;
    let asks = engine.start(settle_then_ask, "asks", ()).await.unwrap();
    let naps = engine.start(nap_a_week, "naps", ()).await.unwrap();
    within("both asleep", clock.wait_for_sleeps(2)).await;
    let wake = asks.next_wake().await.unwrap();
    assert_eq!(wake, Some(at(7 * DAY)), "the settle sleep");
    clock.advance_to(wake.unwrap());
    // Awake, it waits a day for its event: its next wake is the deadline.
    within("the event wait", clock.wait_for_event_waits(1)).await;
    assert_eq!(asks.next_wake().await.unwrap(), Some(at(8 * DAY)));
    clock.advance_to(asks.next_wake().await.unwrap().unwrap());
    assert!(!within("the timed-out ask", asks.result()).await.unwrap());
    assert_eq!(asks.next_wake().await.unwrap(), None, "it ended");
    // The other woke at its own week, not later.
    assert_eq!(within("the nap", naps.result()).await.unwrap(), at(7 * DAY));
}

/// Sleeps for its input's seconds, then the time it woke at.
#[workflow(name = "nap-for")]
async fn nap_for(ctx: WorkflowContext, secs: u64) -> Result<SystemTime, WorkflowError> {
    ctx.sleep("nap", Duration::from_secs(secs)).await?;
    Ok(ctx.now().await)
}

/// Hibernating instances share one timer: sleeping different lengths
/// (the longest started first, so each comes before those it waits
/// behind), each still counts as a sleeper, and each wakes at its own
/// time, in order, while the later ones sleep on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_sleeping_different_lengths_wake_in_order() {
    const N: u64 = 12;
    let clock = TestClock::starting_at(at(0));
    let engine = helpers::engine_on(&clock).await;
    let mut runs = Vec::new();
    for i in (1..=N).rev() {
        let run = engine.start(nap_for, &format!("nap-{i}"), i * HOUR).await;
        runs.push((i, run.unwrap()));
    }
    within("every sleep", clock.wait_for_sleepers(N as usize)).await;
    runs.reverse();
    for (i, run) in &runs {
        // To its time and no further: one that had not let go of its
        // driver yet wakes at once when it does, still at its time.
        clock.advance_to(at(i * HOUR));
        assert_eq!(
            within("a wake-up", run.result()).await.unwrap(),
            at(i * HOUR)
        );
        if let Some((_, next)) = runs.get(*i as usize) {
            assert_eq!(
                next.status().await.unwrap(),
                Status::Waiting,
                "the next sleeps on"
            );
        }
    }
    assert_eq!(clock.sleepers(), 0);
    assert_eq!(clock.advance_to_next_wake(), None);
}

/// A clock of a user's own, which the engine knows only as a `Clock`.
struct OwnClock(TestClock);

impl Clock for OwnClock {
    fn now(&self) -> SystemTime {
        self.0.now()
    }

    fn sleep_until(&self, deadline: SystemTime) -> saga_runtime::time::Sleep {
        self.0.sleep_until(deadline)
    }

    fn event_deadline(&self, deadline: SystemTime) -> saga_runtime::time::Sleep {
        self.0.event_deadline(deadline)
    }

    fn timeout_at(&self, deadline: SystemTime) -> saga_runtime::time::Sleep {
        self.0.timeout_at(deadline)
    }
}

/// On a clock the engine knows only as a `Clock`, a short sleep started
/// after a long one wakes first, and the long one at its own time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_users_clock_a_shorter_sleep_started_later_wakes_first() {
    let clock = TestClock::starting_at(at(0));
    let engine = helpers::fresh(Engine::builder().clock(OwnClock(clock.clone()))).await;
    let long = engine.start(nap_for, "long", 7 * DAY).await.unwrap();
    within("the long sleep", clock.wait_for_sleepers(1)).await;
    let short = engine.start(nap_for, "short", HOUR).await.unwrap();
    helpers::wait_until("the short one waits", || async {
        short.status().await.unwrap() == Status::Waiting
    })
    .await;
    clock.advance(Duration::from_secs(HOUR));
    assert_eq!(
        within("the short nap", short.result()).await.unwrap(),
        at(HOUR)
    );
    assert_eq!(long.status().await.unwrap(), Status::Waiting);
    clock.advance_to(at(7 * DAY));
    assert_eq!(
        within("the long nap", long.result()).await.unwrap(),
        at(7 * DAY)
    );
}

/// A sleeping instance that is terminated, or whose engine closes, leaves
/// no timer behind: the clock counts no sleeper for it.
#[tokio::test]
async fn a_terminated_or_closed_sleepers_timer_goes() {
    let clock = TestClock::starting_at(at(0));
    let engine = helpers::engine_on(&clock).await;
    let ended = engine.start(nap_for, "ended", 7 * DAY).await.unwrap();
    let kept = engine.start(nap_for, "kept", HOUR).await.unwrap();
    within("both asleep", clock.wait_for_sleepers(2)).await;
    ended.terminate().await.unwrap();
    helpers::wait_until("only the other sleeps", || async { clock.sleepers() == 1 }).await;
    clock.advance_to(at(HOUR));
    assert_eq!(within("the nap", kept.result()).await.unwrap(), at(HOUR));
    assert_eq!(ended.status().await.unwrap(), Status::Terminated);
    assert_eq!(clock.advance_to_next_wake(), None, "nothing sleeps");

    let sleeping = engine.start(nap_for, "closed", 7 * DAY).await.unwrap();
    within("asleep", clock.wait_for_sleepers(1)).await;
    drop(sleeping);
    engine.close().await;
    assert_eq!(clock.sleepers(), 0, "a closed engine's timers went");
}
