//! Updates with a reply: a caller sends a named request
//! (`Instance::update_with_id`), the workflow takes it where it chooses
//! (`ctx.take_update`) and answers (`Update::reply`), and the caller gets
//! the reply. An update is handled at most once: a caller that retries
//! with the same id gets the same reply, even one whose earlier call was
//! dropped at any await. An update to an ended instance, or of a name the
//! workflow does not declare, or that its validator rejects, is refused
//! at once, with nothing recorded. The workflows are
//! written with `#[workflow]` and `#[step]`, as users write them.

#[path = "support/helpers.rs"]
mod helpers;

use std::time::Duration;

use saga_runtime::Engine;
use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;

use helpers::{Reopenable, drop_after, until_status, within};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Approval {
    by: String,
    discount: u64,
}

fn approval(discount: u64) -> Approval {
    Approval {
        by: "ada".into(),
        discount,
    }
}

#[step(name = "charge", read_only)]
async fn charge(total: u64) -> Result<u64, StepError> {
    Ok(total)
}

/// Takes one approval, replies with the new total, waits to be shipped,
/// and charges it.
#[workflow(name = "order", updates = ["approve"])]
async fn order(ctx: WorkflowContext, total: u64) -> Result<u64, WorkflowError> {
    let approved = ctx.take_update::<Approval>("approve", "7 days").await?;
    let total = total.saturating_sub(approved.request.discount);
    approved.reply(&total).await?;
    ctx.wait_for_event::<()>("ship", "ship", "7 days").await?;
    Ok(charge(&ctx, total).await?)
}

/// Takes one approval, as `order` does, of a discount of at most 50.
#[workflow(name = "checked-order", updates = ["approve"], validator = check_approval)]
async fn checked_order(ctx: WorkflowContext, total: u64) -> Result<u64, WorkflowError> {
    let approved = ctx.take_update::<Approval>("approve", "7 days").await?;
    let total = total.saturating_sub(approved.request.discount);
    approved.reply(&total).await?;
    Ok(total)
}

/// The validator of `checked_order`'s updates.
fn check_approval(update: &str, request: &serde_json::Value) -> Result<(), String> {
    match request["discount"].as_u64() {
        Some(discount) if discount <= 50 => Ok(()),
        _ => Err(format!("{update}: the discount must be 0-50")),
    }
}

/// Sleeps a day, then takes one approval and replies with the discount.
#[workflow(name = "late-order", updates = ["approve"])]
async fn late_order(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    ctx.sleep("a-day", "1 day").await?;
    let approved = ctx.take_update::<Approval>("approve", "7 days").await?;
    approved.reply(&approved.request.discount).await?;
    Ok(())
}

/// Takes an approval and ends without a reply.
#[workflow(name = "silent-order", updates = ["approve"])]
async fn silent_order(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    let _ignored = ctx.take_update::<Approval>("approve", "7 days").await?;
    Ok(())
}

/// How many update requests the instance stored, and how many replies it
/// recorded.
async fn requests_and_replies(run: &(impl AsRef<Instance> + ?Sized)) -> (usize, usize) {
    let kinds = helpers::kinds(run).await;
    let requests = kinds
        .iter()
        .filter(|k| matches!(k, EventKind::EventReceived { event_type } if event_type.ends_with("approve")))
        .count();
    let replies = kinds
        .iter()
        .filter(|k| matches!(k, EventKind::UpdateReplied { .. }))
        .count();
    (requests, replies)
}

#[tokio::test]
async fn an_update_is_answered_with_the_workflows_reply() {
    let engine = helpers::fresh(Engine::builder().register(order)).await;
    let run = engine.start(order, "order-1", 100).await.unwrap();
    // Without an id of the caller's: the update gets one of its own.
    let total: u64 = within("the reply", run.update("approve", &approval(10)))
        .await
        .unwrap();
    assert_eq!(total, 90);
    assert_eq!(requests_and_replies(&run).await, (1, 1));
    engine.send_event("order-1", "ship", &()).await.unwrap();
    assert_eq!(within("the result", run.result()).await.unwrap(), 90);
    engine.close().await;
}

