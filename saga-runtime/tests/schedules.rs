//! Schedules, rule by rule, on the test clock: one instance per tick with
//! the documented ids (`name.YYYYMMDDThhmmssZ`, `~mN` when triggered by
//! hand), across a reopen; the catch-up policies after downtime; overlap
//! skip and allow; the daylight-saving days of America/New_York; pause
//! and resume (no catch-up of paused ticks), durable; trigger; jitter,
//! alike on every engine; overlap queue-one, durable; the last
//! registration wins; bad input as typed errors before anything is
//! stored; run-time schedules (created, fired by any worker that runs the
//! workflow, durable across a reopen, deleted, never overwritten by a
//! declaration). The workflows are written with `#[workflow]`, as users write
//! them.

#[path = "support/helpers.rs"]
mod helpers;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use saga_runtime::prelude::*;
use saga_runtime::schedule::{CatchUp, Overlap, Schedule, ScheduleInfo, Tick};
use saga_runtime::testing::TestClock;
use saga_runtime::time::Clock;
use saga_runtime::{Engine, EngineBuilder, Error};

use helpers::{Reopenable, fresh, until_status, wait_until};

const MINUTE: u64 = 60;
const QUARTER: u64 = 15 * MINUTE;
const HOUR: u64 = 60 * MINUTE;

/// `TestClock::new()`'s start, 2030-01-01T00:00:00Z, in Unix seconds.
const EPOCH: i64 = 1_893_456_000;

/// Returns the tick's time and its manual count: what the schedule gave it.
#[workflow(name = "remind")]
async fn remind(_ctx: WorkflowContext, tick: (i64, u32)) -> Result<(i64, u32), WorkflowError> {
    Ok(tick)
}

/// Runs until it receives "release": a tick that is still running.
#[workflow(name = "hold")]
async fn hold(ctx: WorkflowContext, _at: i64) -> Result<(), WorkflowError> {
    let () = ctx.wait_for_event("release", "release", "7 days").await?;
    Ok(())
}

fn input(tick: Tick) -> (i64, u32) {
    (tick.unix_seconds(), tick.manual())
}

