//! The control commands of the real binary. It registers no workflow: each
//! command writes its intent into the journal, checked here with
//! `show --json` and by reopening the store with the runtime API and the
//! workflow registered, as the application would.

mod support;

use std::path::Path;
use std::time::Duration;

use saga_runtime::testing::TestClock;
use saga_runtime::{Engine, Error, Status};
use std::sync::atomic::Ordering;

use support::{
    REFUND_DOWN, bank_transfer_store, fulfil, json, ok, refund_order, rollback_failed_store,
    waiting_store,
};

fn status(db: &Path, id: &str) -> String {
    json(db, &["show", id])["instance"]["status"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Opens the store as the application does, with `fulfil` registered,
/// and waits for `order-7`'s result.
fn application_result(db: &Path) -> Result<String, Error> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = Engine::builder()
            .clock(TestClock::auto_advancing())
            .register(fulfil())
            .open(db)
            .unwrap();
        let run = engine.instance("order-7").await.unwrap();
        let result = tokio::time::timeout(Duration::from_secs(30), run.result::<String>())
            .await
            .expect("the application finishes the instance");
        engine.close().await;
        result
    })
}

#[test]
fn send_event_is_taken_by_the_application() {
    let store = waiting_store();
    let out = ok(
        store.path(),
        &["send-event", "order-7", "payment", "--json", "42"],
    );
    assert!(out.contains(r#"sent event "payment" to order-7"#), "{out}");
    let shown = json(store.path(), &["show", "order-7"]);
    let pending = &shown["instance"]["pending_events"][0];
    assert_eq!(pending["event_type"], "payment");
    assert_eq!(pending["payload"]["value"], 42);
    assert_eq!(
        application_result(store.path()).unwrap(),
        "reserved lamp (order-7:reserve), paid 42"
    );
}

#[test]
fn pause_then_resume() {
    let store = waiting_store();
    let out = ok(store.path(), &["pause", "order-7"]);
    assert!(out.contains("status: paused"), "{out}");
    assert_eq!(status(store.path(), "order-7"), "paused");
    // Paused, the application leaves it alone; resumed, it runs it again.
    ok(store.path(), &["resume", "order-7"]);
    assert_ne!(status(store.path(), "order-7"), "paused");
    ok(
        store.path(),
        &["send-event", "order-7", "payment", "--json", "5"],
    );
    assert_eq!(
        application_result(store.path()).unwrap(),
        "reserved lamp (order-7:reserve), paid 5"
    );
}

#[test]
fn terminate_ends_it_at_once() {
    let store = waiting_store();
    let out = ok(store.path(), &["terminate", "order-7"]);
    assert!(out.contains("status: terminated"), "{out}");
    assert_eq!(status(store.path(), "order-7"), "terminated");
    assert!(matches!(
        application_result(store.path()),
        Err(Error::Terminated { .. })
    ));
}

#[test]
fn terminate_with_rollback_leaves_the_compensations_to_the_application() {
    let store = waiting_store();
    let out = ok(store.path(), &["terminate", "--rollback", "order-7"]);
    assert!(out.contains("its compensations run first"), "{out}");
    let shown = json(store.path(), &["show", "order-7"]);
    assert_eq!(shown["instance"]["status"], "rolling back");
    assert_eq!(shown["instance"]["rollback_cause"], "terminated by user");
    assert!(matches!(
        application_result(store.path()),
        Err(Error::Terminated { .. })
    ));
    assert_eq!(status(store.path(), "order-7"), "terminated");
}

#[test]
fn restart_runs_the_failed_transfer_again_as_a_new_generation() {
    let store = bank_transfer_store();
    let out = ok(store.path(), &["restart", "transfer-43"]);
    assert!(
        out.contains("restarted transfer-43 from the beginning"),
        "{out}"
    );
    let i = &json(store.path(), &["show", "transfer-43"])["instance"];
    assert_eq!(i["status"], "queued");
    assert_eq!(i["generation"], 1);
    assert_eq!(i["slots"].as_array().unwrap().len(), 0);
    assert_eq!(i["error"], serde_json::Value::Null);
    // The runtime API reads the same from the store.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = Engine::open(store.path()).unwrap();
        let info = engine
            .instance("transfer-43")
            .await
            .unwrap()
            .info()
            .await
            .unwrap();
        assert_eq!(info.status, Status::Queued);
        assert!(info.failure.is_none());
        engine.close().await;
    });
}

#[test]
fn restart_from_a_step_keeps_the_steps_before_it() {
    let store = bank_transfer_store();
    ok(
        store.path(),
        &["restart", "--from", "credit-bank-b", "transfer-42"],
    );
    let i = &json(store.path(), &["show", "transfer-42"])["instance"];
    assert_eq!(i["status"], "queued");
    assert_eq!(i["generation"], 1);
    let kept: Vec<_> = i["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["key"].as_str().unwrap()))
        .collect();
    assert_eq!(kept, [("debit-bank-a", "transfer-42:debit-bank-a")]);

    // A step before it was compensated in the failed transfer: refused.
    let refused = support::fails(
        store.path(),
        &["restart", "--from", "credit-bank-b", "transfer-43"],
    );
    assert_eq!(refused.code, 1);
    assert!(refused.stderr.contains("compensated"), "{}", refused.stderr);
}

#[test]
fn retry_rollback_runs_the_refund_that_gave_up_again() {
    let store = rollback_failed_store();
    let timeline = ok(store.path(), &["show", "order-9"]);
    let outcome = &timeline[timeline.find("Outcome").unwrap()..];
    assert!(
        outcome.contains("out of stock")
            && outcome.contains(
                "│ gave up: the compensation of step \"charge\" failed: the refund API is down"
            ),
        "both errors side by side:\n{timeline}"
    );

    let out = ok(store.path(), &["retry-rollback", "order-9"]);
    assert!(out.contains("status: rolling back"), "{out}");
    let i = &json(store.path(), &["show", "order-9"])["instance"];
    assert_eq!(i["status"], "rolling back");
    assert_eq!(i["rollback_error"], serde_json::Value::Null);

    // The application, with the refund API back, finishes the rollback.
    REFUND_DOWN.store(false, Ordering::SeqCst);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let result = runtime.block_on(async {
        let engine = Engine::builder()
            .clock(TestClock::auto_advancing())
            .register(refund_order())
            .open(store.path())
            .unwrap();
        let run = engine.instance("order-9").await.unwrap();
        let result = tokio::time::timeout(Duration::from_secs(30), run.result::<()>())
            .await
            .unwrap();
        engine.close().await;
        result
    });
    assert!(
        matches!(
            result,
            Err(Error::WorkflowFailed {
                rollback_failure: None,
                ..
            })
        ),
        "{result:?}"
    );
    let i = &json(store.path(), &["show", "order-9"])["instance"];
    assert_eq!(i["compensations"][0]["state"], "completed");
    assert_eq!(i["compensations"][0]["key"], "order-9:rollback:charge");
}
