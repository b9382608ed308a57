//! Wrong input gives one line on stderr and a non-zero exit, never a
//! panic: an unknown id, an unknown status, bad JSON, a store that cannot
//! be read or is locked, a store this release cannot open.

mod support;

use saga_runtime::Engine;
use support::{TempDir, bank_transfer_store, fails};

#[test]
fn an_unknown_id_exits_1() {
    let store = bank_transfer_store();
    for args in [
        &["show", "transfer-99"][..],
        &["pause", "transfer-99"],
        &["send-event", "transfer-99", "approval", "--json", "{}"],
        &["restart", "--from", "nope", "transfer-43"],
    ] {
        let run = fails(store.path(), args);
        assert_eq!(run.code, 1, "{args:?}");
    }
    let run = fails(store.path(), &["show", "not an id!"]);
    assert!(run.stderr.contains("invalid instance id"), "{}", run.stderr);
}

#[test]
fn a_refused_control_command_exits_1() {
    let store = bank_transfer_store();
    let run = fails(store.path(), &["pause", "transfer-42"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("is complete: cannot pause it"),
        "{}",
        run.stderr
    );
}

#[test]
fn wrong_usage_exits_2() {
    let store = bank_transfer_store();
    for args in [
        &["list", "--status", "sleepy"][..],
        &[
            "send-event",
            "transfer-42",
            "approval",
            "--json",
            "{not json",
        ],
        &["frobnicate"],
        &["show"],
        &["check", "--lock", "/nonexistent/saga.lock"],
    ] {
        let run = fails(store.path(), args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
    }
    let run = fails(store.path(), &["list", "--status", "sleepy"]);
    assert!(run.stderr.contains("unknown status"), "{}", run.stderr);
}

#[test]
fn a_missing_or_unreadable_store_exits_2() {
    let missing = TempDir::new("missing");
    let run = fails(missing.path(), &["list"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("no saga store"), "{}", run.stderr);
    assert!(!missing.path().exists(), "no store is created");

    // A store whose configuration was damaged.
    let damaged = bank_transfer_store();
    std::fs::write(damaged.path().join("conf"), "segment_size: nonsense\n").unwrap();
    let run = fails(damaged.path(), &["list"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("cannot open the store"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_locked_store_points_at_saga_url_then_the_embedded_command() {
    let store = bank_transfer_store();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let engine = runtime.block_on(async { Engine::open(store.path()).unwrap() });
    let run = fails(store.path(), &["list"]);
    assert_eq!(run.code, 2);
    let (url, embedded) = (
        run.stderr.find("saga --url"),
        run.stderr.find("saga_cli::run"),
    );
    assert!(
        run.stderr.contains("held by a running application")
            && url.is_some()
            && embedded.is_some()
            && url < embedded,
        "{}",
        run.stderr
    );
    runtime.block_on(engine.close());
}

#[test]
fn watch_on_sled_points_at_the_embedded_command() {
    let store = bank_transfer_store();
    let run = fails(store.path(), &["watch"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("saga_cli::run"), "{}", run.stderr);
}