#[tokio::test]
async fn a_retried_update_is_handled_once_and_answered_again_even_after_a_reopen_and_the_end() {
    let store = Reopenable::new("updates-retry").await;
    let engine = store.open(|| Engine::builder().register(order)).await;
    let run = engine.start(order, "order-2", 100).await.unwrap();
    let first: u64 = within(
        "the reply",
        run.update_with_id("approve", "approval-2", &approval(10)),
    )
    .await
    .unwrap();
    let again: u64 = within(
        "the reply again",
        run.update_with_id("approve", "approval-2", &approval(10)),
    )
    .await
    .unwrap();
    assert_eq!((first, again), (90, 90));
    assert_eq!(requests_and_replies(&run).await, (1, 1));
    // The same id with another request is a conflict, not a new update.
    let conflict = run
        .update_with_id::<u64, _>("approve", "approval-2", &approval(50))
        .await
        .unwrap_err();
    assert!(
        matches!(conflict, Error::EventIdConflict { .. }),
        "{conflict}"
    );
    drop(run);
    engine.close().await;

    // After a reopen the workflow replays its take and its reply: nothing
    // is recorded again, and the caller's retry reads the reply.
    let engine = store.open(|| Engine::builder().register(order)).await;
    let run = engine.instance("order-2").await.unwrap();
    let after_reopen: u64 = within(
        "the reply after a reopen",
        run.update_with_id("approve", "approval-2", &approval(10)),
    )
    .await
    .unwrap();
    assert_eq!(after_reopen, 90);
    engine.send_event("order-2", "ship", &()).await.unwrap();
    assert_eq!(within("the result", run.result::<u64>()).await.unwrap(), 90);
    let after_end: u64 = run
        .update_with_id("approve", "approval-2", &approval(10))
        .await
        .unwrap();
    assert_eq!(after_end, 90);
    assert_eq!(requests_and_replies(&run).await, (1, 1));
    engine.close().await;
}

#[tokio::test]
async fn an_update_to_an_ended_instance_or_of_an_undeclared_name_is_refused_at_once() {
    let engine = helpers::fresh(Engine::builder().register(order)).await;
    let run = engine.start(order, "order-3", 100).await.unwrap();
    let undeclared = run
        .update_with_id::<u64, _>("cancel", "cancel-1", &())
        .await
        .unwrap_err();
    assert!(
        matches!(&undeclared, Error::UpdateNotDeclared { update, declared, .. }
            if update == "cancel" && declared == &["approve"]),
        "{undeclared}"
    );
    assert_eq!(requests_and_replies(&run).await, (0, 0));

    run.terminate().await.unwrap();
    until_status(&run, Status::Terminated).await;
    let ended = run
        .update_with_id::<u64, _>("approve", "approval-3", &approval(10))
        .await
        .unwrap_err();
    assert!(
        matches!(
            ended,
            Error::InvalidState {
                status: Status::Terminated,
                ..
            }
        ),
        "{ended}"
    );
    assert_eq!(requests_and_replies(&run).await, (0, 0));
    engine.close().await;
}

#[tokio::test]
async fn an_update_the_workflow_takes_without_replying_ends_the_call_with_a_typed_error() {
    let engine = helpers::fresh(Engine::builder().register(silent_order)).await;
    let run = engine.start(silent_order, "silent-1", ()).await.unwrap();
    let unanswered = within(
        "the refusal",
        run.update_with_id::<u64, _>("approve", "approval-4", &approval(1)),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&unanswered, Error::UpdateNotAnswered { update_id, status: Status::Complete, .. }
            if update_id == "approval-4"),
        "{unanswered}"
    );
    engine.close().await;
}

/// A validator rejects a request before anything is recorded; the
/// workflow then takes a valid one.
#[tokio::test]
async fn an_update_its_validator_rejects_is_refused_and_nothing_is_recorded() {
    let engine = helpers::fresh(Engine::builder().register(checked_order)).await;
    let run = engine.start(checked_order, "checked-1", 100).await.unwrap();
    let rejected = run
        .update_with_id::<u64, _>("approve", "greedy", &approval(80))
        .await
        .unwrap_err();
    assert!(
        matches!(&rejected, Error::UpdateRejected { update, reason, .. }
            if update == "approve" && reason.contains("0-50")),
        "{rejected}"
    );
    assert_eq!(requests_and_replies(&run).await, (0, 0));
    let total: u64 = within(
        "the reply",
        run.update_with_id("approve", "fair", &approval(20)),
    )
    .await
    .unwrap();
    assert_eq!(total, 80);
    assert_eq!(within("the result", run.result()).await.unwrap(), 80);
    engine.close().await;
}

