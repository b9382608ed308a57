//! `Instance::inspect`: the read model tools show. Steps, sleeps and waits
//! in call order with keys, states, inputs and payloads as JSON and times
//! from history; compensations in the order they ran; both errors.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use saga_runtime::inspect::{CompensationOutcome, InspectedSlot, Inspection, StepState, WaitState};
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use serde_json::json;

use helpers::{wait_until, within};

/// `TestClock::new()`'s start, 2030-01-01T00:00:00Z.
fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_893_456_000 + secs)
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Transfer {
    to: String,
    amount: u64,
}

static REFUND_FAILS: AtomicBool = AtomicBool::new(false);

#[step(name = "debit", rollback = refund)]
async fn debit(key: IdempotencyKey, t: Transfer) -> Result<String, StepError> {
    Ok(format!("debited {} ({key})", t.amount))
}

#[rollback]
async fn refund(ctx: RollbackContext<'_, String>, _t: Transfer) -> Result<(), StepError> {
    if REFUND_FAILS.load(Ordering::SeqCst) {
        return Err(StepError::fatal(format!("bank A is down ({})", ctx.key())));
    }
    Ok(())
}

#[step(name = "credit", rollback = reverse_credit)]
async fn credit(key: IdempotencyKey, t: Transfer) -> Result<String, StepError> {
    if t.to == "mallory" {
        return Err(StepError::fatal("closed account mallory"));
    }
    Ok(format!("credited {} ({key})", t.amount))
}

#[rollback]
async fn reverse_credit(ctx: RollbackContext<'_, String>, _t: Transfer) -> Result<(), StepError> {
    // Nothing landed on a closed account; the key is what a real call takes.
    let _key = ctx.key();
    Ok(())
}

#[workflow(name = "transfer")]
async fn transfer(ctx: WorkflowContext, t: Transfer) -> Result<String, WorkflowError> {
    let debit = debit(&ctx, t.clone()).await?;
    let credit = credit(&ctx, t).await?;
    ctx.sleep("settle", "1 day").await?;
    let approved: bool = ctx
        .wait_for_event("wait-approval", "approval", "7 days")
        .await?;
    Ok(format!("{debit}, {credit}, approved {approved}"))
}

fn engine(clock: TestClock) -> Engine {
    Engine::builder()
        .clock(clock)
        .temporary()
        .expect("temporary engine")
}

fn step(inspection: &Inspection, i: usize) -> &saga_runtime::inspect::InspectedStep {
    match &inspection.slots[i] {
        InspectedSlot::Step(step) => step,
        other => panic!("slot {i} is not a step: {other:?}"),
    }
}

