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
        rows,
        [
            vec!["QUEUE", "WAITING", "STARTED"],
            vec!["bank-api", "2", "1"],
            vec!["reports", "0", "0"],
        ],
        "{table}"
    );
    let counted = json(store.path(), &["queues"]);
    assert_eq!(
        counted["queues"],
        serde_json::json!([
            {"queue": "bank-api", "waiting": 2, "started": 1},
            {"queue": "reports", "waiting": 0, "started": 0},
        ])
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