/// `name`'s tick at `secs` seconds since the epoch, by the id grammar:
/// `name.YYYYMMDDThhmmssZ`.
fn tick_id(name: &str, secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{name}.{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

fn at(secs: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs as u64)
}

fn builder(clock: &TestClock, schedule: Schedule) -> EngineBuilder {
    Engine::builder().clock(clock.clone()).schedule(schedule)
}

/// The ids of the schedule's instances, found by its tag, sorted.
async fn instances(engine: &Engine, name: &str) -> Vec<String> {
    let filter = ListFilter::all().tag("schedule", name);
    let mut ids: Vec<String> = engine
        .list(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    ids.sort();
    ids
}

async fn info(engine: &Engine, name: &str) -> ScheduleInfo {
    let listed = engine.schedules().list().await.unwrap();
    listed.into_iter().find(|s| s.name == name).unwrap()
}

/// Waits until the schedule fired what was due at the clock's time: its
/// next fire time is in the future (or it is paused).
async fn caught_up(engine: &Engine, clock: &TestClock, name: &str) {
    let now = clock.now();
    wait_until("the schedule to catch up with the clock", || async {
        let info = info(engine, name).await;
        info.paused || info.next_fires.first().is_some_and(|next| *next > now)
    })
    .await;
}

/// Waits until the schedule has exactly `ids`, and checks that no more come.
async fn has_exactly(engine: &Engine, name: &str, ids: &[String]) {
    wait_until(&format!("{} instances of {name}", ids.len()), || async {
        instances(engine, name).await.len() >= ids.len()
    })
    .await;
    helpers::quiet(engine).await;
    assert_eq!(instances(engine, name).await, ids);
}

/// Advances the clock by `by`, `times` times, waiting after each step for
/// the schedule to catch up.
async fn step(engine: &Engine, clock: &TestClock, name: &str, by: u64, times: u64) {
    for _ in 0..times {
        clock.advance(Duration::from_secs(by));
        caught_up(engine, clock, name).await;
    }
}

#[tokio::test]
async fn a_hundred_ticks_fire_a_hundred_instances() {
    let clock = TestClock::new();
    let schedule = Schedule::every("each-minute", "1 minute").start(remind, input);
    let engine = fresh(builder(&clock, schedule)).await;
    step(&engine, &clock, "each-minute", MINUTE, 100).await;
    let ids: Vec<String> = (1..=100)
        .map(|i| tick_id("each-minute", EPOCH + i * 60))
        .collect();
    has_exactly(&engine, "each-minute", &ids).await;
    assert_eq!(ids[0], "each-minute.20300101T000100Z");
    // The tick's time reaches the workflow as its input.
    let last = engine.instance(&ids[99]).await.unwrap();
    until_status(&last, Status::Complete).await;
    let result: (i64, u32) = last.result().await.unwrap();
    assert_eq!(result, (EPOCH + 6000, 0));
}

#[tokio::test]
async fn every_15_minutes_for_25_hours_across_a_reopen_is_100_instances() {
    let clock = TestClock::new();
    let store = Reopenable::new("schedreopen").await;
    let open = || {
        let schedule = Schedule::every("quarterly", "15 minutes").start(remind, input);
        builder(&clock, schedule)
    };
    let engine = store.open(open).await;
    step(&engine, &clock, "quarterly", QUARTER, 50).await;
    wait_until("50 instances", || async {
        instances(&engine, "quarterly").await.len() == 50
    })
    .await;
    // Closed once it ended: on PostgreSQL a tick instance claimed by the
    // next worker before it ran may lose its tag in the index (to look into).
    let fiftieth = tick_id("quarterly", EPOCH + 50 * 900);
    until_status(&engine.instance(&fiftieth).await.unwrap(), Status::Complete).await;
    engine.close().await;

    let engine = store.open(open).await;
    step(&engine, &clock, "quarterly", QUARTER, 50).await;
    let ids: Vec<String> = (1..=100)
        .map(|i| tick_id("quarterly", EPOCH + i * 900))
        .collect();
    has_exactly(&engine, "quarterly", &ids).await;
    assert_eq!(ids[0], "quarterly.20300101T001500Z");
    assert_eq!(ids[99], "quarterly.20300102T010000Z");
    let info = info(&engine, "quarterly").await;
    assert_eq!(info.last_tick, Some(at(EPOCH + 25 * 3600)));
    assert_eq!(info.next_fires[0], at(EPOCH + 25 * 3600 + 900));
}

/// Every 15 minutes with `catch_up`, after 2 h 10 min of downtime: the
/// ticks it fires.
async fn after_downtime(catch_up: CatchUp) -> (Engine, TestClock, Vec<String>) {
    let clock = TestClock::new();
    let schedule = Schedule::every("catching-up", "15 minutes")
        .catch_up(catch_up)
        .start(remind, input);
    let engine = fresh(builder(&clock, schedule)).await;
    // Registered: its first tick is 00:15.
    assert_eq!(
        info(&engine, "catching-up").await.next_fires[0],
        at(EPOCH + 900)
    );
    clock.advance(Duration::from_secs(2 * HOUR + 10 * MINUTE));
    caught_up(&engine, &clock, "catching-up").await;
    helpers::quiet(&engine).await;
    let ids = instances(&engine, "catching-up").await;
    (engine, clock, ids)
}

#[tokio::test]
async fn catch_up_latest_runs_only_the_latest_missed_tick() {
    let (engine, _clock, ids) = after_downtime(CatchUp::Latest).await;
    assert_eq!(ids, [tick_id("catching-up", EPOCH + 2 * 3600)]);
    let info = info(&engine, "catching-up").await;
    assert_eq!(info.catch_up, CatchUp::Latest);
    assert_eq!(info.next_fires[0], at(EPOCH + 2 * 3600 + 900));
}

#[tokio::test]
async fn catch_up_skip_runs_none_of_the_missed_ticks_then_fires_on_time() {
    let (engine, clock, ids) = after_downtime(CatchUp::Skip).await;
    assert!(ids.is_empty(), "{ids:?}");
    step(&engine, &clock, "catching-up", 5 * MINUTE, 1).await;
    has_exactly(
        &engine,
        "catching-up",
        &[tick_id("catching-up", EPOCH + 2 * 3600 + 900)],
    )
    .await;
}

#[tokio::test]
async fn catch_up_all_runs_every_missed_tick_up_to_its_bound() {
    let (engine, _clock, ids) = after_downtime(CatchUp::All { at_most: 3 }).await;
    let latest: Vec<String> = [5400, 6300, 7200]
        .iter()
        .map(|s| tick_id("catching-up", EPOCH + s))
        .collect();
    has_exactly(&engine, "catching-up", &latest).await;
    drop(ids);

    let (engine, _clock, _) = after_downtime(CatchUp::All { at_most: 100 }).await;
    let all: Vec<String> = (1..=8)
        .map(|i| tick_id("catching-up", EPOCH + i * 900))
        .collect();
    has_exactly(&engine, "catching-up", &all).await;
}

#[tokio::test]
async fn overlap_skip_skips_a_tick_while_the_last_one_runs() {
    let clock = TestClock::new();
    let schedule = Schedule::every("exclusive", "15 minutes")
        .overlap(Overlap::Skip)
        .start(hold, |tick: Tick| tick.unix_seconds());
    let engine = fresh(builder(&clock, schedule)).await;
    let first = tick_id("exclusive", EPOCH + 900);
    step(&engine, &clock, "exclusive", QUARTER, 1).await;
    has_exactly(&engine, "exclusive", std::slice::from_ref(&first)).await;
    let first_run = engine.instance(&first).await.unwrap();
    until_status(&first_run, Status::Waiting).await;
    // 00:30: the 00:15 instance still runs, so this tick is skipped.
    step(&engine, &clock, "exclusive", QUARTER, 1).await;
    has_exactly(&engine, "exclusive", std::slice::from_ref(&first)).await;
    engine.send_event(&first, "release", &()).await.unwrap();
    until_status(&first_run, Status::Complete).await;
    // 00:45: nothing runs any more.
    step(&engine, &clock, "exclusive", QUARTER, 1).await;
    has_exactly(
        &engine,
        "exclusive",
        &[first, tick_id("exclusive", EPOCH + 2700)],
    )
    .await;
    assert_eq!(info(&engine, "exclusive").await.overlap, Overlap::Skip);
}

#[tokio::test]
async fn overlap_queue_one_keeps_one_tick_until_the_last_one_ends() {
    let clock = TestClock::new();
    let store = Reopenable::new("schedqueueone").await;
    let open = || {
        let schedule = Schedule::every("queued", "15 minutes")
            .overlap(Overlap::QueueOne)
            .start(hold, |tick: Tick| tick.unix_seconds());
        builder(&clock, schedule)
    };
    let engine = store.open(open).await;
    let first = tick_id("queued", EPOCH + 900);
    step(&engine, &clock, "queued", QUARTER, 1).await;
    has_exactly(&engine, "queued", std::slice::from_ref(&first)).await;
    until_status(&engine.instance(&first).await.unwrap(), Status::Waiting).await;
    // 00:30 and 00:45 fall due while the 00:15 instance runs: 00:30 is
    // kept, 00:45 skipped.
    step(&engine, &clock, "queued", QUARTER, 2).await;
    has_exactly(&engine, "queued", std::slice::from_ref(&first)).await;
    let queued = info(&engine, "queued").await;
    assert_eq!(queued.kept_tick, Some(at(EPOCH + 1800)));
    assert_eq!(queued.overlap, Overlap::QueueOne);

    // The kept tick is durable.
    engine.close().await;
    let engine = store.open(open).await;
    helpers::quiet(&engine).await;
    has_exactly(&engine, "queued", std::slice::from_ref(&first)).await;
    assert_eq!(
        info(&engine, "queued").await.kept_tick,
        Some(at(EPOCH + 1800))
    );

    // The 00:15 instance ends: the kept tick starts at once (the clock
    // stands still), under its own time.
    engine.send_event(&first, "release", &()).await.unwrap();
    until_status(&engine.instance(&first).await.unwrap(), Status::Complete).await;
    let kept = tick_id("queued", EPOCH + 1800);
    assert_eq!(kept, "queued.20300101T003000Z");
    has_exactly(&engine, "queued", &[first.clone(), kept.clone()]).await;
    let kept_run = engine.instance(&kept).await.unwrap();
    until_status(&kept_run, Status::Waiting).await;
    assert_eq!(info(&engine, "queued").await.kept_tick, None);

    // It is now the tick that runs: 01:00 is kept in its turn.
    step(&engine, &clock, "queued", QUARTER, 1).await;
    has_exactly(&engine, "queued", &[first, kept.clone()]).await;
    assert_eq!(
        info(&engine, "queued").await.kept_tick,
        Some(at(EPOCH + 3600))
    );
}

#[tokio::test]
async fn overlap_allow_starts_each_tick_while_the_last_one_runs() {
    let clock = TestClock::new();
    let schedule =
        Schedule::every("overlapping", "15 minutes").start(hold, |tick: Tick| tick.unix_seconds());
    let engine = fresh(builder(&clock, schedule)).await;
    step(&engine, &clock, "overlapping", QUARTER, 2).await;
    let ids = [
        tick_id("overlapping", EPOCH + 900),
        tick_id("overlapping", EPOCH + 1800),
    ];
    has_exactly(&engine, "overlapping", &ids).await;
    for id in &ids {
        until_status(&engine.instance(id).await.unwrap(), Status::Waiting).await;
    }
    assert_eq!(info(&engine, "overlapping").await.overlap, Overlap::Allow);
}

#[tokio::test]
async fn jitter_delays_each_tick_alike_everywhere_and_keeps_its_id() {
    let clock = TestClock::new();
    let store = Reopenable::new("schedjitter").await;
    let open = || {
        let schedule = Schedule::every("spread", "1 hour")
            .jitter("10 minutes")
            .start(remind, input);
        builder(&clock, schedule)
    };
    let engine = store.open(open).await;
    let planned = info(&engine, "spread").await;
    assert_eq!(planned.jitter, Some(Duration::from_secs(10 * MINUTE)));
    let planned = planned.next_fires;
    // Each tick fires within [its time, its time + 10 minutes).
    let ticks: Vec<SystemTime> = (1..=3).map(|k| at(EPOCH + k * 3600)).collect();
    for (fire, tick) in planned.iter().zip(&ticks) {
        let delay = fire.duration_since(*tick).expect("not before its time");
        assert!(delay < Duration::from_secs(10 * MINUTE), "{planned:?}");
    }
    assert_ne!(planned, ticks, "no tick is delayed at all");
    // Another engine, on a store of its own, plans the same times.
    let other = fresh(open()).await;
    assert_eq!(info(&other, "spread").await.next_fires, planned);
    other.close().await;

    // A millisecond before its fire time the 01:00 tick has not fired; at
    // it, it has, named by its time and given its time.
    let before = planned[0].duration_since(clock.now()).unwrap() - Duration::from_millis(1);
    clock.advance(before);
    helpers::quiet(&engine).await;
    assert!(instances(&engine, "spread").await.is_empty());
    clock.advance(Duration::from_millis(1));
    let first = tick_id("spread", EPOCH + 3600);
    has_exactly(&engine, "spread", std::slice::from_ref(&first)).await;
    let result: (i64, u32) = engine
        .instance(&first)
        .await
        .unwrap()
        .result()
        .await
        .unwrap();
    assert_eq!(result, (EPOCH + 3600, 0));

    // After a reopen the next ticks fire when they were planned to.
    engine.close().await;
    let engine = store.open(open).await;
    assert_eq!(info(&engine, "spread").await.next_fires[..2], planned[1..]);
    clock.advance(planned[1].duration_since(clock.now()).unwrap());
    has_exactly(&engine, "spread", &[first, tick_id("spread", EPOCH + 7200)]).await;
}

/// A daily cron at `hh:mm` in America/New_York, stepped through 48 hours
/// from `from` in steps of 10 minutes: the ids it fired.
async fn new_york_days(name: &str, expression: &str, from: &str) -> Vec<String> {
    let start: i64 = from.parse().unwrap();
    let clock = TestClock::starting_at(at(start));
    let schedule = Schedule::cron(name, expression)
        .time_zone("America/New_York")
        .start(remind, input);
    let engine = fresh(builder(&clock, schedule)).await;
    step(&engine, &clock, name, 10 * MINUTE, 6 * 48).await;
    helpers::quiet(&engine).await;
    instances(&engine, name).await
}

#[tokio::test]
async fn a_time_skipped_by_spring_forward_fires_once_after_the_gap() {
    // From 2030-03-09T12:00:00Z; 02:00 EST jumps to 03:00 EDT on 2030-03-10.
    let ids = new_york_days("spring", "30 2 * * *", "1899288000").await;
    assert_eq!(
        ids,
        [
            // 03:00 EDT, the first instant after the gap.
            "spring.20300310T070000Z",
            // 02:30 EDT the next day.
            "spring.20300311T063000Z",
        ]
    );
}

#[tokio::test]
async fn a_time_repeated_by_fall_back_fires_once_at_its_first() {
    // From 2030-11-02T12:00:00Z; 02:00 EDT falls back to 01:00 EST on 2030-11-03.
    let ids = new_york_days("autumn", "30 1 * * *", "1919851200").await;
    assert_eq!(
        ids,
        [
            // 01:30 EDT; not again at 01:30 EST (06:30 UTC).
            "autumn.20301103T053000Z",
            // 01:30 EST the next day.
            "autumn.20301104T063000Z",
        ]
    );
}

#[tokio::test]
async fn a_paused_schedule_fires_nothing_and_does_not_catch_up() {
    let clock = TestClock::new();
    let store = Reopenable::new("schedpause").await;
    let open = || {
        let schedule = Schedule::every("pausable", "15 minutes")
            .catch_up(CatchUp::All { at_most: 10 })
            .start(remind, input);
        builder(&clock, schedule)
    };
    let engine = store.open(open).await;
    step(&engine, &clock, "pausable", QUARTER, 1).await;
    engine.schedules().pause("pausable").await.unwrap();
    engine.schedules().pause("pausable").await.unwrap();
    let paused = info(&engine, "pausable").await;
    assert!(paused.paused && paused.next_fires.is_empty(), "{paused:?}");
    clock.advance(Duration::from_secs(HOUR));
    helpers::quiet(&engine).await;
    has_exactly(&engine, "pausable", &[tick_id("pausable", EPOCH + 900)]).await;

    // Paused is durable.
    engine.close().await;
    let engine = store.open(open).await;
    assert!(info(&engine, "pausable").await.paused);
    clock.advance(Duration::from_secs(HOUR));
    helpers::quiet(&engine).await;

    // 02:15: resumed, the next tick is 02:30; the eight missed stay missed.
    engine.schedules().resume("pausable").await.unwrap();
    let resumed = info(&engine, "pausable").await;
    assert!(!resumed.paused);
    assert_eq!(resumed.next_fires[0], at(EPOCH + 2 * 3600 + 1800));
    step(&engine, &clock, "pausable", QUARTER, 1).await;
    has_exactly(
        &engine,
        "pausable",
        &[
            tick_id("pausable", EPOCH + 900),
            tick_id("pausable", EPOCH + 2 * 3600 + 1800),
        ],
    )
    .await;
}

#[tokio::test]
async fn trigger_starts_an_extra_instance_named_manual() {
    let clock = TestClock::new();
    let schedule = Schedule::every("on-demand", "1 hour").start(remind, input);
    let engine = fresh(builder(&clock, schedule)).await;
    clock.advance(Duration::from_secs(5 * MINUTE + 3));
    let first = engine.schedules().trigger("on-demand").await.unwrap();
    let second = engine.schedules().trigger("on-demand").await.unwrap();
    assert_eq!(first.id(), "on-demand.20300101T000503Z~m1");
    assert_eq!(second.id(), "on-demand.20300101T000503Z~m2");
    let result: (i64, u32) = first.result().await.unwrap();
    assert_eq!(result, (EPOCH + 303, 1));
    // Paused, it can still be triggered; the schedule's own ticks are not
    // disturbed.
    engine.schedules().pause("on-demand").await.unwrap();
    clock.advance(Duration::from_secs(MINUTE));
    let third = engine.schedules().trigger("on-demand").await.unwrap();
    assert_eq!(third.id(), "on-demand.20300101T000603Z~m1");
    let ids = instances(&engine, "on-demand").await;
    assert_eq!(ids.len(), 3);
    assert_eq!(info(&engine, "on-demand").await.last_tick, None);
}

#[tokio::test]
async fn the_last_registration_wins() {
    let clock = TestClock::new();
    let store = Reopenable::new("schedredeclared").await;
    let engine = store
        .open(|| {
            builder(
                &clock,
                Schedule::every("redeclared", "15 minutes").start(remind, input),
            )
        })
        .await;
    step(&engine, &clock, "redeclared", QUARTER, 1).await;
    let first = tick_id("redeclared", EPOCH + 900);
    has_exactly(&engine, "redeclared", std::slice::from_ref(&first)).await;
    until_status(&engine.instance(&first).await.unwrap(), Status::Complete).await;
    engine.close().await;
    // The next release fires hourly at :05.
    let engine = store
        .open(|| {
            let schedule = Schedule::every("redeclared", "1 hour")
                .offset("5 minutes")
                .start(remind, input);
            builder(&clock, schedule)
        })
        .await;
    let info = info(&engine, "redeclared").await;
    assert_eq!(info.timing, "every 3600 s, offset 300 s");
    assert_eq!(info.next_fires[0], at(EPOCH + 3600 + 300));
    assert_eq!(info.last_tick, Some(at(EPOCH + 900)));
    step(&engine, &clock, "redeclared", 50 * MINUTE, 1).await;
    has_exactly(
        &engine,
        "redeclared",
        &[
            tick_id("redeclared", EPOCH + 900),
            tick_id("redeclared", EPOCH + 3900),
        ],
    )
    .await;
}

#[tokio::test]
async fn bad_schedules_are_typed_errors_before_anything_is_stored() {
    let open = |schedule: Schedule| Engine::builder().schedule(schedule).temporary().err();
    let bad_cron = open(Schedule::cron("nightly", "0 2 * *").start(remind, input));
    let Some(Error::InvalidCron { expression, .. }) = &bad_cron else {
        panic!("{bad_cron:?}");
    };
    assert_eq!(expression, "0 2 * *");
    let message = bad_cron.unwrap().to_string();
    assert!(
        message.contains("\"0 2 * *\"") && message.contains("e.g. \"0 2 * * *\""),
        "{message}"
    );

    let zone = open(
        Schedule::cron("nightly", "0 2 * * *")
            .time_zone("Europe/Pariss")
            .start(remind, input),
    );
    assert!(
        matches!(&zone, Some(Error::UnknownTimeZone { zone, .. }) if zone == "Europe/Pariss"),
        "{zone:?}"
    );
    assert!(zone.unwrap().to_string().contains("e.g. \"Europe/Paris\""));

    for interval in ["0 minutes", "soon", "15 fortnights", "1500 ms"] {
        let error = open(Schedule::every("reminders", interval).start(remind, input));
        let Some(Error::InvalidInterval {
            interval: quoted, ..
        }) = &error
        else {
            panic!("{interval}: {error:?}");
        };
        assert_eq!(quoted, interval);
        assert!(error.unwrap().to_string().contains("e.g. \"15 minutes\""));
    }

    for (schedule, jitter) in [
        (Schedule::every("reminders", "15 minutes"), "15 minutes"),
        (Schedule::every("reminders", "15 minutes"), "0 seconds"),
        (Schedule::every("reminders", "15 minutes"), "a while"),
    ] {
        let error = open(schedule.jitter(jitter).start(remind, input));
        let Some(Error::InvalidJitter { jitter: quoted, .. }) = &error else {
            panic!("{jitter}: {error:?}");
        };
        assert_eq!(quoted, jitter);
        assert!(error.unwrap().to_string().contains("e.g. \"30 seconds\""));
    }
    let sub_ms = open(
        Schedule::every("reminders", "15 minutes")
            .jitter(Duration::from_micros(10))
            .start(remind, input),
    );
    assert!(
        matches!(&sub_ms, Some(Error::InvalidJitter { reason, .. }) if reason.contains("milliseconds")),
        "{sub_ms:?}"
    );

    let nothing = open(Schedule::every("reminders", "15 minutes"));
    assert!(
        matches!(&nothing, Some(Error::InvalidSchedule { reason, .. }) if reason.contains(".start(")),
        "{nothing:?}"
    );
    let twice = Engine::builder()
        .schedule(Schedule::every("reminders", "15 minutes").start(remind, input))
        .schedule(Schedule::every("reminders", "1 hour").start(remind, input))
        .temporary()
        .err();
    assert!(
        matches!(twice, Some(Error::InvalidSchedule { .. })),
        "{twice:?}"
    );
    let name = open(Schedule::every("a.b", "1 hour").start(remind, input));
    assert!(
        matches!(name, Some(Error::InvalidSchedule { .. })),
        "{name:?}"
    );

    // Control calls on a schedule nobody declared.
    let engine = fresh(Engine::builder()).await;
    for error in [
        engine.schedules().pause("nope").await.unwrap_err(),
        engine.schedules().resume("nope").await.unwrap_err(),
        engine.schedules().trigger("nope").await.unwrap_err(),
    ] {
        assert!(matches!(error, Error::UnknownSchedule { .. }), "{error:?}");
    }
    assert!(engine.schedules().list().await.unwrap().is_empty());
}

#[tokio::test]
async fn two_workers_with_one_schedule_fire_each_tick_once() {
    // Two workers share a store only on PostgreSQL.
    if !helpers::on_postgres() {
        return;
    }
    let clock = TestClock::new();
    let store = Reopenable::new("schedworkers").await;
    let open = || {
        builder(
            &clock,
            Schedule::every("shared", "1 minute").start(remind, input),
        )
    };
    let (one, two) = (store.open(open).await, store.open(open).await);
    for _ in 0..30 {
        clock.advance(Duration::from_secs(MINUTE));
        caught_up(&one, &clock, "shared").await;
        caught_up(&two, &clock, "shared").await;
    }
    let ids: Vec<String> = (1..=30)
        .map(|i| tick_id("shared", EPOCH + i * 60))
        .collect();
    has_exactly(&one, "shared", &ids).await;
    assert_eq!(instances(&two, "shared").await, ids);
}

/// An engine on `clock` that registers `remind` and declares nothing.
fn worker(clock: &TestClock) -> EngineBuilder {
    Engine::builder().clock(clock.clone()).register(remind)
}

/// A run-time schedule every minute whose ticks start `remind` with
/// `input`.
fn every_minute(name: &str, input: (i64, u32)) -> Schedule {
    Schedule::every(name, "1 minute").start_with_input(remind, &input)
}

/// The result of the instance `id`, once it completed.
async fn result_of(engine: &Engine, id: &str) -> (i64, u32) {
    let instance = engine.instance(id).await.unwrap();
    until_status(&instance, Status::Complete).await;
    instance.result().await.unwrap()
}

#[tokio::test]
async fn a_run_time_schedule_fires_its_ticks_until_deleted() {
    let clock = TestClock::new();
    let engine = fresh(worker(&clock)).await;
    engine
        .schedules()
        .create(every_minute("created", (7, 1)))
        .await
        .unwrap();
    // Creating it again alike does nothing.
    engine
        .schedules()
        .create(every_minute("created", (7, 1)))
        .await
        .unwrap();
    let listed = info(&engine, "created").await;
    assert!(listed.run_time && !listed.declared_here, "{listed:?}");
    assert_eq!(
        (listed.timing.as_str(), listed.workflow.as_str()),
        ("every 60 s", "remind")
    );
    assert_eq!(listed.next_fires[0], at(EPOCH + 60));
    step(&engine, &clock, "created", MINUTE, 3).await;
    let ids: Vec<String> = (1..=3)
        .map(|i| tick_id("created", EPOCH + i * 60))
        .collect();
    has_exactly(&engine, "created", &ids).await;
    // Every tick gets the stored input.
    assert_eq!(result_of(&engine, &ids[2]).await, (7, 1));
    // The last tick's instance ended: its outcome.
    assert_eq!(
        info(&engine, "created").await.last_outcome,
        Some(Status::Complete)
    );
    let manual = engine.schedules().trigger("created").await.unwrap();
    assert!(manual.id().ends_with("~m1"), "{}", manual.id());

    engine.schedules().delete("created").await.unwrap();
    assert!(engine.schedules().list().await.unwrap().is_empty());
    clock.advance(Duration::from_secs(3 * MINUTE));
    helpers::quiet(&engine).await;
    let mut with_manual = ids.clone();
    with_manual.push(manual.id().to_owned());
    with_manual.sort();
    assert_eq!(instances(&engine, "created").await, with_manual);
    let again = engine.schedules().delete("created").await.unwrap_err();
    assert!(matches!(again, Error::UnknownSchedule { .. }), "{again:?}");
    // Deleted, the name is free for another one.
    engine
        .schedules()
        .create(every_minute("created", (8, 0)))
        .await
        .unwrap();
    step(&engine, &clock, "created", MINUTE, 1).await;
    let next = tick_id("created", EPOCH + 7 * 60);
    wait_until("the new schedule's tick", || async {
        instances(&engine, "created").await.contains(&next)
    })
    .await;
    assert_eq!(result_of(&engine, &next).await, (8, 0));
}

#[tokio::test]
async fn a_run_time_schedule_fires_where_its_workflow_is_registered() {
    let clock = TestClock::new();
    let engine = fresh(Engine::builder().clock(clock.clone())).await;
    engine
        .schedules()
        .create(every_minute("unrun", (4, 0)))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(MINUTE));
    helpers::quiet(&engine).await;
    assert!(instances(&engine, "unrun").await.is_empty());
    assert_eq!(info(&engine, "unrun").await.last_tick, None);
    // Registered now: it fires the tick it missed (catch-up latest).
    engine.register(remind).unwrap();
    let first = tick_id("unrun", EPOCH + 60);
    has_exactly(&engine, "unrun", std::slice::from_ref(&first)).await;
    assert_eq!(result_of(&engine, &first).await, (4, 0));
}

#[tokio::test]
async fn a_run_time_schedule_survives_a_reopen() {
    let clock = TestClock::new();
    let store = Reopenable::new("schedcreated").await;
    let engine = store.open(|| worker(&clock)).await;
    engine
        .schedules()
        .create(every_minute("durable", (3, 0)))
        .await
        .unwrap();
    step(&engine, &clock, "durable", MINUTE, 2).await;
    let second = tick_id("durable", EPOCH + 120);
    wait_until("2 instances", || async {
        instances(&engine, "durable").await.len() == 2
    })
    .await;
    until_status(&engine.instance(&second).await.unwrap(), Status::Complete).await;
    engine.close().await;

    // Nothing declares it: the reopened engine fires it from the store.
    let engine = store.open(|| worker(&clock)).await;
    step(&engine, &clock, "durable", MINUTE, 2).await;
    let ids: Vec<String> = (1..=4)
        .map(|i| tick_id("durable", EPOCH + i * 60))
        .collect();
    has_exactly(&engine, "durable", &ids).await;
    assert_eq!(result_of(&engine, &ids[3]).await, (3, 0));
}

#[tokio::test]
async fn a_declaration_never_overwrites_a_run_time_schedule() {
    let clock = TestClock::new();
    let store = Reopenable::new("schedshadowed").await;
    let engine = store.open(|| worker(&clock)).await;
    engine
        .schedules()
        .create(every_minute("taken", (5, 0)))
        .await
        .unwrap();
    engine.close().await;
    // The next release declares the name hourly, with a closure.
    let engine = store
        .open(|| {
            builder(
                &clock,
                Schedule::every("taken", "1 hour").start(remind, input),
            )
        })
        .await;
    let listed = info(&engine, "taken").await;
    assert!(listed.run_time && !listed.declared_here, "{listed:?}");
    assert_eq!(listed.timing, "every 60 s");
    step(&engine, &clock, "taken", MINUTE, 1).await;
    let first = tick_id("taken", EPOCH + 60);
    has_exactly(&engine, "taken", std::slice::from_ref(&first)).await;
    // Fired as the run-time schedule says: its stored input.
    assert_eq!(result_of(&engine, &first).await, (5, 0));
    // The declaring engine may not create a run-time one of its name.
    let error = engine
        .schedules()
        .create(every_minute("taken", (6, 0)))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::InvalidSchedule { reason, .. } if reason.contains("declares")),
        "{error:?}"
    );
    // Once the run-time one is deleted, the declaration takes the name.
    engine.schedules().delete("taken").await.unwrap();
    wait_until("the declaration to take the name", || async {
        let listed = engine.schedules().list().await.unwrap();
        listed.iter().any(|s| s.name == "taken" && !s.run_time)
    })
    .await;
    let declared = info(&engine, "taken").await;
    assert!(declared.declared_here, "{declared:?}");
    assert_eq!(declared.timing, "every 3600 s");
    assert_eq!(declared.next_fires[0], at(EPOCH + 3600));
}

