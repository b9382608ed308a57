//! Saga rollback, rule by rule, as the seeds define it.
//!
//! The workflows are written with `#[workflow]`, `#[step]` and
//! `#[rollback]`, as users write them. Every compensation records what it
//! was given (step, output, cause, key, attempt) in the test's [`Probe`], a
//! service the engine provides, and each test checks the lifecycle events
//! the engine stored.
//!
//! This file holds what the rule files share: the probe, the engine a test
//! runs on, and the compensations that only log their call.

#[path = "../support/helpers.rs"]
mod helpers;

mod compensations;
mod concurrent;
mod control;
mod order;

use std::fmt::Debug;
use std::future::pending;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use saga_runtime::inspect::{EventKind, ListFilter};
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use saga_runtime::{BoxFuture, Error, FailureKind, Instance};
use tokio::sync::{Notify, mpsc};

use helpers::{kinds, wait_until, within};

/// What one attempt of a compensation was given.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Call {
    step: &'static str,
    output: Option<String>,
    cause: String,
    key: String,
    attempt: u32,
}

/// What a test's steps and compensations share with the test, provided to
/// its engine as a service: the log of compensation calls, and the
/// counters and gates of the tests that need them.
struct Probe {
    /// Every attempt of a compensation, in order.
    calls: Mutex<Vec<Call>>,
    /// Runs of the step bodies a test counts.
    runs: AtomicU32,
    /// Tells the test that a step body (or a compensation) began.
    began: mpsc::UnboundedSender<&'static str>,
    /// Holds a step body or a compensation until the test lets it go.
    release: Notify,
    /// Compensations that ran to their end after being let go.
    finished: AtomicU32,
    /// While set, the refund API is down.
    refund_down: AtomicBool,
    /// The engine's clock, and the times a compensation's attempts read on it.
    clock: TestClock,
    attempt_times: Mutex<Vec<SystemTime>>,
}

impl Probe {
    /// Records one attempt of `step`'s compensation; its attempt number.
    fn log<T: Debug>(&self, step: &'static str, ctx: &RollbackContext<'_, T>) -> u32 {
        self.calls.lock().unwrap().push(Call {
            step,
            output: ctx.output().map(|o| format!("{o:?}")),
            cause: ctx.cause().to_string(),
            key: ctx.key().to_string(),
            attempt: ctx.attempt(),
        });
        ctx.attempt()
    }
}

fn calls(probe: &Probe) -> Vec<Call> {
    probe.calls.lock().unwrap().clone()
}

fn steps_compensated(probe: &Probe) -> Vec<&'static str> {
    calls(probe).into_iter().map(|c| c.step).collect()
}

/// A test's engine, its probe (provided to the engine), and the receiving
/// end of the probe's `began`.
struct World {
    engine: Engine,
    probe: Arc<Probe>,
    began: mpsc::UnboundedReceiver<&'static str>,
}

async fn world() -> World {
    world_on(TestClock::auto_advancing()).await
}

async fn world_on(clock: TestClock) -> World {
    let (began_tx, began) = mpsc::unbounded_channel();
    let probe = Arc::new(Probe {
        calls: Mutex::default(),
        runs: AtomicU32::new(0),
        began: began_tx,
        release: Notify::new(),
        finished: AtomicU32::new(0),
        refund_down: AtomicBool::new(false),
        clock: clock.clone(),
        attempt_times: Mutex::default(),
    });
    let engine = helpers::fresh(Engine::builder().clock(clock).provide_arc(probe.clone())).await;
    World {
        engine,
        probe,
        began,
    }
}

/// The events from `RollbackStarted` on (empty if rollback never started).
fn rollback_tail(kinds: &[EventKind]) -> Vec<EventKind> {
    let start = kinds
        .iter()
        .position(|k| matches!(k, EventKind::RollbackStarted { .. }))
        .unwrap_or(kinds.len());
    kinds[start..].to_vec()
}

