//! `saga queues` on a store an application's engine wrote with two
//! queues: each queue's waiting and started instances, and its `--json`.

mod support;

use saga_runtime::Engine;
use saga_runtime::queue::Queue;
use saga_runtime::testing::TestClock;
use support::{json, ok, queued_store, tagged_store};

#[test]
fn queues_counts_each_queues_waiting_and_started_instances() {
    let store = queued_store();
    let table = ok(store.path(), &["queues"]);
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["QUEUE", "WAITING", "STARTED", "OLDEST", "WAITING", "LIMITS"],
        "{table}"
    );
    assert_eq!(rows[1][..3], ["bank-api", "2", "1"], "{table}");
    assert!(
        rows[1].len() > 4 && rows[1][3] != "-",
        "the oldest waiting one's time: {table}"
    );
    // The binary declares no queue: it shows the limits the store holds,
    // those every worker takes by.
    assert_eq!(
        rows[1][rows[1].len() - 2..],
        ["concurrency", "1"],
        "{table}"
    );
    assert_eq!(
        rows[2],
        ["reports", "0", "0", "-", "no", "limits"],
        "{table}"
    );
    assert_eq!(rows.len(), 3, "{table}");
    let counted = json(store.path(), &["queues"]);
    let queues = &counted["queues"];
    assert_eq!(
        (
            &queues[0]["queue"],
            &queues[0]["waiting"],
            &queues[0]["started"]
        ),
        (
            &serde_json::json!("bank-api"),
            &serde_json::json!(2),
            &serde_json::json!(1)
        )
    );
    assert!(queues[0]["oldest_waiting"].is_string(), "{counted}");
    assert_eq!(
        queues[1],
        serde_json::json!({"queue": "reports", "waiting": 0, "started": 0, "oldest_waiting": null, "limits": {
            "concurrency": null, "per_key": null, "per_worker": null, "rate": null, "release_while_waiting": false,
        }})
    );
    assert_eq!(counted["unreadable_count"], 0);
}

#[test]
fn a_store_without_queued_instances_has_no_queues() {
    let store = tagged_store();
    assert_eq!(ok(store.path(), &["queues"]).trim(), "no queues");
    assert_eq!(
        json(store.path(), &["queues"])["queues"],
        serde_json::json!([])
    );
}

/// Embedded in the application, whose engine declares the queues, the
/// command shows each queue's limits beside its depth.
#[test]
fn queues_in_the_application_show_the_declared_limits() {
    let store = queued_store();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(declared_limits_shown(store.path()));
}

async fn declared_limits_shown(store: &std::path::Path) {
    let engine = Engine::builder()
        .clock(TestClock::new())
        .queue(
            Queue::new("bank-api")
                .concurrency(1)
                .per_key(1)
                .rate_limit(100, std::time::Duration::from_secs(1))
                .release_while_waiting(),
        )
        .queue(Queue::new("reports"))
        // Registers nothing: it runs none of the store's instances.
        .open(store)
        .unwrap();
    let run = |args: &'static [&'static str]| {
        let engine = engine.clone();
        async move {
            let mut out = Vec::new();
            saga_cli::run(&engine, args, &mut out).await.unwrap();
            String::from_utf8(out).unwrap()
        }
    };
    let table = run(&["queues"]).await;
    let bank = table.lines().find(|l| l.starts_with("bank-api")).unwrap();
    assert!(
        bank.ends_with("concurrency 1, per key 1, 100 per 1s, released while waiting"),
        "{table}"
    );
    let reports = table.lines().find(|l| l.starts_with("reports")).unwrap();
    assert!(reports.ends_with("no limits"), "{table}");
    assert!(!table.contains("saga --url"), "{table}");
    let counted: serde_json::Value =
        serde_json::from_str(&run(&["queues", "--json"]).await).unwrap();
    assert_eq!(
        counted["queues"][0]["limits"],
        serde_json::json!({
            "concurrency": 1,
            "per_key": 1,
            "per_worker": null,
            "rate": {"starts": 100, "per_ms": 1000},
            "release_while_waiting": true,
        })
    );
    // On sled the code's declaration is the limits: a change at run time
    // is refused, and says what to do instead.
    let mut out = Vec::new();
    let refused = saga_cli::run(
        &engine,
        ["queues", "set", "bank-api", "--concurrency", "3"],
        &mut out,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        refused.contains("change Queue::new(\"bank-api\")"),
        "{refused}"
    );
    engine.close().await;
}