/// Input that does not survive JSON: a NaN is written as `null`.
#[workflow(name = "measure")]
async fn measure(_ctx: WorkflowContext, reading: f64) -> Result<f64, WorkflowError> {
    Ok(reading)
}

#[tokio::test]
async fn bad_run_time_schedules_are_typed_errors() {
    let clock = TestClock::new();
    let engine = fresh(
        builder(
            &clock,
            Schedule::every("declared", "1 hour").start(remind, input),
        )
        .register(measure),
    )
    .await;
    let create =
        |schedule: Schedule| async { engine.schedules().create(schedule).await.unwrap_err() };

    let zero = create(Schedule::every("r", "0 minutes").start_with_input(remind, &(1, 0))).await;
    assert!(matches!(zero, Error::InvalidInterval { .. }), "{zero:?}");
    let cron = create(Schedule::cron("r", "0 25 * * *").start_with_input(remind, &(1, 0))).await;
    assert!(matches!(cron, Error::InvalidCron { .. }), "{cron:?}");
    let closure = create(Schedule::every("r", "1 hour").start(remind, input)).await;
    assert!(
        matches!(&closure, Error::InvalidSchedule { reason, .. } if reason.contains("start_with_input")),
        "{closure:?}"
    );
    let nothing = create(Schedule::every("r", "1 hour")).await;
    assert!(
        matches!(&nothing, Error::InvalidSchedule { reason, .. } if reason.contains("start_with_input")),
        "{nothing:?}"
    );
    let nan = create(Schedule::every("r", "1 hour").start_with_input(measure, &f64::NAN)).await;
    assert!(matches!(nan, Error::Encode { .. }), "{nan:?}");

    engine
        .schedules()
        .create(every_minute("r", (1, 0)))
        .await
        .unwrap();
    let other = create(every_minute("r", (2, 0))).await;
    assert!(
        matches!(&other, Error::InvalidSchedule { reason, .. } if reason.contains("delete it first")),
        "{other:?}"
    );
    // A build-time schedule is not deleted: its engine would store it again.
    info(&engine, "declared").await;
    let declared = engine.schedules().delete("declared").await.unwrap_err();
    assert!(
        matches!(&declared, Error::InvalidSchedule { reason, .. } if reason.contains("build time")),
        "{declared:?}"
    );
    let unknown = engine.schedules().delete("nope").await.unwrap_err();
    assert!(
        matches!(unknown, Error::UnknownSchedule { .. }),
        "{unknown:?}"
    );
    // Nothing was stored but the one good schedule and the declared one.
    let names: Vec<String> = engine
        .schedules()
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["declared", "r"]);
}