#[tokio::test]
async fn a_failed_instance_shows_its_steps_compensations_and_both_errors() {
    let engine = engine(TestClock::auto_advancing());
    let t = Transfer {
        to: "mallory".into(),
        amount: 100,
    };
    REFUND_FAILS.store(true, Ordering::SeqCst);
    let run = engine.start(transfer, "t-failed", t).await.unwrap();
    assert!(within("the failure", run.result()).await.is_err());
    let inspection = run.inspect().await.unwrap();

    assert_eq!(inspection.workflow, "transfer");
    assert_eq!(inspection.status, Status::Errored);
    assert_eq!(
        inspection.input.json(),
        Some(&json!({"to": "mallory", "amount": 100}))
    );
    assert_eq!(inspection.output, None);
    assert_eq!(inspection.slots.len(), 2, "{:?}", inspection.slots);

    let debit = step(&inspection, 0);
    assert_eq!(debit.name, "debit");
    assert_eq!(debit.key.as_str(), "t-failed:debit");
    assert_eq!(debit.state, StepState::Completed { attempts: 1 });
    assert_eq!(
        debit.output.as_ref().and_then(|o| o.json()),
        Some(&json!("debited 100 (t-failed:debit)"))
    );
    assert!(debit.started_at.is_some() && debit.ended_at.is_some());
    assert_eq!(
        debit.input.as_ref().and_then(|i| i.json()),
        Some(&json!([{"to": "mallory", "amount": 100}])),
        "its inputs, from its start record"
    );

    let credit = step(&inspection, 1);
    assert_eq!(credit.key.as_str(), "t-failed:credit");
    match &credit.state {
        StepState::Failed { attempts, error } => {
            assert_eq!(*attempts, 1);
            assert_eq!(error.message(), "closed account mallory");
        }
        other => panic!("credit is {other:?}"),
    }
    assert_eq!(credit.output, None);

    // Reverse start order: credit first; debit's refund failed.
    let order: Vec<_> = inspection
        .compensations
        .iter()
        .map(|c| (c.step.as_str(), c.key.as_str()))
        .collect();
    assert_eq!(
        order,
        [
            ("credit", "t-failed:rollback:credit"),
            ("debit", "t-failed:rollback:debit")
        ]
    );
    assert_eq!(
        inspection.compensations[0].state,
        CompensationOutcome::Completed
    );
    // Each made one attempt: the refund's error was fatal.
    let attempts: Vec<u32> = inspection
        .compensations
        .iter()
        .map(|c| c.attempts)
        .collect();
    assert_eq!(attempts, [1, 1]);
    assert!(matches!(
        &inspection.compensations[1].state,
        CompensationOutcome::Failed { error } if error.contains("bank A is down")
    ));
    assert!(
        inspection
            .failure
            .as_ref()
            .unwrap()
            .message()
            .contains("closed account mallory"),
        "{:?}",
        inspection.failure
    );
    assert!(
        inspection
            .rollback_failure
            .as_ref()
            .unwrap()
            .message()
            .contains("bank A is down"),
        "{:?}",
        inspection.rollback_failure
    );
    assert!(inspection.finished_at.is_some());
    REFUND_FAILS.store(false, Ordering::SeqCst);
}

#[tokio::test]
async fn sleeps_and_waits_show_wake_times_deadlines_and_payloads() {
    let clock = TestClock::starting_at(at(0));
    let engine = engine(clock.clone());
    let t = Transfer {
        to: "bob".into(),
        amount: 5,
    };
    let run = engine.start(transfer, "t-waits", t).await.unwrap();
    within("the sleep", clock.wait_for_sleepers(1)).await;
    let sleeping = run.inspect().await.unwrap();
    let InspectedSlot::Sleep(sleep) = &sleeping.slots[2] else {
        panic!("{:?}", sleeping.slots)
    };
    assert_eq!((sleep.name.as_str(), sleep.done), ("settle", false));
    assert_eq!(sleep.wake_at, Some(at(24 * 3600)));
    assert_eq!(sleeping.status, Status::Waiting);

    clock.advance(Duration::from_secs(24 * 3600));
    wait_until("the wait", || async {
        run.inspect().await.unwrap().slots.len() >= 4
    })
    .await;
    let waiting = run.inspect().await.unwrap();
    let InspectedSlot::Sleep(sleep) = &waiting.slots[2] else {
        panic!()
    };
    assert!(sleep.done);
    assert_eq!(sleep.wake_at, Some(at(24 * 3600)), "kept from history");
    assert_eq!(sleep.ended_at, Some(at(24 * 3600)));
    let InspectedSlot::Wait(wait) = &waiting.slots[3] else {
        panic!()
    };
    assert_eq!(wait.event_type, "approval");
    assert_eq!(wait.deadline, Some(at(8 * 24 * 3600)));
    assert_eq!(wait.state, WaitState::Waiting);

    engine
        .send_event("t-waits", "approval", &true)
        .await
        .unwrap();
    let output: String = within("the output", run.result()).await.unwrap();
    let done = run.inspect().await.unwrap();
    let InspectedSlot::Wait(wait) = &done.slots[3] else {
        panic!()
    };
    assert!(
        matches!(&wait.state, WaitState::Received { payload } if payload.json() == Some(&json!(true)))
    );
    assert_eq!(wait.deadline, Some(at(8 * 24 * 3600)), "kept from history");
    assert!(done.pending_events.is_empty());
    assert_eq!(
        done.output.as_ref().and_then(|o| o.json()),
        Some(&json!(output))
    );
    assert!(done.compensations.is_empty());
}

