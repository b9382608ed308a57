//! The replay check before a deploy: `saga_runtime::testing::replay` runs
//! today's workflow code against a history exported from a store, with no
//! side effects, and names the first call that no longer meets it: what
//! would park the instance `Blocked` after the deploy.
//!
//! The histories are exported from instances run by the release in
//! production (`order`), through the file format (`History::to_json`,
//! `History::from_json`), and replayed against the releases a team might
//! write next: steps reordered, inserted, removed, with and without
//! `ctx.patched`.

#[path = "support/helpers.rs"]
mod helpers;
#[path = "support/orders.rs"]
mod orders;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use saga_runtime::testing::{History, ReplayError, Replayed, replay};

use helpers::{fresh, kinds, until_status, wait_until, within};
use orders::{
    approve, charge_card, fraud_check, inserted, order, patched_insertion, patched_removal,
    removed, reordered, reserve,
};

/// An `order` instance `id` started by the release in production, left
/// waiting to be shipped, on a fresh store.
async fn waiting_order(id: &str) -> Engine {
    let engine = fresh(Engine::builder()).await;
    let run = engine.start(order, id, ()).await.unwrap();
    until_status(&run, Status::Waiting).await;
    engine
}

/// The history of `id`, exported and read back from its file.
async fn exported(engine: &Engine, id: &str) -> History {
    let history = History::export(engine, id).await.unwrap();
    let path = std::env::temp_dir().join(format!("saga-replay-{id}-{}.json", std::process::id()));
    std::fs::write(&path, history.to_json()).unwrap();
    let read = History::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(read, history);
    assert_eq!((read.instance(), read.workflow()), (id, "order"));
    read
}

/// The two calls a replay names, or the error it gave instead.
fn diverged(outcome: Result<Replayed, ReplayError>) -> (String, String) {
    let error = outcome.expect_err("the replay should diverge");
    let (recorded, called) = error
        .non_determinism()
        .unwrap_or_else(|| panic!("not a non-determinism: {error}"));
    (recorded.to_owned(), called.to_owned())
}

