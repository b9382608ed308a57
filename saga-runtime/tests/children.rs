//! Child workflows, rule by rule: a child is a durable call of its parent
//! with a derived id, a full instance of its own, and part of the
//! parent's rollback (a completed child is undone at its place in reverse
//! start order, a running one terminated with rollback, a failed one left
//! as it is); control calls on the parent reach its running children.
//!
//! The workflows are a trip booking, written with `#[workflow]`, `#[step]`
//! and `#[rollback]` as users write them. Every step and compensation
//! writes a line in the test's [`Ledger`], a service the engine provides,
//! so the tests read the order things happened in.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use saga_runtime::{ChildFailed, Engine, Error, Instance};
use tokio::sync::Notify;

use helpers::{fresh, kinds, until_status, wait_until, within};

/// What the trip's steps and compensations did, in order, and the
/// switches that make them fail or wait.
#[derive(Default)]
struct Ledger {
    lines: Mutex<Vec<String>>,
    /// The hotel has no room: its `room` step fails for good.
    hotel_full: AtomicBool,
    /// The card is declined: the parent's `pay` step fails for good.
    declined: AtomicBool,
    /// While set, the flight's `seat` step waits for `release`.
    hold_seat: AtomicBool,
    release: Notify,
    /// The visa's compensation succeeds from now on.
    consulate_relents: AtomicBool,
}

