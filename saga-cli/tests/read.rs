//! The read commands of the real binary, on stores the examples wrote:
//! `list`, `show` (the timeline, step inputs, the rollback order, both
//! errors), `check --lock`, and their `--json`.

mod support;

use support::{
    bank_transfer_store, fails, json, nested_store, ok, rollback_failed_store, tagged_store,
    waiting_store,
};

#[test]
fn list_shows_both_transfers_with_status_and_error() {
    let store = bank_transfer_store();
    let table = ok(store.path(), &["list"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("ID "), "{table}");
    assert!(
        lines[0].contains("STATUS") && lines[0].contains("ERROR"),
        "{table}"
    );
    let row = |id: &str| {
        *lines
            .iter()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("no row {id}: {table}"))
    };
    assert!(row("transfer-42").contains("complete"), "{table}");
    let failed = row("transfer-43");
    assert!(failed.contains("errored"), "{table}");
    assert!(
        failed.contains("credit-bank-b"),
        "the error in short: {table}"
    );
    assert!(!table.contains('\x1b'), "no colors into a pipe");

    let errored = ok(store.path(), &["list", "--status", "errored"]);
    assert!(errored.contains("transfer-43") && !errored.contains("transfer-42"));
    let none = ok(store.path(), &["list", "--workflow", "other"]);
    assert_eq!(none.trim(), "no instances");
    let one = json(store.path(), &["list", "--limit", "1"]);
    assert_eq!(one["instances"].as_array().unwrap().len(), 1);
}