fn is_rollback_event(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::RollbackStarted { .. }
            | EventKind::RollbackStepStarted { .. }
            | EventKind::RollbackStepCompleted { .. }
            | EventKind::RollbackStepFailed { .. }
            | EventKind::RollbackCompleted
            | EventKind::RollbackFailed { .. }
    )
}

fn started(step: &str) -> EventKind {
    EventKind::RollbackStepStarted {
        step: step.into(),
        occurrence: 0,
    }
}

fn completed(step: &str) -> EventKind {
    EventKind::RollbackStepCompleted {
        step: step.into(),
        occurrence: 0,
    }
}

/// The failure the instance ended with; panics if it did not end `Errored`.
async fn failed_with(
    instance: &(impl AsRef<Instance> + ?Sized),
) -> (saga_runtime::Failure, Option<saga_runtime::Failure>) {
    let instance: &Instance = instance.as_ref();
    match within("the result", instance.result::<u64>()).await {
        Err(Error::WorkflowFailed {
            failure,
            rollback_failure,
            ..
        }) => (*failure, rollback_failure.map(|f| *f)),
        other => panic!("expected the instance to fail, got {other:?}"),
    }
}

// The compensations that record their call and succeed, one per step name.

#[rollback]
async fn undo_a(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("a", &ctx);
    Ok(())
}

#[rollback]
async fn undo_b(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("b", &ctx);
    Ok(())
}

#[rollback]
async fn undo_c(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("c", &ctx);
    Ok(())
}

#[rollback]
async fn undo_debit(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("debit", &ctx);
    Ok(())
}

#[rollback]
async fn undo_credit(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("credit", &ctx);
    Ok(())
}

#[rollback]
async fn undo_charge(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("charge", &ctx);
    Ok(())
}

#[rollback]
async fn undo_apply_coupon(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("apply-coupon", &ctx);
    Ok(())
}

#[rollback]
async fn undo_capture(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("capture", &ctx);
    Ok(())
}

#[rollback]
async fn undo_reserve(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("reserve", &ctx);
    Ok(())
}

#[rollback]
async fn undo_one(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("one", &ctx);
    Ok(())
}

#[rollback]
async fn undo_first(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("first", &ctx);
    Ok(())
}

#[rollback]
async fn undo_second(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("second", &ctx);
    Ok(())
}

#[rollback]
async fn undo_third(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("third", &ctx);
    Ok(())
}

#[rollback]
async fn undo_book_flight(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("book-flight", &ctx);
    Ok(())
}

#[rollback]
async fn undo_book_hotel(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("book-hotel", &ctx);
    Ok(())
}

#[rollback]
async fn undo_book_car(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("book-car", &ctx);
    Ok(())
}

#[rollback]
async fn undo_hold_seat(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("hold-seat", &ctx);
    Ok(())
}

#[rollback]
async fn undo_hold_meal(
    ctx: RollbackContext<'_, u64>,
    probe: Service<Probe>,
) -> Result<(), StepError> {
    probe.log("hold-meal", &ctx);
    Ok(())
}

#[rollback]
async fn undo_slow(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("slow", &ctx);
    Ok(())
}

#[rollback]
async fn undo_fails(ctx: RollbackContext<'_, u64>, probe: Service<Probe>) -> Result<(), StepError> {
    probe.log("fails", &ctx);
    Ok(())
}

/// A hand-written compensation that records its call and succeeds.
fn logged<T>(probe: &Arc<Probe>, step: &'static str) -> RollbackRegistration<T>
where
    T: Debug + Send + 'static + for<'de> Deserialize<'de>,
{
    let probe = probe.clone();
    RollbackRegistration::new(StepConfig::default(), move |input: RollbackInput<T>| {
        let probe = probe.clone();
        Box::pin(async move {
            probe.log(step, &input.context());
            Ok(())
        }) as BoxFuture<Result<(), StepError>>
    })
}