impl Ledger {
    fn write(&self, line: impl Into<String>) {
        self.lines.lock().unwrap().push(line.into());
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn count(&self, line: &str) -> usize {
        self.lines().iter().filter(|l| *l == line).count()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Trip {
    who: String,
    nights: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Booked {
    flight: String,
    hotel: String,
}

#[step(name = "charge-flight", rollback = refund_flight)]
async fn charge_flight(
    key: IdempotencyKey,
    ledger: Service<Ledger>,
    trip: Trip,
) -> Result<String, StepError> {
    ledger.write(format!("charge flight {}", trip.who));
    Ok(format!("flight:{}", key.as_str()))
}

#[rollback]
async fn refund_flight(
    ctx: RollbackContext<'_, String>,
    trip: Trip,
    ledger: Service<Ledger>,
) -> Result<(), StepError> {
    ledger.write(format!("refund flight {} ({})", trip.who, ctx.key()));
    Ok(())
}

#[step(name = "seat", rollback = release_seat)]
async fn seat(key: IdempotencyKey, ledger: Service<Ledger>, trip: Trip) -> Result<u32, StepError> {
    let _ = key;
    if ledger.hold_seat.load(Ordering::SeqCst) {
        ledger.write("seat waits");
        ledger.release.notified().await;
    }
    ledger.write(format!("seat {}", trip.who));
    Ok(12)
}

#[rollback]
async fn release_seat(
    ctx: RollbackContext<'_, u32>,
    ledger: Service<Ledger>,
) -> Result<(), StepError> {
    ledger.write(format!("release seat ({})", ctx.key()));
    Ok(())
}

/// A child: charges the flight, then takes a seat.
#[workflow(name = "book-flight")]
async fn book_flight(ctx: WorkflowContext, trip: Trip) -> Result<String, WorkflowError> {
    let charged = charge_flight(&ctx, trip.clone()).await?;
    seat(&ctx, trip).await?;
    Ok(charged)
}

#[step(name = "room", rollback = free_room)]
async fn room(
    key: IdempotencyKey,
    ledger: Service<Ledger>,
    trip: Trip,
) -> Result<String, StepError> {
    if ledger.hotel_full.load(Ordering::SeqCst) {
        ledger.write("room refused");
        return Err(StepError::fatal("the hotel is full"));
    }
    ledger.write(format!("room {}", trip.who));
    Ok(format!("room:{}", key.as_str()))
}

#[rollback]
async fn free_room(
    ctx: RollbackContext<'_, String>,
    ledger: Service<Ledger>,
) -> Result<(), StepError> {
    // A room that was refused was never taken.
    if ctx.output().is_some() {
        ledger.write(format!("free room ({})", ctx.key()));
    }
    Ok(())
}

#[step(name = "order-breakfast", rollback = cancel_breakfast)]
async fn order_breakfast(
    key: IdempotencyKey,
    ledger: Service<Ledger>,
    nights: u32,
) -> Result<u32, StepError> {
    let _ = key;
    ledger.write(format!("breakfast x{nights}"));
    Ok(nights)
}

#[rollback]
async fn cancel_breakfast(
    ctx: RollbackContext<'_, u32>,
    ledger: Service<Ledger>,
) -> Result<(), StepError> {
    ledger.write(format!("cancel breakfast ({})", ctx.key()));
    Ok(())
}

/// A grandchild of the trip: the hotel's breakfast.
#[workflow(name = "breakfast")]
async fn breakfast(ctx: WorkflowContext, nights: u32) -> Result<u32, WorkflowError> {
    Ok(order_breakfast(&ctx, nights).await?)
}

/// A child with a child of its own: takes a room, then orders breakfast.
#[workflow(name = "book-hotel")]
async fn book_hotel(ctx: WorkflowContext, trip: Trip) -> Result<String, WorkflowError> {
    let room = room(&ctx, trip.clone()).await?;
    ctx.child("breakfast", breakfast, trip.nights).await?;
    Ok(room)
}

#[step(name = "pay")]
async fn pay(key: IdempotencyKey, ledger: Service<Ledger>, trip: Trip) -> Result<(), StepError> {
    let _ = key;
    if ledger.declined.load(Ordering::SeqCst) {
        ledger.write("pay declined");
        return Err(StepError::fatal("card declined"));
    }
    ledger.write(format!("pay {}", trip.who));
    Ok(())
}

#[step(name = "hold", rollback = unhold)]
async fn hold(key: IdempotencyKey, ledger: Service<Ledger>) -> Result<(), StepError> {
    let _ = key;
    ledger.write("hold");
    Ok(())
}

#[rollback]
async fn unhold(ctx: RollbackContext<'_, ()>, ledger: Service<Ledger>) -> Result<(), StepError> {
    ledger.write(format!("unhold ({})", ctx.key()));
    Ok(())
}

/// The trip: holds the booking, books a flight and a hotel (each a child
/// saga), then pays.
#[workflow(name = "trip")]
async fn trip_booking(ctx: WorkflowContext, trip: Trip) -> Result<Booked, WorkflowError> {
    hold(&ctx).await?;
    let flight = ctx.child("book-flight", book_flight, trip.clone()).await?;
    let hotel = ctx.child("book-hotel", book_hotel, trip.clone()).await?;
    pay(&ctx, trip).await?;
    Ok(Booked { flight, hotel })
}

/// A trip that books the hotel only if it can, and flies anyway.
#[workflow(name = "flexible-trip")]
async fn flexible_trip(ctx: WorkflowContext, trip: Trip) -> Result<String, WorkflowError> {
    let flight = ctx.child("book-flight", book_flight, trip.clone()).await?;
    match ctx.child("book-hotel", book_hotel, trip).await {
        Ok(hotel) => Ok(format!("{flight} + {hotel}")),
        Err(failed) => Ok(format!("{flight}, no hotel: {}", failed.status())),
    }
}

/// A trip whose flight stands even when the trip rolls back.
#[workflow(name = "flight-only-trip")]
async fn flight_only_trip(ctx: WorkflowContext, trip: Trip) -> Result<(), WorkflowError> {
    hold(&ctx).await?;
    ctx.child("book-flight", book_flight, trip.clone())
        .no_rollback()
        .await?;
    pay(&ctx, trip).await?;
    Ok(())
}

/// A group trip: both travellers' flights at once, then one hotel per night
/// in a loop.
#[workflow(name = "group-trip")]
async fn group_trip(
    ctx: WorkflowContext,
    who: (String, String),
) -> Result<Vec<String>, WorkflowError> {
    let a = Trip {
        who: who.0,
        nights: 1,
    };
    let b = Trip {
        who: who.1,
        nights: 1,
    };
    let (fa, fb) = tokio::join!(
        ctx.child("book-flight", book_flight, a.clone()),
        ctx.child("book-flight-b", book_flight, b),
    );
    let mut booked = vec![fa?, fb?];
    for night in 0..2 {
        let trip = Trip {
            who: format!("{}-{night}", a.who),
            nights: 1,
        };
        booked.push(ctx.child("night", book_hotel, trip).await?);
    }
    Ok(booked)
}

/// A trip that waits for approval of the flight's seat (the child holds
/// its seat step) and then sleeps a week before paying.
#[workflow(name = "slow-trip")]
async fn slow_trip(ctx: WorkflowContext, trip: Trip) -> Result<(), WorkflowError> {
    ctx.child("book-flight", book_flight, trip.clone()).await?;
    ctx.sleep("before-paying", "8 days").await?;
    pay(&ctx, trip).await?;
    Ok(())
}

fn alice() -> Trip {
    Trip {
        who: "alice".into(),
        nights: 2,
    }
}

struct World {
    engine: Engine,
    ledger: Arc<Ledger>,
}

async fn world() -> World {
    world_with(|b| b).await
}

async fn world_with(
    extra: impl FnOnce(saga_runtime::EngineBuilder) -> saga_runtime::EngineBuilder,
) -> World {
    let ledger = Arc::new(Ledger::default());
    let builder = Engine::builder()
        .clock(TestClock::auto_advancing())
        .provide_arc(ledger.clone())
        .register(trip_booking)
        .register(book_flight)
        .register(book_hotel)
        .register(breakfast)
        .register(flexible_trip)
        .register(flight_only_trip)
        .register(group_trip)
        .register(slow_trip);
    let engine = fresh(extra(builder)).await;
    World { engine, ledger }
}

/// The handle on instance `id`, which exists.
async fn instance(engine: &Engine, id: &str) -> Instance {
    engine.instance(id).await.unwrap()
}

fn compensations(kinds: &[EventKind]) -> Vec<String> {
    kinds
        .iter()
        .filter_map(|k| match k {
            EventKind::RollbackStepStarted { step, .. } => Some(step.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_child_returns_its_typed_result_and_is_an_instance_of_its_own() {
    let World { engine, ledger, .. } = world().await;
    let run = engine.start(trip_booking, "trip-1", alice()).await.unwrap();
    let booked = within("the trip", run.result()).await.unwrap();
    assert_eq!(booked.flight, "flight:trip-1.book-flight:charge-flight");
    assert_eq!(booked.hotel, "room:trip-1.book-hotel:room");
    assert_eq!(
        ledger.lines(),
        [
            "hold",
            "charge flight alice",
            "seat alice",
            "room alice",
            "breakfast x2",
            "pay alice"
        ]
    );
    // Each child is an instance, found by its parent, and it names it.
    let children = engine
        .list(&ListFilter::all().parent("trip-1"))
        .await
        .unwrap();
    let mut ids: Vec<&str> = children.iter().map(|i| i.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["trip-1.book-flight", "trip-1.book-hotel"]);
    for child in &children {
        assert_eq!(child.parent.as_deref(), Some("trip-1"));
        assert_eq!(child.status, Status::Complete);
    }
    let grandchild = instance(&engine, "trip-1.book-hotel.breakfast").await;
    assert_eq!(grandchild.status().await.unwrap(), Status::Complete);
    assert_eq!(
        grandchild.info().await.unwrap().parent.as_deref(),
        Some("trip-1.book-hotel")
    );
    // The parent's history names each child call and its end.
    let history = kinds(&run).await;
    assert!(history.contains(&EventKind::ChildStarted {
        name: "book-flight".into(),
        occurrence: 0,
        child: "trip-1.book-flight".into(),
        workflow: "book-flight".into(),
    }));
    assert!(history.contains(&EventKind::ChildEnded {
        name: "book-hotel".into(),
        child: "trip-1.book-hotel".into(),
        status: Status::Complete,
    }));
}

#[tokio::test]
async fn a_failed_child_is_a_failed_call_that_the_parent_may_catch() {
    let World { engine, ledger, .. } = world().await;
    ledger.hotel_full.store(true, Ordering::SeqCst);
    let run = engine
        .start(flexible_trip, "flex-1", alice())
        .await
        .unwrap();
    let out = within("the trip", run.result()).await.unwrap();
    assert_eq!(
        out,
        "flight:flex-1.book-flight:charge-flight, no hotel: errored"
    );
    let hotel = instance(&engine, "flex-1.book-hotel").await;
    assert_eq!(hotel.status().await.unwrap(), Status::Errored);
    // The flight stands: the parent caught the failure and completed.
    assert_eq!(
        ledger.count("refund flight alice (flex-1.book-flight:rollback:charge-flight)"),
        0
    );
    assert_eq!(
        instance(&engine, "flex-1.book-flight")
            .await
            .status()
            .await
            .unwrap(),
        Status::Complete
    );
}

#[tokio::test]
async fn an_uncaught_child_failure_rolls_the_parent_back_and_the_failed_child_is_not_compensated_twice()
 {
    let World { engine, ledger, .. } = world().await;
    ledger.hotel_full.store(true, Ordering::SeqCst);
    let run = engine.start(trip_booking, "trip-2", alice()).await.unwrap();
    let error = within("the trip", run.result()).await.unwrap_err();
    let Error::WorkflowFailed { failure, .. } = &error else {
        panic!("{error:?}")
    };
    assert!(
        failure.message().contains("child \"book-hotel\""),
        "{failure}"
    );
    assert_eq!(
        ledger.lines(),
        [
            "hold",
            "charge flight alice",
            "seat alice",
            "room refused",
            // The hotel's own rollback: its room was never taken.
            // The trip's rollback, in reverse start order: the hotel is
            // left as it is (it failed, and compensated itself), the
            // flight is undone by its own compensations, then the hold.
            "release seat (trip-2.book-flight:rollback:seat)",
            "refund flight alice (trip-2.book-flight:rollback:charge-flight)",
            "unhold (trip-2:rollback:hold)",
        ]
    );
    let flight = instance(&engine, "trip-2.book-flight").await;
    assert_eq!(flight.status().await.unwrap(), Status::Compensated);
    assert!(matches!(
        flight.result::<String>().await,
        Err(Error::Compensated { .. })
    ));
    assert_eq!(
        instance(&engine, "trip-2.book-hotel")
            .await
            .status()
            .await
            .unwrap(),
        Status::Errored
    );
    // The parent's record of its rollback: the flight child, then the hold.
    assert_eq!(compensations(&kinds(&run).await), ["book-flight", "hold"]);
    // The flight's own history tells it was undone.
    let flight_history = kinds(&flight).await;
    assert_eq!(flight_history.last(), Some(&EventKind::InstanceCompensated));
    assert_eq!(compensations(&flight_history), ["seat", "charge-flight"]);
}

#[tokio::test]
async fn the_parents_rollback_undoes_children_and_grandchildren_at_their_place_in_reverse_start_order()
 {
    let World { engine, ledger, .. } = world().await;
    ledger.declined.store(true, Ordering::SeqCst);
    let run = engine.start(trip_booking, "trip-3", alice()).await.unwrap();
    within("the trip", run.result()).await.unwrap_err();
    assert_eq!(
        ledger.lines(),
        [
            "hold",
            "charge flight alice",
            "seat alice",
            "room alice",
            "breakfast x2",
            "pay declined",
            // The hotel (started last), with its breakfast (its last call)
            // first, then its room; then the flight; then the hold.
            "cancel breakfast (trip-3.book-hotel.breakfast:rollback:order-breakfast)",
            "free room (trip-3.book-hotel:rollback:room)",
            "release seat (trip-3.book-flight:rollback:seat)",
            "refund flight alice (trip-3.book-flight:rollback:charge-flight)",
            "unhold (trip-3:rollback:hold)",
        ]
    );
    for id in [
        "trip-3.book-flight",
        "trip-3.book-hotel",
        "trip-3.book-hotel.breakfast",
    ] {
        assert_eq!(
            instance(&engine, id).await.status().await.unwrap(),
            Status::Compensated,
            "{id}"
        );
    }
    assert_eq!(
        compensations(&kinds(&run).await),
        ["book-hotel", "book-flight", "hold"]
    );
    assert_eq!(
        engine
            .list(&ListFilter::all().status(Status::Compensated))
            .await
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test]
async fn a_child_called_with_no_rollback_stands_when_the_parent_rolls_back() {
    let World { engine, ledger, .. } = world().await;
    ledger.declined.store(true, Ordering::SeqCst);
    let run = engine
        .start(flight_only_trip, "solo-1", alice())
        .await
        .unwrap();
    within("the trip", run.result()).await.unwrap_err();
    assert_eq!(
        ledger.lines(),
        [
            "hold",
            "charge flight alice",
            "seat alice",
            "pay declined",
            "unhold (solo-1:rollback:hold)",
        ]
    );
    assert_eq!(
        instance(&engine, "solo-1.book-flight")
            .await
            .status()
            .await
            .unwrap(),
        Status::Complete
    );
}

#[tokio::test]
async fn children_joined_and_in_a_loop_get_their_own_ids() {
    let World { engine, .. } = world().await;
    let run = engine
        .start(group_trip, "group-1", ("ann".to_owned(), "bob".to_owned()))
        .await
        .unwrap();
    let booked = within("the trip", run.result()).await.unwrap();
    assert_eq!(
        booked,
        [
            "flight:group-1.book-flight:charge-flight",
            "flight:group-1.book-flight-b:charge-flight",
            "room:group-1.night:room",
            "room:group-1.night~o1:room",
        ]
    );
    let children = engine
        .list(&ListFilter::all().parent("group-1"))
        .await
        .unwrap();
    assert_eq!(children.len(), 4);
}

#[tokio::test]
async fn a_child_that_completed_is_still_undone_by_a_parent_that_fails_eight_days_later() {
    // Finished instances are kept one day; the child's parent sleeps 8.
    let clock = TestClock::new();
    let World { engine, ledger } = world_with(|b| {
        b.clock(clock.clone())
            .retention(Duration::from_secs(24 * 60 * 60))
    })
    .await;
    ledger.declined.store(true, Ordering::SeqCst);
    let run = engine.start(slow_trip, "slow-1", alice()).await.unwrap();
    wait_until("the parent asleep", || async {
        kinds(&run)
            .await
            .iter()
            .any(|k| matches!(k, EventKind::SleepStarted { .. }))
    })
    .await;
    let flight = instance(&engine, "slow-1.book-flight").await;
    assert_eq!(flight.status().await.unwrap(), Status::Complete);
    // Two days on, the child's retention has passed: a sweep keeps it,
    // since its parent may still roll back.
    clock.advance(Duration::from_secs(2 * 24 * 60 * 60));
    assert_eq!(engine.sweep_expired().await.unwrap(), 0);
    clock.advance(Duration::from_secs(7 * 24 * 60 * 60));
    within("the trip", run.result()).await.unwrap_err();
    assert_eq!(
        ledger.count("refund flight alice (slow-1.book-flight:rollback:charge-flight)"),
        1
    );
    assert_eq!(flight.status().await.unwrap(), Status::Compensated);
    // Once the parent finished and a day passed, both go.
    clock.advance(Duration::from_secs(2 * 24 * 60 * 60));
    assert_eq!(engine.sweep_expired().await.unwrap(), 2);
}

#[tokio::test]
async fn pause_resume_and_terminate_of_the_parent_reach_its_running_children() {
    let World { engine, ledger, .. } = world().await;
    ledger.hold_seat.store(true, Ordering::SeqCst);
    let run = engine.start(trip_booking, "trip-4", alice()).await.unwrap();
    wait_until("the seat step", || async {
        ledger.count("seat waits") == 1
    })
    .await;
    let flight = instance(&engine, "trip-4.book-flight").await;
    run.pause().await.unwrap();
    until_status(&flight, Status::Paused).await;
    // Paused on its own, a child stays paused when the parent resumes.
    run.resume().await.unwrap();
    until_status(&flight, Status::Running).await;
    flight.pause().await.unwrap();
    run.pause().await.unwrap();
    run.resume().await.unwrap();
    helpers::quiet(&engine).await;
    assert_eq!(flight.status().await.unwrap(), Status::Paused);
    flight.resume().await.unwrap();
    // Terminating the parent terminates the child, whose seat never lands.
    run.terminate().await.unwrap();
    until_status(&flight, Status::Terminated).await;
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    ledger.release.notify_waiters();
    helpers::quiet(&engine).await;
    assert_eq!(ledger.count("seat alice"), 0);
}

#[tokio::test]
async fn a_terminated_child_fails_the_parents_call() {
    let World { engine, ledger, .. } = world().await;
    ledger.hold_seat.store(true, Ordering::SeqCst);
    let run = engine.start(trip_booking, "trip-5", alice()).await.unwrap();
    wait_until("the seat step", || async {
        ledger.count("seat waits") == 1
    })
    .await;
    let flight = instance(&engine, "trip-5.book-flight").await;
    flight.terminate_with_rollback().await.unwrap();
    let error = within("the trip", run.result()).await.unwrap_err();
    let Error::WorkflowFailed { failure, .. } = &error else {
        panic!("{error:?}")
    };
    assert!(failure.message().contains("was terminated"), "{failure}");
    // The flight compensated itself when it was terminated: the trip's
    // rollback leaves it, and undoes the hold.
    assert_eq!(
        ledger.count("refund flight alice (trip-5.book-flight:rollback:charge-flight)"),
        1
    );
    assert_eq!(ledger.count("unhold (trip-5:rollback:hold)"), 1);
}

#[tokio::test]
async fn terminate_with_rollback_of_the_parent_terminates_a_running_child_with_rollback() {
    let World { engine, ledger, .. } = world().await;
    ledger.hold_seat.store(true, Ordering::SeqCst);
    let run = engine.start(trip_booking, "trip-6", alice()).await.unwrap();
    wait_until("the seat step", || async {
        ledger.count("seat waits") == 1
    })
    .await;
    run.terminate_with_rollback().await.unwrap();
    let flight = instance(&engine, "trip-6.book-flight").await;
    assert_eq!(flight.status().await.unwrap(), Status::Terminated);
    assert_eq!(
        ledger.lines(),
        [
            "hold",
            "charge flight alice",
            "seat waits",
            "release seat (trip-6.book-flight:rollback:seat)",
            "refund flight alice (trip-6.book-flight:rollback:charge-flight)",
            "unhold (trip-6:rollback:hold)",
        ]
    );
}

#[tokio::test]
async fn a_restarted_parent_starts_a_new_generation_of_children() {
    let World { engine, ledger, .. } = world().await;
    ledger.declined.store(true, Ordering::SeqCst);
    let run = engine.start(trip_booking, "trip-7", alice()).await.unwrap();
    within("the trip", run.result()).await.unwrap_err();
    ledger.declined.store(false, Ordering::SeqCst);
    run.restart().await.unwrap();
    let booked = within("the trip again", run.result()).await.unwrap();
    assert_eq!(booked.flight, "flight:trip-7.book-flight~g1:charge-flight");
    // The first generation's children stay as its rollback left them.
    assert_eq!(
        instance(&engine, "trip-7.book-flight")
            .await
            .status()
            .await
            .unwrap(),
        Status::Compensated
    );
    assert_eq!(
        instance(&engine, "trip-7.book-flight~g1")
            .await
            .status()
            .await
            .unwrap(),
        Status::Complete
    );
}

/// A hand-written parent that says which children it starts.
struct Expedition;

impl Workflow for Expedition {
    type Input = Trip;
    type Output = String;

    fn name(&self) -> &'static str {
        "expedition"
    }

    fn run(&self, ctx: WorkflowContext, trip: Trip) -> WorkflowFuture<String> {
        Box::pin(async move { Ok(ctx.child("book-flight", book_flight, trip).await?) })
    }

    fn children(&self) -> Vec<saga_runtime::__private::ChildNeed> {
        vec![saga_runtime::__private::ChildNeed::of(
            "book-flight",
            &book_flight,
        )]
    }
}

#[tokio::test]
async fn a_parent_whose_child_workflow_is_not_registered_is_refused_at_register() {
    let engine = fresh(Engine::builder()).await;
    let refused = engine.register(Expedition).unwrap_err();
    assert!(
        matches!(&refused, Error::ChildNotRegistered { workflow, call, child }
            if workflow == "expedition" && call == "book-flight" && child == "book-flight"),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("register \"book-flight\""),
        "{refused}"
    );
    // Registered together, in any order, both are taken.
    let ledger = Arc::new(Ledger::default());
    let engine = fresh(
        Engine::builder()
            .provide_arc(ledger)
            .register(Expedition)
            .register(book_flight),
    )
    .await;
    let run = engine.start(Expedition, "exp-1", alice()).await.unwrap();
    assert_eq!(
        within("the expedition", run.result()).await.unwrap(),
        "flight:exp-1.book-flight:charge-flight"
    );
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
enum FlightError {
    SoldOut,
}

impl std::fmt::Display for FlightError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("sold out")
    }
}

#[workflow(name = "sold-out")]
async fn sold_out(_ctx: WorkflowContext, _input: ()) -> Result<(), FlightError> {
    Err(FlightError::SoldOut)
}

#[workflow(name = "asks")]
async fn asks(
    ctx: WorkflowContext,
    _input: (),
) -> Result<(Option<FlightError>, String), WorkflowError> {
    let failed: ChildFailed = match ctx.child("try", sold_out, ()).await {
        Ok(()) => return Err(WorkflowError::new("the child was not sold out")),
        Err(failed) => failed,
    };
    Ok((failed.downcast::<FlightError>(), failed.child().to_owned()))
}

#[tokio::test]
async fn a_childs_failure_reaches_the_parent_typed() {
    let engine = fresh(Engine::builder().register(sold_out).register(asks)).await;
    let run = engine.start(asks, "asks-1", ()).await.unwrap();
    assert_eq!(
        within("the parent", run.result()).await.unwrap(),
        (Some(FlightError::SoldOut), "asks-1.try".to_owned())
    );
}

/// `inspect` shows a child slot with its id and outcome.
#[tokio::test]
async fn inspect_shows_each_child_and_how_it_ended() {
    use saga_runtime::inspect::InspectedSlot;
    let World { engine, .. } = world().await;
    let run = engine.start(trip_booking, "trip-8", alice()).await.unwrap();
    within("the trip", run.result()).await.unwrap();
    let inspection = run.inspect().await.unwrap();
    let children: Vec<(String, Option<Status>)> = inspection
        .slots
        .iter()
        .filter_map(|slot| match slot {
            InspectedSlot::Child(child) => Some((child.child.clone(), child.ended)),
            _ => None,
        })
        .collect();
    assert_eq!(
        children,
        [
            ("trip-8.book-flight".to_owned(), Some(Status::Complete)),
            ("trip-8.book-hotel".to_owned(), Some(Status::Complete)),
        ]
    );
    let _: &Instance = run.instance();
}

/// Polls its child call once, then drops it, and waits for a go-ahead.
#[workflow(name = "impatient")]
async fn impatient(ctx: WorkflowContext, trip: Trip) -> Result<(), WorkflowError> {
    {
        let mut call = std::pin::pin!(ctx.child("book-flight", book_flight, trip));
        std::future::poll_fn(|cx| {
            let _ = call.as_mut().poll(cx);
            std::task::Poll::Ready(())
        })
        .await;
    }
    let _: bool = ctx.wait_for_event("go", "go", "1 day").await?;
    Ok(())
}

#[tokio::test]
async fn a_child_call_dropped_after_it_began_still_starts_its_one_child() {
    // A clock that stands still: the parent's wait must not time out.
    let World { engine, ledger } = world_with(|b| b.clock(TestClock::new())).await;
    engine.register(impatient).unwrap();
    let run = engine.start(impatient, "imp-1", alice()).await.unwrap();
    // The call was recorded as it was first polled: its child is created
    // and runs, though the parent no longer waits for it.
    wait_until("the child to complete", || async {
        match engine.instance("imp-1.book-flight").await {
            Ok(child) => child.status().await.unwrap() == Status::Complete,
            Err(_) => false,
        }
    })
    .await;
    assert_eq!(ledger.count("charge flight alice"), 1);
    assert!(kinds(&run).await.iter().any(|k| matches!(
        k,
        EventKind::ChildStarted { child, .. } if child == "imp-1.book-flight"
    )));
    engine.send_event("imp-1", "go", &true).await.unwrap();
    within("the parent", run.result()).await.unwrap();
    let children = engine
        .list(&ListFilter::all().parent("imp-1"))
        .await
        .unwrap();
    assert_eq!(children.len(), 1);
}

#[step(name = "visa", rollback = cancel_visa)]
async fn visa(key: IdempotencyKey, ledger: Service<Ledger>) -> Result<(), StepError> {
    ledger.write(format!("visa ({key})"));
    Ok(())
}

#[rollback(retries = 0)]
async fn cancel_visa(
    ctx: RollbackContext<'_, ()>,
    ledger: Service<Ledger>,
) -> Result<(), StepError> {
    if ledger.consulate_relents.load(Ordering::SeqCst) {
        ledger.write(format!("cancel visa ({})", ctx.key()));
        return Ok(());
    }
    ledger.write(format!("cancel visa refused ({})", ctx.key()));
    Err(StepError::fatal("the consulate keeps the fee"))
}

/// A child whose own compensation gives up.
#[workflow(name = "apply-visa")]
async fn apply_visa(ctx: WorkflowContext, _input: ()) -> Result<(), WorkflowError> {
    visa(&ctx).await?;
    Ok(())
}

/// Holds, gets a visa (a child), then pays, declined.
#[workflow(name = "visa-trip")]
async fn visa_trip(ctx: WorkflowContext, trip: Trip) -> Result<(), WorkflowError> {
    hold(&ctx).await?;
    ctx.child("visa", apply_visa, ()).await?;
    pay(&ctx, trip).await?;
    Ok(())
}

#[tokio::test]
async fn a_child_whose_compensation_gives_up_gives_up_the_parents_rollback_and_subscribers_see_it()
{
    let World { engine, ledger } = world().await;
    engine.register(apply_visa).unwrap();
    engine.register(visa_trip).unwrap();
    ledger.declined.store(true, Ordering::SeqCst);
    let mut events = engine.subscribe();
    let run = engine.start(visa_trip, "visa-1", alice()).await.unwrap();
    let error = within("the trip", run.result()).await.unwrap_err();
    let Error::WorkflowFailed {
        rollback_failure: Some(gave_up),
        ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert!(
        gave_up
            .message()
            .contains("\"visa-1.visa\" could not be compensated"),
        "{gave_up}"
    );
    // The parent's rollback stopped at the child: the hold stays.
    assert_eq!(ledger.count("unhold (visa-1:rollback:hold)"), 0);
    let child = instance(&engine, "visa-1.visa").await;
    assert_eq!(child.status().await.unwrap(), Status::Compensated);
    assert!(matches!(
        child.result::<()>().await,
        Err(Error::Compensated {
            rollback_failure: Some(_),
            ..
        })
    ));
    // Subscribers are told the child was undone.
    within("the child's end as an event", async {
        loop {
            let event = events.recv().await.unwrap();
            if event.instance == "visa-1.visa" && event.kind == EventKind::InstanceCompensated {
                break;
            }
        }
    })
    .await;
    // Once the consulate relents, retrying the parent's rollback retries
    // the child's, then goes on to the hold.
    ledger.consulate_relents.store(true, Ordering::SeqCst);
    run.retry_rollback().await.unwrap();
    within("the retried rollback", async {
        while run.status().await.unwrap() != Status::Errored
            || ledger.count("unhold (visa-1:rollback:hold)") == 0
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert_eq!(ledger.count("cancel visa (visa-1.visa:rollback:visa)"), 1);
    assert!(matches!(
        run.result().await,
        Err(Error::WorkflowFailed {
            rollback_failure: None,
            ..
        })
    ));
    assert!(matches!(
        child.result::<()>().await,
        Err(Error::Compensated {
            rollback_failure: None,
            ..
        })
    ));
}