#[test]
fn list_json_parses() {
    let store = bank_transfer_store();
    let list = json(store.path(), &["list"]);
    let instances = list["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 2);
    let failed = instances.iter().find(|i| i["id"] == "transfer-43").unwrap();
    assert_eq!(failed["workflow"], "bank-transfer");
    assert_eq!(failed["status"], "errored");
    assert_eq!(failed["workflow_registered"], false);
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("closed account mallory")
    );
    assert!(failed["finished_at"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn show_holds_the_steps_the_rollback_order_and_both_errors() {
    let store = bank_transfer_store();
    let timeline = ok(store.path(), &["show", "transfer-43"]);
    let at = |needle: &str| {
        timeline
            .find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in:\n{timeline}"))
    };
    // The steps in call order, with status, attempts and key.
    assert!(at("debit-bank-a   completed") < at("credit-bank-b  failed"));
    at("key transfer-43:debit-bank-a");
    at("key transfer-43:credit-bank-b");
    at(r#"output  "bank-a:transfer-43:debit-bank-a""#);
    // Each step's inputs from its start record, without its service.
    let input = r#"input   [{"amount":100,"from":"alice","to":"mallory"}]"#;
    assert_eq!(timeline.matches(input).count(), 2, "{timeline}");
    assert!(at("debit-bank-a   completed") < at(input), "{timeline}");
    at("error   bank-b closed account mallory");
    // The workflow's own error, as it stored it.
    at(
        r#"error      {"Refused":{"reason":"bank-b closed account mallory","step":"credit-bank-b"}}"#,
    );
    // The rollback in the order it ran: credit first, then debit.
    let rollback = at("Rollback, in the order it ran");
    let credit = at("transfer-43:rollback:credit-bank-b");
    let debit = at("transfer-43:rollback:debit-bank-a");
    assert!(rollback < credit && credit < debit, "{timeline}");
    // The workflow's error and the rollback's outcome side by side.
    let outcome = &timeline[at("Outcome")..];
    let row = outcome.lines().nth(2).unwrap();
    assert!(row.contains("bank-b closed account mallory"), "{outcome}");
    assert!(
        row.contains("│ completed: 2 of 2 compensations ran"),
        "{outcome}"
    );
    // The workflow's input as JSON, and a bar per step.
    at(r#"{"amount":100,"from":"alice","to":"mallory"}"#);
    assert!(timeline.matches('█').count() >= 2, "{timeline}");
}

#[test]
fn show_json_parses_and_holds_the_same() {
    let store = bank_transfer_store();
    let shown = json(store.path(), &["show", "transfer-43"]);
    let i = &shown["instance"];
    assert_eq!(i["status"], "errored");
    assert_eq!(i["input"]["value"]["to"], "mallory");
    let steps: Vec<_> = i["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps,
        [("debit-bank-a", "completed"), ("credit-bank-b", "failed")]
    );
    let credit = &i["slots"][1];
    assert_eq!(credit["input"]["value"][0]["to"], "mallory");
    let order: Vec<_> = i["compensations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["step"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["credit-bank-b", "debit-bank-a"]);
    assert!(
        i["error"]
            .as_str()
            .unwrap()
            .contains("closed account mallory")
    );
    assert_eq!(i["rollback_error"], serde_json::Value::Null);
    assert_eq!(
        i["error_value"]["value"]["Refused"]["step"], "credit-bank-b",
        "{shown}"
    );
    assert_eq!(i["run"], 0);

    let done = json(store.path(), &["show", "transfer-42"]);
    let slots = done["instance"]["slots"].as_array().unwrap();
    let kinds: Vec<_> = slots.iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["step", "step", "sleep", "wait", "step"]);
    assert_eq!(slots[2]["wake_at"], "2030-01-08T00:00:00.000Z");
    assert_eq!(slots[3]["state"], "received");
    assert_eq!(slots[3]["payload"]["value"]["approved"], true);
}

#[test]
fn human_times_are_in_local_time() {
    let store = waiting_store();
    let tokyo = support::saga_in_zone(store.path(), "Asia/Tokyo", &["show", "order-7"]);
    assert_eq!(tokyo.code, 0, "{}", tokyo.stderr);
    assert!(
        tokyo.stdout.contains("wakes 2030-01-01 10:00:00 JST"),
        "{}",
        tokyo.stdout
    );
    // A POSIX TZ string works too; JSON stays in UTC.
    let posix = support::saga_in_zone(store.path(), "EST5EDT,M3.2.0,M11.1.0", &["show", "order-7"]);
    assert!(
        posix.stdout.contains("wakes 2029-12-31 20:00:00 EST"),
        "{}",
        posix.stdout
    );
    let json = support::saga_in_zone(store.path(), "Asia/Tokyo", &["show", "order-7", "--json"]);
    assert!(
        json.stdout.contains("2030-01-01T01:00:00"),
        "{}",
        json.stdout
    );
}

#[test]
fn show_of_a_waiting_instance_has_its_wake_time_and_deadline() {
    let store = waiting_store();
    let timeline = ok(store.path(), &["show", "order-7"]);
    assert!(
        timeline.contains("at         wait wait-payment"),
        "{timeline}"
    );
    assert!(timeline.contains("sleep cool-off"), "{timeline}");
    assert!(
        timeline.contains("wakes 2030-01-01 01:00:00 UTC"),
        "{timeline}"
    );
    assert!(
        timeline.contains(r#"event "payment", deadline 2030-01-31 01:00:00 UTC"#),
        "{timeline}"
    );
    let list = ok(store.path(), &["list"]);
    assert!(
        list.contains("waiting") && list.contains("wait wait-payment"),
        "{list}"
    );
}

#[test]
fn check_lists_in_flight_instances_the_lock_no_longer_fits() {
    let store = waiting_store();
    let lock = support::TempDir::new("lock");
    std::fs::create_dir_all(lock.path()).unwrap();
    let write = |name: &str, text: &str| {
        let path = lock.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let fits = write(
        "fits.lock",
        "workflow fulfil\nstep fulfil reserve\nsleep fulfil cool-off\nevent fulfil wait-payment\n",
    );
    let out = ok(store.path(), &["check", "--lock", &fits]);
    assert!(out.contains("all 1 in-flight instances fit"), "{out}");

    let renamed = write(
        "renamed.lock",
        "workflow fulfil\nstep * reserve-stock 0123456789abcdef reserve\nsleep fulfil cool-off\n",
    );
    let run = fails(store.path(), &["check", "--lock", &renamed]);
    assert_eq!(run.code, 1);
    assert!(run.stdout.contains("order-7"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains(r#"step "reserve", wait "wait-payment""#),
        "{}",
        run.stdout
    );

    let deleted = write("deleted.lock", "workflow bank-transfer\n");
    let run = support::saga(store.path(), &["check", "--lock", &deleted, "--json"]);
    assert_eq!(run.code, 1);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["schema"], 1);
    assert_eq!(report["stale"][0]["id"], "order-7");
    assert_eq!(
        report["stale"][0]["missing"],
        serde_json::json!([{"kind": "workflow", "name": "fulfil"}])
    );

    // The examples' own lock fits their (finished) instances.
    let examples = bank_transfer_store();
    let lock = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/saga.lock");
    ok(examples.path(), &["check", "--lock", lock]);
}

#[test]
fn colors_follow_the_color_flag_and_no_color() {
    let store = waiting_store();
    let colored = |vars: &[(&str, &str)], args: &[&str]| {
        let run = support::saga_with_env(store.path(), vars, args);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
        run.stdout.contains("\x1b[")
    };
    assert!(!colored(&[], &["list"]), "none into a pipe");
    assert!(colored(&[], &["list", "--color", "always"]));
    assert!(colored(&[], &["--color=always", "show", "order-7"]));
    assert!(colored(&[("CLICOLOR_FORCE", "1")], &["list"]));
    // NO_COLOR turns auto off; an explicit --color always still colors.
    assert!(!colored(
        &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")],
        &["list"]
    ));
    assert!(colored(
        &[("NO_COLOR", "1")],
        &["list", "--color", "always"]
    ));
    assert!(!colored(
        &[("CLICOLOR_FORCE", "1")],
        &["list", "--color", "never"]
    ));
    // JSON is never colored.
    assert!(!colored(&[], &["list", "--json", "--color", "always"]));
    let wrong = support::saga(store.path(), &["list", "--color", "sometimes"]);
    assert_eq!(wrong.code, 2, "{}", wrong.stderr);
}

fn ids(list: &serde_json::Value) -> Vec<String> {
    list["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn list_filters_by_tag_parent_and_prefix_and_pages_with_a_cursor() {
    let store = tagged_store();
    let mut by_tag = ids(&json(store.path(), &["list", "--tag", "customer=42"]));
    by_tag.sort();
    assert_eq!(by_tag, ["tagged-1", "tagged-2"]);
    let list = json(store.path(), &["list", "--tag", "customer=7"]);
    assert_eq!(list["instances"][0]["tags"]["customer"], "7");
    assert_eq!(list["next"], serde_json::Value::Null);
    assert_eq!(
        ids(&json(store.path(), &["list", "--parent", "tagged-1"])),
        ["tagged-2"]
    );
    assert_eq!(
        ids(&json(store.path(), &["list", "--id-prefix", "tagged-3"])),
        ["tagged-3"]
    );
    let later = json(
        store.path(),
        &["list", "--started-after", "2999-01-01T00:00:00Z"],
    );
    assert!(ids(&later).is_empty());

    let first = json(store.path(), &["list", "--limit", "2", "--order", "id"]);
    assert_eq!(ids(&first), ["tagged-1", "tagged-2"]);
    let cursor = first["next"].as_str().expect("a next page").to_owned();
    let rest = json(
        store.path(),
        &["list", "--limit", "2", "--order", "id", "--after", &cursor],
    );
    assert_eq!(ids(&rest), ["tagged-3"]);
    assert_eq!(rest["next"], serde_json::Value::Null);
    let table = ok(store.path(), &["list", "--limit", "1"]);
    assert!(table.contains("next page: --after "), "{table}");

    let shown = json(store.path(), &["show", "tagged-2"]);
    assert_eq!(shown["instance"]["tags"]["customer"], "42");
    assert_eq!(shown["instance"]["parent"], "tagged-1");
    assert!(ok(store.path(), &["show", "tagged-2"]).contains("customer=42"));
    assert!(fails(store.path(), &["list", "--tag", "customer"]).code == 2);
    assert!(fails(store.path(), &["list", "--after", "nonsense"]).code == 2);
}

#[test]
fn list_finds_failed_rollbacks_and_names_the_owner_of_a_waiting_instance() {
    let store = rollback_failed_store();
    assert_eq!(
        ids(&json(store.path(), &["list", "--rollback-failed"])),
        ["order-9"]
    );
    let failed = json(store.path(), &["list", "--failed-compensation"]);
    assert_eq!(failed["instances"][0]["failed_compensation"], true);
    let waiting = waiting_store();
    let list = json(waiting.path(), &["list"]);
    let owner = &list["instances"][0]["owner"];
    assert!(
        owner["worker"]
            .as_str()
            .unwrap()
            .starts_with("this process"),
        "{owner}"
    );
    assert!(owner["since"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn show_nests_a_childs_compensations_inside_its_parents_rollback() {
    let store = nested_store();
    let shown = ok(store.path(), &["show", "tour-1"]);
    assert!(shown.contains("child leg"), "{shown}");
    assert!(shown.contains("instance tour-1.leg (leg)"), "{shown}");
    let rollback = shown
        .split("Rollback, in the order it ran")
        .nth(1)
        .unwrap_or_else(|| panic!("no rollback: {shown}"));
    assert!(rollback.contains("child tour-1.leg"), "{shown}");
    assert!(
        rollback.contains("1.1") && rollback.contains("└ fly"),
        "the child's compensation under its row: {shown}"
    );
    assert!(rollback.contains("tour-1.leg:rollback:fly"), "{shown}");
    // The failed child had nothing left to undo, and the outcome says so.
    assert!(
        shown.contains(
            "completed: 1 of 2 compensations ran; child ship (tour-1.ship) had nothing to undo: it failed, and undid its own steps"
        ),
        "{shown}"
    );
    let child = ok(store.path(), &["show", "tour-1.leg"]);
    assert!(child.contains("compensated"), "{child}");
    assert!(child.contains("parent     tour-1"), "{child}");
    let listed = json(store.path(), &["list", "--status", "compensated"]);
    assert_eq!(ids(&listed), ["tour-1.leg"]);
    let i = &json(store.path(), &["show", "tour-1"])["instance"];
    assert_eq!(i["slots"][0]["kind"], "child");
    assert_eq!(i["slots"][0]["child"], "tour-1.leg");
    assert_eq!(i["compensations"][0]["child"], "tour-1.leg");
    assert_eq!(i["compensations"][0]["key"], serde_json::Value::Null);
    assert_eq!(i["compensations"][0]["attempts"], 1);
}

#[test]
fn history_prints_every_event_in_order() {
    let store = bank_transfer_store();
    let history = ok(store.path(), &["history", "transfer-43"]);
    let lines: Vec<&str> = history.lines().collect();
    assert!(lines[0].starts_with("#0 "), "{history}");
    assert!(
        lines[0].contains("created (workflow \"bank-transfer\")"),
        "{history}"
    );
    assert!(history.contains("rollback started"), "{history}");
    assert!(lines.last().unwrap().contains("errored"), "{history}");
    let as_json = ok(store.path(), &["history", "transfer-43", "--json"]);
    let events: Vec<serde_json::Value> = as_json
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(events.len(), lines.len());
    assert_eq!(events[0]["seq"], 0);
    assert_eq!(events[0]["event"], "InstanceCreated");
    assert_eq!(fails(store.path(), &["history", "nobody"]).code, 1);
    // An instance that never continued as new has run 0 only.
    let run_0 = ok(store.path(), &["history", "transfer-43", "--run", "0"]);
    assert_eq!(run_0, history);
    let later = fails(store.path(), &["history", "transfer-43", "--run", "1"]);
    assert!(later.stderr.contains("keeps no run 1"), "{}", later.stderr);
}

#[test]
fn show_lists_an_event_the_wait_set_aside() {
    let store = waiting_store();
    // `order-7` waits for a `payment` that is a number; this one is not.
    ok(
        store.path(),
        &[
            "send-event",
            "order-7",
            "payment",
            "--json",
            r#""forty-two""#,
        ],
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = saga_runtime::Engine::builder()
            .clock(saga_runtime::testing::TestClock::new())
            .register(support::fulfil())
            .open(store.path())
            .unwrap();
        let run = engine.instance("order-7").await.unwrap();
        support::wait_until("the wait to set the event aside", || async {
            !run.inspect().await.unwrap().rejected_events.is_empty()
        })
        .await;
        engine.close().await;
    });
    let shown = ok(store.path(), &["show", "order-7"]);
    assert!(shown.contains("Events set aside"), "{shown}");
    assert!(
        shown.contains(r#""payment" by wait "wait-payment""#),
        "{shown}"
    );
    let shown = json(store.path(), &["show", "order-7"]);
    let rejected = &shown["instance"]["rejected_events"][0];
    assert_eq!(rejected["wait"], "wait-payment");
    assert!(
        rejected["error"].as_str().unwrap().contains("invalid type"),
        "{rejected}"
    );
    assert_eq!(shown["instance"]["status"], "waiting");
    let history = ok(store.path(), &["history", "order-7"]);
    assert!(history.contains("rejected event \"payment\""), "{history}");
}

#[test]
fn show_lists_the_event_ids_an_instance_remembers() {
    let store = waiting_store();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = saga_runtime::Engine::builder()
            .clock(saga_runtime::testing::TestClock::new())
            .register(support::fulfil())
            .open(store.path())
            .unwrap();
        let sent = engine.event("order-7", "note").id("evt-1").send(&1).await;
        assert_eq!(sent.unwrap(), saga_runtime::Sent::Delivered);
        engine.close().await;
    });
    let shown = json(store.path(), &["show", "order-7"]);
    let remembered = &shown["instance"]["event_ids"];
    assert_eq!(remembered.as_array().map(Vec::len), Some(1), "{remembered}");
    assert_eq!(remembered[0]["id"], "evt-1");
    assert_eq!(remembered[0]["event_type"], "note");
    assert!(remembered[0]["sent_at"].is_string(), "{remembered}");
}

#[test]
fn show_lists_the_latest_value_of_each_published_name() {
    let store = support::TempDir::new("published");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        use saga_runtime::prelude::*;
        let import = workflow_fn("import", |ctx: WorkflowContext, rows: u32| async move {
            for done in 1..=rows {
                ctx.publish("progress", &done)?;
            }
            ctx.publish("stage", "imported")?;
            Ok::<_, WorkflowError>(rows)
        });
        let engine = Engine::builder().open(store.path()).unwrap();
        let run = engine.start(import, "import-9", 3).await.unwrap();
        assert_eq!(run.result().await.unwrap(), 3);
        drop(run);
        engine.close().await;
    });
    let shown = ok(store.path(), &["show", "import-9"]);
    assert!(shown.contains("Published"), "{shown}");
    let progress = shown
        .lines()
        .find(|line| line.contains(r#""progress""#))
        .expect("a line for progress");
    assert!(progress.contains("  3  (1 B)"), "{shown}");
    assert!(shown.contains(r#""imported""#), "{shown}");
    let shown = json(store.path(), &["show", "import-9"]);
    let published = &shown["instance"]["published"];
    assert_eq!(published[0]["name"], "progress");
    assert_eq!(published[0]["value"]["value"], 3);
    assert_eq!(published[1]["name"], "stage");
    assert_eq!(published[1]["value"]["value"], "imported");
    assert!(published[1]["version"].as_u64() > published[0]["version"].as_u64());
    let history = ok(store.path(), &["history", "import-9"]);
    assert_eq!(
        history.matches("published a new value").count(),
        4,
        "{history}"
    );
}