/// An update sent before the workflow takes it is held, as an event, and
/// counts against `max_pending_events`.
#[tokio::test]
async fn an_update_sent_early_is_held_until_taken_and_counts_as_a_pending_event() {
    let clock = TestClock::new();
    let engine = helpers::fresh(
        Engine::builder()
            .clock(clock.clone())
            .max_pending_events(1)
            .register(late_order),
    )
    .await;
    let run = engine.start(late_order, "late-1", ()).await.unwrap();
    within("the sleep", clock.wait_for_sleeps(1)).await;
    let caller = {
        let run = run.clone();
        tokio::spawn(async move {
            run.update_with_id::<u64, _>("approve", "early", &approval(7))
                .await
        })
    };
    within("the held update", async {
        while run.inspect().await.unwrap().pending_events.is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    // The one pending place is taken: a second update is refused.
    let full = run
        .update_with_id::<u64, _>("approve", "second", &approval(8))
        .await
        .unwrap_err();
    assert!(matches!(full, Error::InstanceFull { .. }), "{full}");
    clock.advance(Duration::from_secs(86_400));
    assert_eq!(within("the reply", caller).await.unwrap().unwrap(), 7);
    within("the end", run.result()).await.unwrap();
    engine.close().await;
}

/// A call dropped at any await, then retried with its id, gets the one
/// reply: the workflow handled the update once.
#[tokio::test]
async fn an_update_dropped_at_any_await_is_handled_once() {
    let engine = helpers::fresh(Engine::builder().register(order)).await;
    let run = engine.start(order, "order-5", 100).await.unwrap();
    let request = approval(30);
    for polls in 1..12 {
        let call = run.update_with_id::<u64, _>("approve", "approval-5", &request);
        if let Some(answered) = drop_after(call, polls).await {
            assert_eq!(answered.unwrap(), 70, "after {polls} polls");
        }
    }
    let total: u64 = within(
        "the reply",
        run.update_with_id("approve", "approval-5", &approval(30)),
    )
    .await
    .unwrap();
    assert_eq!(total, 70);
    assert_eq!(requests_and_replies(&run).await, (1, 1));
    engine.close().await;
}

/// On PostgreSQL, a worker that does not own the instance (a client of
/// the same schema) sends the update: the owner handles it, and the
/// client gets the reply.
#[tokio::test]
async fn an_update_from_another_worker_is_handled_by_the_owner() {
    if !helpers::on_postgres() {
        return;
    }
    let store = Reopenable::new("updates-workers").await;
    let owner = store.open(|| Engine::builder().register(order)).await;
    let client = store.open(Engine::builder).await;
    let run = owner.start(order, "order-6", 100).await.unwrap();
    until_status(&run, Status::Waiting).await;

    let remote = client.instance("order-6").await.unwrap();
    let total: u64 = within(
        "the reply on the other worker",
        remote.update_with_id("approve", "approval-6", &approval(40)),
    )
    .await
    .unwrap();
    assert_eq!(total, 60);
    let again: u64 = within(
        "the retried reply",
        remote.update_with_id("approve", "approval-6", &approval(40)),
    )
    .await
    .unwrap();
    assert_eq!(again, 60);
    // The client does not register the workflow: the owner refuses an
    // undeclared name as it takes the request from its inbox.
    let undeclared = within(
        "the refusal",
        remote.update_with_id::<u64, _>("cancel", "cancel-6", &()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&undeclared, Error::Refused { reason, .. } if reason.contains("no update named \"cancel\"")),
        "{undeclared}"
    );
    assert_eq!(requests_and_replies(&run).await, (1, 1));
    client.close().await;
    owner.close().await;
}
