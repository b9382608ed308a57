//! Checking a change before a deploy: `saga export` writes instances'
//! histories as files, and `saga check --replay`, embedded in the
//! application (`saga_cli::run`), replays the in-flight instances (or the
//! exported files, `--from`) against the code the engine registers, with
//! no side effects. The case of the team that inserted a fraud check
//! before the charge: caught by `--replay`, fixed with `ctx.patched`, then
//! deployed, the instance in flight finishes without the new step and a
//! new instance runs it.

#[path = "../../saga-runtime/tests/support/orders.rs"]
mod orders;
mod support;

use std::path::Path;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use orders::{approve, charge_card, fraud_check, inserted, order, patched_insertion, ran, reserve};
use saga_runtime::Engine;
use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use saga_runtime::testing::{History, Replayed, replay};
use support::{TempDir, fails, ok, wait_until, waiting_store};

/// Runs `saga <args..>` on `engine` as an application embeds it: its exit
/// code (0 for success) and what it printed.
async fn embedded(engine: &Engine, args: &[&str]) -> (u8, String) {
    let mut out = Vec::new();
    let code = match saga_cli::run(engine, args, &mut out).await {
        Ok(()) => 0,
        Err(e) => {
            assert!(!e.to_string().contains('\n'), "{e}");
            e.exit_code()
        }
    };
    (code, String::from_utf8(out).unwrap())
}

/// Opens the sled store in `dir` with `builder`, retrying while the
/// process before still holds its lock.
async fn open(dir: &Path, builder: impl Fn() -> saga_runtime::EngineBuilder) -> Engine {
    for _ in 0..100 {
        match builder().open(dir) {
            Err(saga_runtime::Error::StoreLocked { .. }) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other.expect("the store opens"),
        }
    }
    panic!("the store stayed locked");
}

async fn until_status(engine: &Engine, id: &str, status: Status) {
    wait_until(&format!("{id} {status}"), || async {
        engine.instance(id).await.unwrap().status().await.unwrap() == status
    })
    .await;
}

/// Ships `id` and waits for its end.
async fn ship(engine: &Engine, id: &str) {
    engine.send_event(id, "shipped", &1u64).await.unwrap();
    let run = engine.instance(id).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), run.result::<()>())
        .await
        .expect("the order ends")
        .unwrap();
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inserted_step_is_caught_fixed_with_a_patch_and_deployed() {
    let store = TempDir::new("replay-deploy");
    // The release in production leaves order-old waiting to be shipped.
    let engine = open(store.path(), || Engine::builder().register(order)).await;
    engine.start(order, "order-old", ()).await.unwrap();
    until_status(&engine, "order-old", Status::Waiting).await;
    engine.close().await;

    // Its in-flight histories, exported by the saga binary.
    let histories = TempDir::new("replay-histories");
    let dir = histories.path().to_str().unwrap();
    let out = ok(
        store.path(),
        &["export", "--all", "--status", "waiting", dir],
    );
    assert!(out.contains("wrote 1 histories"), "{out}");
    assert_eq!(file_names(histories.path()), ["order-old.json"]);

    // The next release, as first written: --replay names the instance and
    // both steps, and fails.
    let next = Engine::builder().register(inserted).temporary().unwrap();
    let (code, out) = embedded(&next, &["check", "--replay", "--from", dir]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("1 of 1 histories would be blocked"), "{out}");
    assert!(
        out.contains(
            "order-old  order  waiting  history recorded step \"charge-card\", the code now calls step \"fraud-check\""
        ),
        "{out}"
    );
    next.close().await;

    // Fixed with a patch: it passes.
    let fixed = Engine::builder()
        .register(patched_insertion)
        .temporary()
        .unwrap();
    let (code, out) = embedded(&fixed, &["check", "--replay", "--from", dir]).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("ok: all 1 histories replay against the registered code"),
        "{out}"
    );
    fixed.close().await;

    // Deployed: the instance in flight finishes without the new step; a
    // new instance runs it.
    let engine = open(store.path(), || {
        Engine::builder().register(patched_insertion)
    })
    .await;
    let (code, out) = embedded(&engine, &["check", "--replay"]).await;
    assert_eq!(code, 0, "{out}");
    ship(&engine, "order-old").await;
    engine
        .start(patched_insertion, "order-new", ())
        .await
        .unwrap();
    until_status(&engine, "order-new", Status::Waiting).await;
    ship(&engine, "order-new").await;
    assert_eq!(ran("order-old"), ["reserve", "charge-card"]);
    assert_eq!(ran("order-new"), ["reserve", "fraud-check", "charge-card"]);
    engine.close().await;
}

/// Whether `switched` runs the code of the next release.
static NEXT_RELEASE: AtomicBool = AtomicBool::new(false);