#[tokio::test]
async fn a_restart_shows_the_new_generation_and_its_keys() {
    let clock = TestClock::starting_at(at(0));
    let engine = engine(clock.clone());
    let t = Transfer {
        to: "bob".into(),
        amount: 7,
    };
    let run = engine.start(transfer, "t-restart", t).await.unwrap();
    within("the sleep", clock.wait_for_sleepers(1)).await;
    run.restart_from("credit").await.unwrap();
    wait_until("the sleep of generation 1", || async {
        let inspection = run.inspect().await.unwrap();
        matches!(inspection.slots.get(2), Some(InspectedSlot::Sleep(s)) if s.generation == 1)
    })
    .await;
    let inspection = run.inspect().await.unwrap();
    assert_eq!(inspection.generation, 1);
    assert_eq!(step(&inspection, 0).key.as_str(), "t-restart:debit");
    assert_eq!(step(&inspection, 0).generation, 0);
    assert_eq!(step(&inspection, 1).key.as_str(), "t-restart:credit@1");
    assert_eq!(
        step(&inspection, 1).state,
        StepState::Completed { attempts: 1 }
    );
    assert!(step(&inspection, 1).started_at.is_some());
    let InspectedSlot::Sleep(sleep) = &inspection.slots[2] else {
        panic!()
    };
    assert_eq!(
        sleep.occurrence, 0,
        "the discarded sleep's call is not counted"
    );
    assert!(sleep.started_at.is_some() && !sleep.done);
    engine.close().await;
}

#[step(name = "reserve-seats")]
async fn reserve_seats(
    key: IdempotencyKey,
    show: String,
    seats: Vec<u32>,
) -> Result<usize, StepError> {
    let _ = (key, show);
    Ok(seats.len())
}

#[step(name = "ping")]
async fn ping(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Ok(())
}

#[workflow(name = "booking")]
async fn booking(ctx: WorkflowContext, show: String) -> Result<usize, WorkflowError> {
    let seats = reserve_seats(&ctx, show, vec![4, 5]).await?;
    ping(&ctx).await?;
    let counted: usize = ctx
        .step("count", StepConfig::default(), move |key| async move {
            let _ = key;
            Ok(seats)
        })
        .await?;
    ctx.sleep("hold", "1 day").await?;
    Ok(counted)
}

#[tokio::test]
async fn step_inputs_are_recorded_in_their_start_records_and_survive_a_restart() {
    let dir = std::env::temp_dir().join(format!("saga-inspect-inputs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let clock = TestClock::starting_at(at(0));
    let engine = Engine::builder().clock(clock.clone()).open(&dir).unwrap();
    let run = engine
        .start(booking, "b-1", "hamlet".to_owned())
        .await
        .unwrap();
    within("the hold", clock.wait_for_sleepers(1)).await;
    drop(run);
    engine.close().await;

    let engine = Engine::open(&dir).unwrap();
    let inspection = engine
        .instance("b-1")
        .await
        .unwrap()
        .inspect()
        .await
        .unwrap();
    let input = |i: usize| step(&inspection, i).input.as_ref().and_then(|v| v.json());
    // The tuple of the caller's inputs, without the injected key.
    assert_eq!(input(0), Some(&json!(["hamlet", [4, 5]])));
    assert_eq!(input(1), Some(&json!(null)), "a step without inputs");
    assert_eq!(input(2), None, "a ctx.step closure records none");
    engine.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
