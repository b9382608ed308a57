//! `saga schedules` on a store an application's engine wrote with two
//! schedules declared: the list and its `--json` (with the last tick's
//! outcome), `pause` and `resume`
//! (durable: the application's engine sees them), an unknown name, and
//! `trigger`, which needs an engine that declares the schedule.

mod support;

use std::path::Path;

use saga_runtime::Engine;
use saga_runtime::testing::TestClock;

use support::{fails, json, ok, reminders, schedules_store, tagged_store};

/// The schedule `name` of `saga schedules --json`.
fn schedule(db: &Path, name: &str) -> serde_json::Value {
    let listed = json(db, &["schedules"]);
    listed["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no schedule {name}: {listed}"))
        .clone()
}

#[test]
fn schedules_lists_each_with_its_timing_next_and_last_tick() {
    let store = schedules_store();
    let table = ok(store.path(), &["schedules"]);
    let lines: Vec<&str> = table.lines().collect();
    for column in [
        "NAME",
        "WORKFLOW",
        "TIMING",
        "STATE",
        "NEXT TICK",
        "LAST TICK",
        "LAST OUTCOME",
    ] {
        assert!(lines[0].contains(column), "{table}");
    }
    assert_eq!(lines.len(), 3, "{table}");
    // By name: nightly, then reminders.
    let nightly = lines[1];
    assert!(nightly.starts_with("nightly "), "{table}");
    for cell in ["remind", r#"cron "0 2 * * *" in UTC"#, "active"] {
        assert!(nightly.contains(cell), "{cell}: {table}");
    }
    assert!(nightly.contains("2030-01-01 02:00:00 UTC"), "{table}");
    assert!(nightly.trim_end().ends_with('-'), "no tick yet: {table}");
    let reminders = lines[2];
    assert!(reminders.starts_with("reminders "), "{table}");
    assert!(reminders.contains("every 900 s"), "{table}");
    let next = reminders.find("2030-01-01 00:30:00 UTC").expect(&table);
    let last = reminders.find("2030-01-01 00:15:00 UTC").expect(&table);
    assert!(next < last, "{table}");
    // The last tick's instance ended: its outcome.
    let outcome = reminders.find("complete").expect(&table);
    assert!(last < outcome, "{table}");

    let listed = json(store.path(), &["schedules"]);
    let names: Vec<&str> = listed["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nightly", "reminders"]);
    let reminders = &listed["schedules"][1];
    assert_eq!(reminders["workflow"], "remind");
    assert_eq!(reminders["timing"], "every 900 s");
    assert_eq!(reminders["paused"], false);
    assert_eq!(
        reminders["next_ticks"],
        serde_json::json!([
            "2030-01-01T00:30:00.000Z",
            "2030-01-01T00:45:00.000Z",
            "2030-01-01T01:00:00.000Z"
        ])
    );
    assert_eq!(reminders["last_tick"], "2030-01-01T00:15:00.000Z");
    assert_eq!(
        reminders["catch_up"],
        serde_json::json!({"policy": "latest", "at_most": null})
    );
    assert_eq!(reminders["overlap"], "allow");
    assert_eq!(
        reminders["declared_here"], false,
        "the binary declares none"
    );
    assert_eq!(reminders["last_outcome"], "complete");
    assert_eq!(reminders["run_time"], false);
    assert_eq!(listed["schedules"][0]["last_tick"], serde_json::Value::Null);
    assert_eq!(
        listed["schedules"][0]["last_outcome"],
        serde_json::Value::Null
    );
}

#[test]
fn pause_and_resume_hold_for_the_application() {
    let store = schedules_store();
    let out = ok(store.path(), &["schedules", "pause", "reminders"]);
    assert!(out.starts_with("paused schedule reminders:"), "{out}");
    let paused = schedule(store.path(), "reminders");
    assert_eq!(paused["paused"], true);
    assert_eq!(paused["next_ticks"], serde_json::json!([]));
    assert_eq!(schedule(store.path(), "nightly")["paused"], false);
    let table = ok(store.path(), &["schedules"]);
    let row = table.lines().find(|l| l.starts_with("reminders")).unwrap();
    assert!(row.contains("paused"), "{table}");
    // Pausing again changes nothing.
    ok(store.path(), &["schedules", "pause", "reminders"]);

    // The application, which declares it, finds it paused.
    let application_sees_paused = || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let engine = Engine::builder()
                .clock(TestClock::new())
                .schedule(reminders())
                .open(store.path())
                .unwrap();
            let listed = engine.schedules().list().await.unwrap();
            engine.close().await;
            listed
                .iter()
                .find(|s| s.name == "reminders")
                .unwrap()
                .paused
        })
    };
    assert!(application_sees_paused());

    let out = ok(store.path(), &["schedules", "resume", "reminders"]);
    assert!(
        out.starts_with("resumed schedule reminders: next tick "),
        "{out}"
    );
    let resumed = schedule(store.path(), "reminders");
    assert_eq!(resumed["paused"], false);
    assert_eq!(resumed["next_ticks"].as_array().unwrap().len(), 3);
    assert!(!application_sees_paused());
}

#[test]
fn an_unknown_schedule_is_refused_with_the_names_stored() {
    let store = schedules_store();
    for action in ["pause", "resume", "trigger"] {
        let run = fails(store.path(), &["schedules", action, "weekly"]);
        assert_eq!(run.code, 1, "{action}: {}", run.stderr);
        assert!(
            run.stderr
                .contains(r#"unknown schedule "weekly": the store holds nightly, reminders"#),
            "{action}: {}",
            run.stderr
        );
    }
    let empty = tagged_store();
    let run = fails(empty.path(), &["schedules", "pause", "weekly"]);
    assert!(
        run.stderr.contains("the store holds none"),
        "{}",
        run.stderr
    );
    assert_eq!(ok(empty.path(), &["schedules"]).trim(), "no schedules");
    assert_eq!(
        json(empty.path(), &["schedules"])["schedules"],
        serde_json::json!([])
    );
}

#[test]
fn trigger_needs_the_engine_that_declares_the_schedule() {
    let store = schedules_store();
    let run = fails(store.path(), &["schedules", "trigger", "reminders"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("saga --url URL schedules trigger reminders"),
        "{}",
        run.stderr
    );
    // Nothing started: the tick of 00:15 is its only instance.
    let ticks = json(store.path(), &["list", "--tag", "schedule=reminders"]);
    assert_eq!(ticks["instances"].as_array().unwrap().len(), 1, "{ticks}");
    // A control takes no --json; a missing name is wrong usage.
    assert_eq!(fails(store.path(), &["schedules", "pause"]).code, 2);
    let run = fails(store.path(), &["schedules", "--json", "pause", "reminders"]);
    assert_eq!(run.code, 2);
}