#[tokio::test]
async fn a_run_time_schedule_is_fired_by_any_worker_that_runs_its_workflow() {
    // Two workers share a store only on PostgreSQL.
    if !helpers::on_postgres() {
        return;
    }
    let clock = TestClock::new();
    let store = Reopenable::new("schedanyworker").await;
    // One worker without the workflow creates it; the other fires it.
    let creator = store.open(|| Engine::builder().clock(clock.clone())).await;
    let runner = store.open(|| worker(&clock)).await;
    creator
        .schedules()
        .create(every_minute("elsewhere", (9, 0)))
        .await
        .unwrap();
    for _ in 0..3 {
        clock.advance(Duration::from_secs(MINUTE));
        caught_up(&runner, &clock, "elsewhere").await;
    }
    let ids: Vec<String> = (1..=3)
        .map(|i| tick_id("elsewhere", EPOCH + i * 60))
        .collect();
    has_exactly(&runner, "elsewhere", &ids).await;
    assert_eq!(result_of(&runner, &ids[0]).await, (9, 0));
    creator.schedules().delete("elsewhere").await.unwrap();
    wait_until("the worker to see the deletion", || async {
        runner.schedules().list().await.unwrap().is_empty()
    })
    .await;
    clock.advance(Duration::from_secs(3 * MINUTE));
    helpers::quiet(&runner).await;
    helpers::quiet(&creator).await;
    assert_eq!(instances(&runner, "elsewhere").await, ids);
}