fn pair(recorded: &str, called: &str) -> (String, String) {
    (recorded.to_owned(), called.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_that_recorded_a_history_replays_it_to_its_end() {
    let engine = waiting_order("order-1").await;
    let history = exported(&engine, "order-1").await;
    // Reserved and charged, waiting: the wait is where history ends.
    assert_eq!(replay(order, &history).await.unwrap(), Replayed::ReachedEnd);
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reordered_step_is_caught_naming_both() {
    let engine = waiting_order("order-2").await;
    let history = exported(&engine, "order-2").await;
    assert_eq!(
        diverged(replay(reordered, &history).await),
        pair("step \"reserve\"", "step \"charge-card\"")
    );
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inserted_step_is_caught_and_its_patch_passes() {
    let engine = waiting_order("order-3").await;
    let history = exported(&engine, "order-3").await;
    let outcome = replay(inserted, &history).await;
    let message = outcome.as_ref().unwrap_err().to_string();
    assert!(
        message.contains(
            "history recorded step \"charge-card\", the workflow code now calls step \"fraud-check\""
        ),
        "{message}"
    );
    assert!(message.contains("order-3"), "{message}");
    assert_eq!(
        diverged(outcome),
        pair("step \"charge-card\"", "step \"fraud-check\"")
    );
    // Behind `ctx.patched` the instance went past the patch: it replays
    // without the new step.
    assert_eq!(
        replay(patched_insertion, &history).await.unwrap(),
        Replayed::ReachedEnd
    );
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_step_is_caught_and_its_patch_passes() {
    let engine = waiting_order("order-4").await;
    let history = exported(&engine, "order-4").await;
    assert_eq!(
        diverged(replay(removed, &history).await),
        pair("step \"charge-card\"", "event wait \"wait-shipped\"")
    );
    assert_eq!(
        replay(patched_removal, &history).await.unwrap(),
        Replayed::ReachedEnd
    );
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_history_replays_through_its_end() {
    let engine = waiting_order("order-5").await;
    engine
        .send_event("order-5", "shipped", &1u64)
        .await
        .unwrap();
    let run = engine.instance("order-5").await.unwrap();
    within("the order's end", run.result::<()>()).await.unwrap();
    let history = exported(&engine, "order-5").await;
    assert_eq!(replay(order, &history).await.unwrap(), Replayed::Returned);
    assert_eq!(
        replay(patched_insertion, &history).await.unwrap(),
        Replayed::Returned
    );
    assert_eq!(
        diverged(replay(inserted, &history).await),
        pair("step \"charge-card\"", "step \"fraud-check\"")
    );
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_of_another_workflow_is_refused() {
    let engine = waiting_order("order-6").await;
    let history = exported(&engine, "order-6").await;
    let outcome = replay(ledger, &history).await;
    assert!(
        matches!(&outcome, Err(ReplayError::OtherWorkflow { workflow, .. }) if workflow == "order"),
        "{outcome:?}"
    );
    engine.close().await;
}

/// Attempts of `post`, and runs of `audit`: a replay makes none.
static POSTED: AtomicU32 = AtomicU32::new(0);
static AUDITED: AtomicU32 = AtomicU32::new(0);

/// Fails its first attempt: the instance waits an hour for the second.
#[step(name = "post", retries = 3, delay = "1 hour", backoff = "constant")]
async fn post(key: IdempotencyKey) -> Result<u32, StepError> {
    orders::note(&key);
    match POSTED.fetch_add(1, Ordering::SeqCst) {
        0 => Err(StepError::retryable("the ledger is down")),
        n => Ok(n),
    }
}

#[step(name = "audit")]
async fn audit(key: IdempotencyKey) -> Result<(), StepError> {
    orders::note(&key);
    AUDITED.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[workflow(name = "ledger")]
async fn ledger(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    Ok(post(&ctx).await?)
}

/// A release that audits after posting, behind a patch.
#[workflow(name = "ledger")]
async fn audited_ledger(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    let posted = post(&ctx).await?;
    if ctx.patched("audit") {
        audit(&ctx).await?;
    }
    Ok(posted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_runs_nothing_and_writes_nothing() {
    let clock = TestClock::new();
    let engine = fresh(Engine::builder().clock(clock.clone())).await;
    let run = engine.start(ledger, "ledger-1", ()).await.unwrap();
    wait_until("the first attempt's failure", || async {
        kinds(&run)
            .await
            .iter()
            .any(|k| matches!(k, EventKind::StepRetrying { .. }))
    })
    .await;
    assert_eq!(POSTED.load(Ordering::SeqCst), 1);
    let before = run.history().await.unwrap();
    let history = History::export(&engine, "ledger-1").await.unwrap();
    // The step is in flight (between attempts): a live run would try it
    // again; the replay stops there, and the code after it never runs.
    for _ in 0..3 {
        assert_eq!(
            replay(ledger, &history).await.unwrap(),
            Replayed::ReachedEnd
        );
        assert_eq!(
            replay(audited_ledger, &history).await.unwrap(),
            Replayed::ReachedEnd
        );
    }
    assert_eq!(POSTED.load(Ordering::SeqCst), 1);
    assert_eq!(AUDITED.load(Ordering::SeqCst), 0);
    // The store holds what it held.
    assert_eq!(run.history().await.unwrap(), before);
    assert_eq!(run.status().await.unwrap(), Status::Running);
    // The live instance goes on as if no replay had happened.
    clock.advance(Duration::from_secs(3600));
    assert_eq!(within("the ledger's end", run.result()).await.unwrap(), 1);
    assert_eq!(POSTED.load(Ordering::SeqCst), 2);
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_history_shows_a_rejected_event_and_replays() {
    let engine = fresh(Engine::builder()).await;
    let run = engine.start(approve, "approve-1", ()).await.unwrap();
    until_status(&run, Status::Waiting).await;
    let bad = serde_json::json!({"approved": "yes"});
    engine
        .send_event("approve-1", "decision", &bad)
        .await
        .unwrap();
    wait_until("the rejection", || async {
        kinds(&run)
            .await
            .iter()
            .any(|k| matches!(k, EventKind::EventRejected { .. }))
    })
    .await;
    let json = History::export(&engine, "approve-1")
        .await
        .unwrap()
        .to_json();
    let file: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(file["format"], 1);
    let rejection = file["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "EventRejected")
        .unwrap_or_else(|| panic!("no rejection in {json}"));
    let text = rejection["text"].as_str().unwrap();
    assert!(
        text.contains("wait \"wait-decision\" rejected event \"decision\""),
        "{text}"
    );
    // Still waiting: the replay ends at the wait.
    let history = History::from_json(&json).unwrap();
    assert_eq!(
        replay(approve, &history).await.unwrap(),
        Replayed::ReachedEnd
    );
    drop(run);
    engine.close().await;
}

const CARD: &str = "4111-1111-1111-1111";

#[step(name = "charge-secret", redact = ["card"])]
async fn charge_secret(key: IdempotencyKey, card: String) -> Result<String, StepError> {
    orders::note(&key);
    Ok(format!("charged {}", card.len()))
}

/// Charges the card of order `n`, then waits for an approver.
#[workflow(name = "pay")]
async fn pay(ctx: WorkflowContext, n: u32) -> Result<String, WorkflowError> {
    let receipt = charge_secret(&ctx, format!("{CARD} order {n}")).await?;
    let _: bool = ctx
        .wait_for_event("wait-approval", "approval", "1 day")
        .await?;
    Ok(receipt)
}

/// The hex digits of `text`, as an exported record holds it.
fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_never_holds_a_redacted_input() {
    let engine = fresh(Engine::builder()).await;
    let run = engine.start(pay, "pay-1", 1).await.unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    let json = History::export(&engine, "pay-1").await.unwrap().to_json();
    assert!(!json.contains(&hex(CARD)), "{json}");
    assert!(json.contains(&hex("[\"<redacted>\"]")), "{json}");
    // A replay never reads a step's inputs.
    let history = History::from_json(&json).unwrap();
    assert_eq!(replay(pay, &history).await.unwrap(), Replayed::ReachedEnd);
    engine.close().await;
}

#[cfg(feature = "encryption")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_history_replays_with_the_keys_only() {
    use saga_runtime::testing::Replayer;
    use saga_runtime::{FailureKind, Keyring};
    let keys = || Keyring::new("k1", [7; 32]).unwrap();
    let engine = fresh(Engine::builder().codec(keys())).await;
    let run = engine.start(pay, "pay-3", 3).await.unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    let json = History::export(&engine, "pay-3").await.unwrap().to_json();
    assert!(
        !json.contains(&hex("order 3")),
        "the input is sealed: {json}"
    );
    let history = History::from_json(&json).unwrap();
    // Without the keys the input does not open: a live run would block.
    let outcome = replay(pay, &history).await;
    assert!(
        matches!(&outcome, Err(ReplayError::Diverged { failure, .. }) if *failure.kind() == FailureKind::Decode),
        "{outcome:?}"
    );
    let replayer = Replayer::new().codec(keys());
    assert_eq!(
        replayer.replay(pay, &history).await.unwrap(),
        Replayed::ReachedEnd
    );
    engine.close().await;
}

/// A child that waits to be confirmed.
#[workflow(name = "book-seat")]
async fn book_seat(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    let seat: u32 = ctx
        .wait_for_event("wait-confirmed", "confirmed", "1 day")
        .await?;
    Ok(seat)
}

/// Reserves, then books a seat as a child, then charges.
#[workflow(name = "trip")]
async fn trip(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    reserve(&ctx).await?;
    let seat = ctx.child("seat", book_seat, ()).await?;
    charge_card(&ctx).await?;
    Ok(seat)
}

/// A release that checks for fraud before the child, for every instance.
#[workflow(name = "trip")]
async fn trip_checked(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    reserve(&ctx).await?;
    fraud_check(&ctx).await?;
    let seat = ctx.child("seat", book_seat, ()).await?;
    charge_card(&ctx).await?;
    Ok(seat)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_waiting_for_its_child_replays_to_the_child_call() {
    let engine = fresh(Engine::builder()).await;
    engine.register(book_seat).unwrap();
    let run = engine.start(trip, "trip-1", ()).await.unwrap();
    let child = "trip-1.seat";
    wait_until("the child", || async {
        engine.instance(child).await.is_ok()
    })
    .await;
    until_status(&engine.instance(child).await.unwrap(), Status::Waiting).await;
    let parent = History::export(&engine, "trip-1").await.unwrap();
    // The child is in flight: the parent's replay ends at its call.
    assert_eq!(replay(trip, &parent).await.unwrap(), Replayed::ReachedEnd);
    assert_eq!(
        diverged(replay(trip_checked, &parent).await),
        pair("child \"seat\"", "step \"fraud-check\"")
    );
    // The child's own history replays against its own code.
    let seat = History::export(&engine, child).await.unwrap();
    assert_eq!(
        replay(book_seat, &seat).await.unwrap(),
        Replayed::ReachedEnd
    );
    // Once the child ended, the parent's replay answers the call from
    // history and goes on.
    engine.send_event(child, "confirmed", &7u32).await.unwrap();
    assert_eq!(within("the trip", run.result()).await.unwrap(), 7);
    let parent = History::export(&engine, "trip-1").await.unwrap();
    assert_eq!(replay(trip, &parent).await.unwrap(), Replayed::Returned);
    drop(run);
    engine.close().await;
}

/// Bills, then continues as new until its third run, which waits for a
/// cancellation.
#[workflow(name = "subscription")]
async fn subscription(ctx: WorkflowContext, month: u32) -> Result<(), WorkflowError> {
    charge_card(&ctx).await?;
    if month < 2 {
        return ctx.continue_as_new(subscription, month + 1).await;
    }
    let _: bool = ctx
        .wait_for_event("cancel", "cancel", Duration::from_secs(86_400))
        .await?;
    Ok(())
}

/// The same loop with a step inserted before the charge.
#[workflow(name = "subscription")]
async fn subscription_checked(ctx: WorkflowContext, month: u32) -> Result<(), WorkflowError> {
    fraud_check(&ctx).await?;
    charge_card(&ctx).await?;
    if month < 2 {
        return ctx.continue_as_new(subscription_checked, month + 1).await;
    }
    let _: bool = ctx
        .wait_for_event("cancel", "cancel", Duration::from_secs(86_400))
        .await?;
    Ok(())
}

/// An instance that continued as new is exported as its current run,
/// which replays from its hand-over, and is judged as any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_run_of_a_loop_replays_from_its_hand_over() {
    let engine = fresh(Engine::builder()).await;
    let run = engine.start(subscription, "sub-1", 0).await.unwrap();
    wait_until("its third run waiting", || async {
        run.status().await.unwrap() == Status::Waiting && run.inspect().await.unwrap().run == 2
    })
    .await;
    let history = History::export(&engine, "sub-1").await.unwrap();
    assert_eq!(history.run(), 2);
    let read = History::from_json(&history.to_json()).unwrap();
    assert_eq!(read, history);
    assert_eq!(
        replay(subscription, &read).await.unwrap(),
        Replayed::ReachedEnd
    );
    assert_eq!(
        diverged(replay(subscription_checked, &read).await),
        pair("step \"charge-card\"", "step \"fraud-check\"")
    );
    engine.close().await;
}
