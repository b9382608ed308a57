//! `saga queues` on a store an application's engine wrote with two
//! queues: each queue's waiting and started instances, and its `--json`.

mod support;

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
        ["QUEUE", "WAITING", "STARTED", "OLDEST", "WAITING"],
        "{table}"
    );
    assert_eq!(rows[1][..3], ["bank-api", "2", "1"], "{table}");
    assert!(
        rows[1].len() > 3 && rows[1][3] != "-",
        "the oldest waiting one's time: {table}"
    );
    assert_eq!(rows[2], ["reports", "0", "0", "-"], "{table}");
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
        serde_json::json!({"queue": "reports", "waiting": 0, "started": 0, "oldest_waiting": null})
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
