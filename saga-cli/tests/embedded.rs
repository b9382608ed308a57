//! The same commands embedded in an application (`saga_cli::run`),
//! on the engine that holds the store: `watch` works here, and the
//! instances run as the control commands ask.

mod support;

use std::time::Duration;

use saga_runtime::testing::TestClock;
use saga_runtime::{Engine, Status};
use support::{Order, fulfil};

async fn saga(engine: &Engine, args: &[&str]) -> String {
    let mut out = Vec::new();
    saga_cli::run(engine, args, &mut out)
        .await
        .unwrap_or_else(|e| panic!("saga {args:?}: {e}"));
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn watch_prints_events_as_they_become_durable() {
    let clock = TestClock::new();
    let engine = Engine::builder().clock(clock.clone()).temporary().unwrap();
    let watcher = {
        let engine = engine.clone();
        tokio::spawn(async move { saga(&engine, &["watch", "--count", "7", "--json"]).await })
    };
    // Lets the watcher subscribe before the instance starts.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let run = engine
        .start(
            fulfil(),
            "order-1",
            Order {
                item: "desk".into(),
            },
        )
        .await
        .unwrap();
    clock.wait_for_sleepers(1).await;
    clock.advance(Duration::from_secs(3600));
    let printed = tokio::time::timeout(Duration::from_secs(30), watcher)
        .await
        .expect("seven events")
        .unwrap();
    let events: Vec<serde_json::Value> = printed
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let kinds: Vec<_> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "InstanceCreated",
            "InstanceResumed",
            "StepStarted",
            "StepCompleted",
            "SleepStarted",
            "SleepCompleted",
            "EventWaitStarted"
        ],
        "{printed}"
    );
    assert!(
        events
            .iter()
            .all(|e| e["schema"] == 1 && e["instance"] == "order-1")
    );
    let seqs: Vec<_> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [0, 1, 2, 3, 4, 5, 6]);
    drop(run);
}

#[tokio::test]
async fn control_commands_act_at_once_on_a_registered_workflow() {
    let clock = TestClock::new();
    let engine = Engine::builder().clock(clock.clone()).temporary().unwrap();
    let run = engine
        .start(
            fulfil(),
            "order-2",
            Order {
                item: "chair".into(),
            },
        )
        .await
        .unwrap();
    clock.wait_for_sleepers(1).await;
    let out = saga(
        &engine,
        &["send-event", "order-2", "payment", "--json", "9"],
    )
    .await;
    assert!(!out.contains("not registered"), "{out}");
    clock.advance(Duration::from_secs(3600));
    let result = tokio::time::timeout(Duration::from_secs(30), run.result())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(result, "reserved chair (order-2:reserve), paid 9");
    let timeline = saga(&engine, &["show", "order-2"]).await;
    assert!(timeline.contains("complete"), "{timeline}");
    assert!(timeline.contains(r#"event   9  (1 B)"#), "{timeline}");
    assert_eq!(run.status().await.unwrap(), Status::Complete);
}