/// One registered workflow, two releases: the flag says which runs.
#[workflow(name = "switched")]
async fn switched(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    reserve(&ctx).await?;
    if NEXT_RELEASE.load(Ordering::SeqCst) {
        fraud_check(&ctx).await?;
    }
    charge_card(&ctx).await?;
    let _: u64 = ctx
        .wait_for_event("wait-shipped", "shipped", "30 days")
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_replay_names_what_would_block_and_changes_nothing() {
    let engine = Engine::builder().register(switched).temporary().unwrap();
    engine.start(switched, "switched-1", ()).await.unwrap();
    until_status(&engine, "switched-1", Status::Waiting).await;
    let (code, out) = embedded(&engine, &["check", "--replay"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("ok: all 1 in-flight instances replay"),
        "{out}"
    );

    let instance = engine.instance("switched-1").await.unwrap();
    let before = instance.history().await.unwrap();
    NEXT_RELEASE.store(true, Ordering::SeqCst);
    let (code, out) = embedded(&engine, &["check", "--replay"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("switched-1"), "{out}");
    assert!(
        out.contains(
            "history recorded step \"charge-card\", the code now calls step \"fraud-check\""
        ),
        "{out}"
    );
    let (code, out) = embedded(&engine, &["check", "--replay", "--json"]).await;
    assert_eq!(code, 1, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["schema"], 1);
    assert_eq!(report["replayed"], 1);
    let blocked = &report["blocked"][0];
    assert_eq!(blocked["id"], "switched-1");
    assert_eq!(blocked["status"], "waiting");
    assert_eq!(blocked["recorded"], "step \"charge-card\"");
    assert_eq!(blocked["called"], "step \"fraud-check\"");
    // The lock sees the same names, in no order: it passes, and the replay
    // fails the check beside it, in one document.
    let lock = TempDir::new("replay-lock");
    std::fs::create_dir_all(lock.path()).unwrap();
    let lock_file = lock.path().join("saga.lock");
    std::fs::write(
        &lock_file,
        "workflow switched\nstep * reserve 0 reserve\nstep * fraud-check 0 fraud_check\n\
         step * charge-card 0 charge_card\nevent switched wait-shipped\n",
    )
    .unwrap();
    let lock_file = lock_file.to_str().unwrap();
    let (code, out) = embedded(&engine, &["check", "--lock", lock_file]).await;
    assert_eq!(code, 0, "{out}");
    let (code, out) = embedded(
        &engine,
        &["check", "--lock", lock_file, "--replay", "--json"],
    )
    .await;
    assert_eq!(code, 1, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["stale"], serde_json::json!([]));
    assert_eq!(report["blocked"][0]["id"], "switched-1");
    NEXT_RELEASE.store(false, Ordering::SeqCst);

    // Nothing of the instance changed, and nothing ran again.
    assert_eq!(instance.history().await.unwrap(), before);
    assert_eq!(instance.status().await.unwrap(), Status::Waiting);
    ship(&engine, "switched-1").await;
    assert_eq!(ran("switched-1"), ["reserve", "charge-card"]);
    drop(instance);
    engine.close().await;
}

#[test]
fn export_prints_a_history_that_replays() {
    let store = waiting_store();
    let out = ok(store.path(), &["export", "order-7"]);
    let history = History::from_json(&out).unwrap();
    assert_eq!(
        (history.instance(), history.workflow(), history.status()),
        ("order-7", "fulfil", "waiting")
    );
    let file: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(file["format"], 1);
    let texts: Vec<&str> = file["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(texts.first(), Some(&"InstanceCreated"), "{out}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let replayed = runtime.block_on(replay(support::fulfil(), &history));
    assert_eq!(replayed.unwrap(), Replayed::ReachedEnd);
    // The binary registers no workflow: it has no code to replay with.
    let run = fails(store.path(), &["check", "--replay"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("inside the application"),
        "{}",
        run.stderr
    );
    let run = fails(store.path(), &["export", "order-99"]);
    assert_eq!(run.code, 1);
    assert_eq!(fails(store.path(), &["check"]).code, 2);
    assert_eq!(
        fails(store.path(), &["export", "--status", "waiting", "order-7"]).code,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histories_that_could_not_be_replayed_are_named_without_an_ok() {
    let dir = TempDir::new("unreadable-histories");
    std::fs::create_dir_all(dir.path()).unwrap();
    std::fs::write(dir.path().join("order-9.json"), "{\"format\": 1, \"hist").unwrap();
    let engine = Engine::builder().register(order).temporary().unwrap();
    let from = dir.path().to_str().unwrap();
    let (code, out) = embedded(&engine, &["check", "--replay", "--from", from]).await;
    assert_eq!(code, 1, "{out}");
    assert!(!out.contains("ok:"), "{out}");
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.contains("1 of 1 histories could not be replayed"),
        "{out}"
    );
    assert!(
        out.contains("not replayed:") && out.contains("order-9.json"),
        "{out}"
    );
    engine.close().await;
}

/// Attempts of `post`: the first fails, and the second waits an hour.
static POSTED: AtomicU32 = AtomicU32::new(0);

#[step(name = "post", retries = 3, delay = "1 hour", backoff = "constant")]
async fn post(key: IdempotencyKey) -> Result<(), StepError> {
    orders::note(&key);
    match POSTED.fetch_add(1, Ordering::SeqCst) {
        0 => Err(StepError::retryable("the ledger is down")),
        _ => Ok(()),
    }
}

#[workflow(name = "ledger")]
async fn ledger(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    Ok(post(&ctx).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_all_writes_one_file_per_instance_in_the_status() {
    let clock = TestClock::new();
    let engine = Engine::builder()
        .clock(clock.clone())
        .register(order)
        .register(ledger)
        .temporary()
        .unwrap();
    engine.start(order, "order-waiting", ()).await.unwrap();
    engine.start(order, "order-done", ()).await.unwrap();
    engine.start(ledger, "ledger-running", ()).await.unwrap();
    until_status(&engine, "order-waiting", Status::Waiting).await;
    until_status(&engine, "order-done", Status::Waiting).await;
    ship(&engine, "order-done").await;
    let ledger_run = engine.instance("ledger-running").await.unwrap();
    wait_until("the ledger's retry", || async {
        ledger_run
            .history()
            .await
            .unwrap()
            .iter()
            .any(|e| matches!(e.kind, EventKind::StepRetrying { .. }))
    })
    .await;
    assert_eq!(ledger_run.status().await.unwrap(), Status::Running);

    let running = TempDir::new("export-running");
    let dir = running.path().to_str().unwrap();
    let (code, out) = embedded(&engine, &["export", "--all", "--status", "running", dir]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("wrote 1 histories"), "{out}");
    assert_eq!(file_names(running.path()), ["ledger-running.json"]);

    let every = TempDir::new("export-every");
    let dir = every.path().to_str().unwrap();
    let (code, out) = embedded(&engine, &["export", "--all", dir]).await;
    assert_eq!(code, 0, "{out}");
    let names = file_names(every.path());
    assert_eq!(
        names,
        [
            "ledger-running.json",
            "order-done.json",
            "order-waiting.json"
        ]
    );
    for name in names {
        let text = std::fs::read_to_string(every.path().join(&name)).unwrap();
        let history = History::from_json(&text).unwrap();
        assert_eq!(format!("{}.json", history.instance()), name);
    }
    // The in-flight ones replay against the registered code, from the
    // files too.
    let (code, out) = embedded(&engine, &["check", "--replay", "--from", dir]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("all 3 histories replay"), "{out}");
    drop(ledger_run);
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_shows_a_rejected_event() {
    let engine = Engine::builder().register(approve).temporary().unwrap();
    engine.start(approve, "approve-1", ()).await.unwrap();
    until_status(&engine, "approve-1", Status::Waiting).await;
    let bad = serde_json::json!({"approved": "yes"});
    engine
        .send_event("approve-1", "decision", &bad)
        .await
        .unwrap();
    let instance = engine.instance("approve-1").await.unwrap();
    wait_until("the rejection", || async {
        instance
            .history()
            .await
            .unwrap()
            .iter()
            .any(|e| matches!(e.kind, EventKind::EventRejected { .. }))
    })
    .await;
    let (code, out) = embedded(&engine, &["export", "approve-1"]).await;
    assert_eq!(code, 0, "{out}");
    let file: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rejection = file["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "EventRejected")
        .unwrap_or_else(|| panic!("no rejection in {out}"));
    let text = rejection["text"].as_str().unwrap();
    assert!(
        text.contains("wait \"wait-decision\" rejected event \"decision\", which does not decode"),
        "{text}"
    );
    drop(instance);
    engine.close().await;
}

#[path = "../../saga-runtime/tests/support/postgres.rs"]
mod postgres;

/// On PostgreSQL the check replays the live store while the old release's
/// workers run: a reader (`connect_read_only`) with the new release's
/// workflows registered drives nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_reader_checks_the_live_store_beside_its_workers() {
    let url = postgres::database_url();
    let schema = postgres::fresh_schema("replaycheck").await;
    let worker = Engine::builder()
        .postgres_schema(&schema)
        .register(order)
        .connect(&url)
        .await
        .unwrap_or_else(|e| postgres::missing(e));
    worker.start(order, "order-pg", ()).await.unwrap();
    until_status(&worker, "order-pg", Status::Waiting).await;
    let before = worker
        .instance("order-pg")
        .await
        .unwrap()
        .history()
        .await
        .unwrap();

    let next = Engine::builder()
        .postgres_schema(&schema)
        .register(inserted)
        .connect_read_only(&url)
        .await
        .unwrap();
    let (code, out) = embedded(&next, &["check", "--replay"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "order-pg  order  waiting  history recorded step \"charge-card\", the code now calls step \"fraud-check\""
        ),
        "{out}"
    );
    next.close().await;
    let fixed = Engine::builder()
        .postgres_schema(&schema)
        .register(patched_insertion)
        .connect_read_only(&url)
        .await
        .unwrap();
    let (code, out) = embedded(&fixed, &["check", "--replay"]).await;
    assert_eq!(code, 0, "{out}");
    fixed.close().await;

    // The worker's instance is as it was, and goes on under the old code.
    let instance = worker.instance("order-pg").await.unwrap();
    assert_eq!(instance.history().await.unwrap(), before);
    ship(&worker, "order-pg").await;
    assert_eq!(ran("order-pg"), ["reserve", "charge-card"]);
    drop(instance);
    worker.close().await;
    postgres::drop_schema(&schema).await;
}
