//! The PostgreSQL store as users meet it: workflows written with the
//! macros run and roll back on it; workers drive the instances they start
//! and reach each other's; a closed or dead worker's instances are claimed
//! by another; a worker whose lease ran out writes nothing; lost
//! connections are reconnected without ending an instance; an unreachable
//! database is a typed error.
#![cfg(feature = "postgres")]

#[path = "support/child.rs"]
mod child;
#[path = "support/helpers.rs"]
mod helpers;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use saga_runtime::Error;
use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::queue::Queue;

use helpers::{postgres, within};

/// How often each step body ran, per process.
#[derive(Default)]
struct Calls {
    reserve: AtomicU32,
    charge: AtomicU32,
    release: AtomicU32,
}

#[step(name = "reserve", rollback = release)]
async fn reserve(
    key: IdempotencyKey,
    calls: Service<Calls>,
    item: String,
) -> Result<String, StepError> {
    calls.reserve.fetch_add(1, Ordering::SeqCst);
    Ok(format!("hold-{item}-{}", key.as_str()))
}

#[rollback]
async fn release(
    ctx: RollbackContext<'_, String>,
    calls: Service<Calls>,
    _item: String,
) -> Result<(), StepError> {
    assert!(!ctx.key().as_str().is_empty());
    calls.release.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[step(name = "charge")]
async fn charge(
    key: IdempotencyKey,
    calls: Service<Calls>,
    item: String,
) -> Result<u64, StepError> {
    calls.charge.fetch_add(1, Ordering::SeqCst);
    if item == "declined" {
        return Err(StepError::fatal(format!(
            "card declined ({})",
            key.as_str()
        )));
    }
    Ok(item.len() as u64)
}

/// Reserves, waits for a go-ahead, then charges.
#[workflow(name = "order")]
async fn order(ctx: WorkflowContext, item: String) -> Result<u64, WorkflowError> {
    reserve(&ctx, item.clone()).await?;
    let go: bool = ctx.wait_for_event("wait-go", "go", "1 day").await?;
    if !go {
        return Err(WorkflowError::new("not approved"));
    }
    Ok(charge(&ctx, item).await?)
}

/// The events of `subscription`, per instance, until `n` instances
/// completed.
async fn events_until_completed(
    subscription: &mut saga_runtime::inspect::Subscription,
    n: usize,
) -> BTreeMap<String, Vec<saga_runtime::inspect::Event>> {
    let mut seen: BTreeMap<String, Vec<saga_runtime::inspect::Event>> = BTreeMap::new();
    let completed = |seen: &BTreeMap<String, Vec<saga_runtime::inspect::Event>>| {
        let done = |events: &&Vec<saga_runtime::inspect::Event>| {
            events
                .iter()
                .any(|e| e.kind == EventKind::InstanceCompleted)
        };
        seen.values().filter(done).count()
    };
    while completed(&seen) < n {
        let event = subscription.recv().await.unwrap();
        seen.entry(event.instance.clone()).or_default().push(event);
    }
    seen
}

/// Asserts that a subscriber was told each instance's history, once and in
/// order.
async fn told_as_stored(
    engine: &Engine,
    seen: &BTreeMap<String, Vec<saga_runtime::inspect::Event>>,
) {
    for (id, events) in seen {
        let history = engine.instance(id).await.unwrap().history().await.unwrap();
        let told: Vec<_> = events.iter().map(|e| (e.seq, e.kind.clone())).collect();
        let stored: Vec<_> = history.iter().map(|e| (e.seq, e.kind.clone())).collect();
        assert_eq!(told, stored, "{id}");
    }
}

async fn worker(schema: &str, calls: &Arc<Calls>) -> Engine {
    Engine::builder()
        .postgres_schema(schema)
        .lease_time(Duration::from_millis(500))
        .provide_arc(calls.clone())
        .register(order)
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflows_run_and_roll_back_on_postgres() {
    let schema = postgres::fresh_schema("runs").await;
    let calls = Arc::new(Calls::default());
    let engine = worker(&schema, &calls).await;

    let ok = engine
        .start(order, "order-ok", "book".to_owned())
        .await
        .unwrap();
    engine.send_event("order-ok", "go", &true).await.unwrap();
    assert_eq!(within("the result", ok.result()).await.unwrap(), 4);
    assert_eq!(ok.status().await.unwrap(), Status::Complete);

    let bad = engine
        .start(order, "order-bad", "declined".to_owned())
        .await
        .unwrap();
    engine.send_event("order-bad", "go", &true).await.unwrap();
    let err = within("the failure", bad.result()).await.unwrap_err();
    assert!(matches!(err, Error::WorkflowFailed { .. }), "{err}");
    assert_eq!(calls.release.load(Ordering::SeqCst), 1);
    let kinds = helpers::kinds(&bad).await;
    assert!(
        kinds.iter().any(
            |k| matches!(k, EventKind::RollbackStepCompleted { step, .. } if step == "reserve")
        ),
        "{kinds:?}"
    );

    let listed = engine.list(&ListFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 2);
    // Filtered in the database, by the index's columns.
    let ids = |listed: Vec<saga_runtime::inspect::InstanceInfo>| -> Vec<String> {
        listed.into_iter().map(|i| i.id).collect()
    };
    let complete = ListFilter::all().status(Status::Complete);
    assert_eq!(ids(engine.list(&complete).await.unwrap()), ["order-ok"]);
    let errored = ListFilter::all().status(Status::Errored).workflow("order");
    assert_eq!(ids(engine.list(&errored).await.unwrap()), ["order-bad"]);
    let other = ListFilter::all().workflow("another");
    assert!(engine.list(&other).await.unwrap().is_empty());
    engine.close().await;

    // A new worker reads what the first stored, and runs nothing again.
    let again = worker(&schema, &calls).await;
    let ok = again.instance("order-ok").await.unwrap();
    assert_eq!(ok.status().await.unwrap(), Status::Complete);
    assert_eq!(calls.reserve.load(Ordering::SeqCst), 2);
    assert_eq!(calls.charge.load(Ordering::SeqCst), 2);
    again.close().await;
    postgres::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_drive_their_own_instances_and_reach_each_others() {
    let schema = postgres::fresh_schema("spread").await;
    let (calls_a, calls_b) = (Arc::new(Calls::default()), Arc::new(Calls::default()));
    let a = worker(&schema, &calls_a).await;
    // Both are workers at once: neither waits for the other.
    let b = within("a second worker", worker(&schema, &calls_b)).await;
    // A subscriber in a third engine sees both workers' events.
    let reader = Engine::builder()
        .postgres_schema(&schema)
        .connect_read_only(&postgres::database_url())
        .await
        .unwrap();
    let mut events = reader.subscribe();
    let on_a = a.start(order, "on-a", "pen".to_owned()).await.unwrap();
    let on_b = b.start(order, "on-b", "ink".to_owned()).await.unwrap();
    helpers::until_status(&on_a, Status::Waiting).await;
    helpers::until_status(&on_b, Status::Waiting).await;
    // Each worker ran the first step of the instance it started.
    assert_eq!(calls_a.reserve.load(Ordering::SeqCst), 1);
    assert_eq!(calls_b.reserve.load(Ordering::SeqCst), 1);

    // Calls on the other's instance are posted to it; results, status and
    // lists read from either.
    // Answered by the owner: stored and delivered there.
    let sent = b.event("on-a", "go").send(&true).await.unwrap();
    assert_eq!(sent, saga_runtime::Sent::Delivered);
    let from_b = b.instance("on-a").await.unwrap();
    assert_eq!(
        within("the result", from_b.result::<u64>()).await.unwrap(),
        3
    );
    assert_eq!(calls_a.charge.load(Ordering::SeqCst), 1, "on-a ran on a");
    assert_eq!(calls_b.charge.load(Ordering::SeqCst), 0);

    a.instance("on-b").await.unwrap().pause().await.unwrap();
    helpers::until_status(&on_b, Status::Paused).await;
    // Starting an instance another worker drives returns it.
    let again = a.start(order, "on-b", "ink".to_owned()).await.unwrap();
    assert_eq!(again.status().await.unwrap(), Status::Paused);
    a.instance("on-b").await.unwrap().resume().await.unwrap();
    helpers::until_status(&on_b, Status::Waiting).await;
    // An event with start, to an instance the other drives: posted.
    let (_, sent) = a
        .event("on-b", "go")
        .send_with_start(order, "ink".to_owned(), &true)
        .await
        .unwrap();
    assert_eq!(sent, saga_runtime::Sent::Delivered);
    assert_eq!(within("the result", again.result()).await.unwrap(), 3);
    assert_eq!(calls_b.charge.load(Ordering::SeqCst), 1, "on-b ran on b");
    assert_eq!(calls_a.reserve.load(Ordering::SeqCst), 1);
    assert_eq!(a.list(&ListFilter::default()).await.unwrap().len(), 2);

    // Every event of both, once, in order, as their histories say.
    let seen = within("the events", events_until_completed(&mut events, 2)).await;
    told_as_stored(&a, &seen).await;
    reader.close().await;
    a.close().await;
    b.close().await;
    postgres::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_and_ends_are_told_at_once() {
    let schema = postgres::fresh_schema("notify").await;
    let calls = Arc::new(Calls::default());
    // Nobody polls within the test's patience: only notifications move.
    let hour = Duration::from_secs(3600);
    let engine = Engine::builder()
        .postgres_schema(&schema)
        .poll_interval(hour)
        .provide_arc(calls.clone())
        .register(order)
        .connect(&postgres::database_url())
        .await
        .unwrap();
    let reader = Engine::builder()
        .postgres_schema(&schema)
        .poll_interval(hour)
        .connect_read_only(&postgres::database_url())
        .await
        .unwrap();
    let run = engine.start(order, "told", "pen".to_owned()).await.unwrap();
    helpers::until_status(&run, Status::Waiting).await;
    // The worker is told of the post, and the reader of the end.
    reader.send_event("told", "go", &true).await.unwrap();
    let remote = reader.instance("told").await.unwrap();
    assert_eq!(
        within("the result", remote.result::<u64>()).await.unwrap(),
        3
    );
    reader.close().await;
    engine.close().await;
    postgres::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_workers_instances_are_claimed_by_another() {
    let schema = postgres::fresh_schema("claim").await;
    let calls = Arc::new(Calls::default());
    let first = worker(&schema, &calls).await;
    for i in 0..3 {
        let run = first
            .start(order, &format!("waits-{i}"), "pen".to_owned())
            .await
            .unwrap();
        helpers::until_status(&run, Status::Waiting).await;
    }
    let second = worker(&schema, &calls).await;
    // Posted while the first still drives them, acted on by whoever owns
    // each when it is taken: the first, or the second once it claimed it.
    second.send_event("waits-0", "go", &true).await.unwrap();
    first.close().await;
    for i in 1..3 {
        second
            .send_event(&format!("waits-{i}"), "go", &true)
            .await
            .unwrap();
    }
    for i in 0..3 {
        let run = second.instance(&format!("waits-{i}")).await.unwrap();
        assert_eq!(within("the result", run.result::<u64>()).await.unwrap(), 3);
    }
    assert_eq!(
        calls.reserve.load(Ordering::SeqCst),
        3,
        "a reserve step ran again"
    );
    assert_eq!(calls.charge.load(Ordering::SeqCst), 3);
    second.close().await;
    postgres::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_indexed_before_owners_existed_is_claimed() {
    let schema = postgres::fresh_schema("upgrade").await;
    let calls = Arc::new(Calls::default());
    let old = worker(&schema, &calls).await;
    let run = old.start(order, "old", "cup".to_owned()).await.unwrap();
    helpers::until_status(&run, Status::Waiting).await;
    old.close().await;
    // As schema version 2 left its rows: no owner, workflow or status.
    let admin = postgres::admin().await;
    admin
        .batch_execute(&format!(
            "UPDATE {schema}.instances SET owner = NULL, workflow = NULL, status = NULL"
        ))
        .await
        .unwrap();
    let new = worker(&schema, &calls).await;
    let waiting = ListFilter::all().status(Status::Waiting).workflow("order");
    assert_eq!(new.list(&waiting).await.unwrap().len(), 1);
    new.send_event("old", "go", &true).await.unwrap();
    let run = new.instance("old").await.unwrap();
    assert_eq!(within("the result", run.result::<u64>()).await.unwrap(), 3);
    assert_eq!(calls.reserve.load(Ordering::SeqCst), 1, "reserve ran again");
    let row = admin
        .query_one(
            &format!("SELECT workflow, status FROM {schema}.instances WHERE id = 'old'"),
            &[],
        )
        .await
        .unwrap();
    let (workflow, status): (String, String) = (row.get(0), row.get(1));
    assert_eq!((workflow.as_str(), status.as_str()), ("order", "complete"));
    new.close().await;
    postgres::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_lease_ran_out_writes_nothing() {
    let schema = postgres::fresh_schema("fenced").await;
    let calls = Arc::new(Calls::default());
    let stalled = worker(&schema, &calls).await;
    let run = stalled
        .start(order, "contested", "cup".to_owned())
        .await
        .unwrap();
    helpers::until_status(&run, Status::Waiting).await;

    // As if the worker had stopped renewing (SIGSTOP, a long pause): its
    // lease ran out, and another worker claims its instance.
    let admin = postgres::admin().await;
    // Read before the other worker exists: it may claim at once.
    let owner = format!("SELECT owner FROM {schema}.instances WHERE id = 'contested'");
    let stalled_name: String = admin.query_one(&owner, &[]).await.unwrap().get(0);
    admin
        .batch_execute(&format!(
            "UPDATE {schema}.workers SET expires_at = now() - interval '1 second'"
        ))
        .await
        .unwrap();
    let current = worker(&schema, &calls).await;
    within("the claim", async {
        loop {
            let now: String = admin.query_one(&owner, &[]).await.unwrap().get(0);
            if now != stalled_name {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // The stalled worker's next write is refused, and stores nothing (the
    // order then fails on the current worker's "no"); it never gets its
    // lease back.
    let err = stalled
        .send_event("contested", "go", &true)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err}");
    let current_run = current.instance("contested").await.unwrap();
    let history = current_run.history().await.unwrap();
    assert!(
        !history
            .iter()
            .any(|e| matches!(e.kind, EventKind::EventReceived { .. })),
        "a fenced worker stored its event: {history:?}"
    );

    current.send_event("contested", "go", &false).await.unwrap();
    let err = within("the result", current_run.result::<u64>())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WorkflowFailed { .. }), "{err}");
    assert_eq!(calls.charge.load(Ordering::SeqCst), 0);
    assert_eq!(calls.release.load(Ordering::SeqCst), 1, "compensated once");
    stalled.close().await;
    current.close().await;
    postgres::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_connections_are_reconnected_without_ending_an_instance() {
    let schema = postgres::fresh_schema("blink").await;
    let calls = Arc::new(Calls::default());
    let engine = worker(&schema, &calls).await;
    let admin = postgres::admin().await;
    let kill = format!(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE application_name = 'saga:{schema}'"
    );
    // A subscriber that looks all along, through the lost connections.
    let mut events = engine.subscribe();
    let watcher = tokio::spawn(async move { events_until_completed(&mut events, 5).await });
    for i in 0..5 {
        let id = format!("blink-{i}");
        let run = engine.start(order, &id, "mug".to_owned()).await.unwrap();
        let run = engine.instance(run.id()).await.unwrap();
        let killed: i64 = admin.query_one(&kill, &[]).await.unwrap().get(0);
        assert!(killed >= 1, "no connection of the engine to kill");
        engine.send_event(&id, "go", &true).await.unwrap();
        admin.query_one(&kill, &[]).await.unwrap();
        assert_eq!(
            within("the result", run.result::<u64>()).await.unwrap(),
            3,
            "{id}"
        );
        assert_eq!(run.status().await.unwrap(), Status::Complete);
    }
    assert_eq!(calls.reserve.load(Ordering::SeqCst), 5);
    assert_eq!(calls.charge.load(Ordering::SeqCst), 5);
    // It lost and repeated nothing.
    let seen = within("the events", watcher).await.unwrap();
    assert_eq!(seen.len(), 5);
    told_as_stored(&engine, &seen).await;
    engine.close().await;
    postgres::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_posts_events_and_control_calls_that_the_worker_acts_on() {
    let schema = postgres::fresh_schema("inbox").await;
    let calls = Arc::new(Calls::default());
    let engine = worker(&schema, &calls).await;
    // With the workflow's service: a reader that registers a workflow
    // still drives none of its instances.
    let reader = Engine::builder()
        .postgres_schema(&schema)
        .provide_arc(calls.clone())
        .register(order)
        .connect_read_only(&postgres::database_url())
        .await
        .unwrap();
    assert!(reader.reads_only() && !engine.reads_only());

    // An event, posted twice under one id: stored and delivered once.
    let run = engine
        .start(order, "posted-1", "kite".to_owned())
        .await
        .unwrap();
    helpers::until_status(&run, Status::Waiting).await;
    for expected in [saga_runtime::Sent::Delivered, saga_runtime::Sent::Duplicate] {
        let sent = reader
            .event("posted-1", "go")
            .id("webhook-7")
            .send(&true)
            .await;
        assert_eq!(sent.unwrap(), expected);
    }
    // The same id with another payload: the owner's refusal, typed.
    let conflict = reader
        .event("posted-1", "go")
        .id("webhook-7")
        .send(&false)
        .await
        .unwrap_err();
    assert!(
        matches!(conflict, Error::EventIdConflict { .. }),
        "{conflict}"
    );
    assert_eq!(within("the result", run.result()).await.unwrap(), 4);
    assert_eq!(calls.charge.load(Ordering::SeqCst), 1);

    // Control calls: pause, resume, then terminate with rollback.
    let run = engine
        .start(order, "posted-2", "vase".to_owned())
        .await
        .unwrap();
    helpers::until_status(&run, Status::Waiting).await;
    // Each returns once the owner did it, as its docs say.
    let remote = reader.instance("posted-2").await.unwrap();
    remote.pause().await.unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Paused);
    remote.resume().await.unwrap();
    // Back in its wait.
    helpers::until_status(&run, Status::Waiting).await;
    remote.terminate_with_rollback().await.unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Terminated);
    assert_eq!(calls.release.load(Ordering::SeqCst), 1, "compensated once");
    // Refused by the owner: the same typed error as from the owner itself,
    // and the instance stays as it was.
    for _ in 0..3 {
        let err = remote.terminate().await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidState {
                    status: Status::Terminated,
                    ..
                }
            ),
            "{err}"
        );
    }
    let done = reader.instance("posted-1").await.unwrap();
    let err = done.terminate().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidState {
                status: Status::Complete,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(done.status().await.unwrap(), Status::Complete);

    // What a reader cannot do at all is refused at once.
    let err = reader
        .start(order, "posted-3", "cup".to_owned())
        .await
        .map(drop)
        .unwrap_err();
    assert!(matches!(err, Error::ReadOnly { .. }), "{err}");
    let err = reader.send_event("nobody", "go", &true).await.unwrap_err();
    assert!(matches!(err, Error::UnknownInstance { .. }), "{err}");

    reader.close().await;
    engine.close().await;
    postgres::drop_schema(&schema).await;
}

#[tokio::test]
async fn an_unreachable_database_is_a_typed_error() {
    let err = Engine::builder()
        .store_timeout(Duration::from_secs(2))
        .connect("postgres://nobody@127.0.0.1:1/none")
        .await
        .map(drop)
        .unwrap_err();
    assert!(matches!(err, Error::DatabaseUnreachable { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("127.0.0.1:1"), "{message}");

    let err = Engine::builder()
        .postgres_schema("Not-A-Schema")
        .connect(&postgres::database_url())
        .await
        .map(drop)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

/// The child of the take-over test: a worker that starts an instance, says
/// so, and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_worker_that_gets_killed() {
    let Some(dir) = child::child_dir() else {
        return;
    };
    let schema = dir.file_name().unwrap().to_str().unwrap().to_owned();
    let calls = Arc::new(Calls::default());
    let engine = worker(&schema, &calls).await;
    let run = engine
        .start(order, "orphan", "lamp".to_owned())
        .await
        .unwrap();
    // The reserve step is durable once the instance waits for its event.
    helpers::until_status(&run, Status::Waiting).await;
    child::report("started");
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_instances_resume_once_its_lease_expires() {
    if child::child_dir().is_some() {
        return;
    }
    let schema = postgres::fresh_schema("dead").await;
    let mut dead = child::spawn(
        "child_worker_that_gets_killed",
        &std::env::temp_dir().join(&schema),
    );
    dead.wait_for("started");
    dead.kill();

    // It did not leave: its lease (500 ms) must run out before the
    // instance is claimed.
    let calls = Arc::new(Calls::default());
    let engine = within("the take-over", worker(&schema, &calls)).await;
    engine.send_event("orphan", "go", &true).await.unwrap();
    let run = engine.instance("orphan").await.unwrap();
    assert_eq!(within("the result", run.result::<u64>()).await.unwrap(), 4);
    assert_eq!(
        calls.reserve.load(Ordering::SeqCst),
        0,
        "the dead worker's step ran again"
    );
    engine.close().await;
    postgres::drop_schema(&schema).await;
}

/// The names in the schema's `workers` table.
async fn worker_rows(schema: &str) -> Vec<String> {
    let rows = postgres::admin()
        .await
        .query(
            &format!("SELECT name FROM {schema}.workers ORDER BY name"),
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|row| row.get(0)).collect()
}

/// The rows of dead workers go once they own nothing that must run: a
/// live worker's housekeeping removes them. One whose instance still waits
/// for a driver keeps its row until another worker claimed the instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rows_of_dead_workers_go_once_they_own_nothing() {
    let schema = postgres::fresh_schema("sweep").await;
    let calls = Arc::new(Calls::default());
    let idle = worker(&schema, &calls).await;
    let busy = worker(&schema, &calls).await;
    let run = busy.start(order, "held", "pen".to_owned()).await.unwrap();
    helpers::until_status(&run, Status::Waiting).await;
    let both = worker_rows(&schema).await;
    assert_eq!(both.len(), 2, "{both:?}");
    let owner: String = postgres::admin()
        .await
        .query_one(
            &format!("SELECT owner FROM {schema}.instances WHERE id = 'held'"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    idle.close().await;
    busy.close().await;

    // A live worker that runs no workflow, so it claims nothing: it
    // removes the idle worker's row, and in the same sweep keeps the row
    // of the worker whose instance still waits for a driver.
    let sweeper = Engine::builder()
        .postgres_schema(&schema)
        .lease_time(Duration::from_millis(500))
        .connect(&postgres::database_url())
        .await
        .unwrap();
    helpers::wait_until("the idle worker's row to go", || async {
        !worker_rows(&schema)
            .await
            .iter()
            .any(|name| both.contains(name) && *name != owner)
    })
    .await;
    assert!(worker_rows(&schema).await.contains(&owner));

    // Once another worker claimed its instance, it owns nothing.
    let claimer = worker(&schema, &calls).await;
    claimer.send_event("held", "go", &true).await.unwrap();
    let run = claimer.instance("held").await.unwrap();
    assert_eq!(within("the result", run.result::<u64>()).await.unwrap(), 3);
    helpers::wait_until("the dead owner's row to go", || async {
        !worker_rows(&schema).await.contains(&owner)
    })
    .await;
    assert_eq!(worker_rows(&schema).await.len(), 2, "the two live workers");
    claimer.close().await;
    sweeper.close().await;
    postgres::drop_schema(&schema).await;
}

/// A database that holds the engine up (a lock, a slow query, a failover)
/// holds up only the engine's calls, never the application: on a runtime
/// of one worker thread, with instances running and calls into the engine
/// waiting on locked tables, the application's own timer fires on time.
#[test]
fn a_locked_database_never_blocks_the_applications_runtime() {
    let control = tokio::runtime::Runtime::new().unwrap();
    let app = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let schema = control.block_on(postgres::fresh_schema("blocking"));
    let calls = Arc::new(Calls::default());
    let engine = app.block_on(worker(&schema, &calls));
    // Eight instances waiting, so the engine has instances of its own.
    let runs: Vec<_> = app.block_on(async {
        let mut runs = Vec::new();
        for i in 0..8 {
            let id = format!("blocked-{i}");
            let run = engine.start(order, &id, format!("item-{i}")).await.unwrap();
            runs.push(run);
        }
        for run in &runs {
            helpers::until_status(run, Status::Waiting).await;
        }
        runs
    });

    // Another connection locks the tables until the test says so.
    let (unlock, unlocked) = tokio::sync::oneshot::channel::<()>();
    let (locked, is_locked) = std::sync::mpsc::channel();
    let locker = control.spawn({
        let schema = schema.clone();
        async move {
            let client = postgres::admin().await;
            client
                .batch_execute(&format!(
                    "BEGIN; LOCK TABLE {schema}.journal, {schema}.instances, {schema}.inbox \
                     IN ACCESS EXCLUSIVE MODE"
                ))
                .await
                .unwrap();
            locked.send(()).unwrap();
            let _ = unlocked.await;
            client.batch_execute("COMMIT").await.unwrap();
        }
    });
    is_locked.recv_timeout(Duration::from_secs(30)).unwrap();

    // Calls into the engine that need the tables: they wait.
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut waiting = Vec::new();
    for i in 0..8 {
        let (engine, answered) = (engine.clone(), answered.clone());
        let id = format!("blocked-{i}");
        waiting.push(app.spawn(async move {
            engine.send_event(&id, "go", &true).await.unwrap();
            engine.list(&ListFilter::all()).await.unwrap();
            engine
                .start(order, &format!("late-{i}"), "late".to_owned())
                .await
                .unwrap();
            answered.fetch_add(1, Ordering::SeqCst);
        }));
    }
    // The application's own work: a 100 ms timer, on the one worker
    // thread those calls run on.
    let (fired, has_fired) = std::sync::mpsc::channel();
    app.spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        fired.send(()).unwrap();
    });
    // Blocked, the worker thread would run the timer only once a store
    // call gave up (its timeout, 30 s and more).
    has_fired
        .recv_timeout(Duration::from_secs(20))
        .expect("the application's timer did not fire while the database was locked");
    assert_eq!(
        answered.load(Ordering::SeqCst),
        0,
        "the calls into the engine did not wait for the locked tables"
    );

    // Unlocked, every call answers and every instance completes.
    unlock.send(()).unwrap();
    control.block_on(locker).unwrap();
    app.block_on(async {
        for call in waiting {
            within("a call made while the tables were locked", call)
                .await
                .unwrap();
        }
        for run in &runs {
            assert_eq!(within("a result", run.result()).await.unwrap(), 6);
        }
        engine.close().await;
    });
    control.block_on(postgres::drop_schema(&schema));
}

/// A database that holds the engine's writes up for longer than the lease
/// (a table lock of a migration, a long `VACUUM FULL`) costs the worker
/// nothing: its lease is kept meanwhile, so once the tables are free its
/// writes go in and its instances complete, where a lapsed lease would
/// have fenced it for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_held_up_past_the_lease_keep_the_lease() {
    const LEASE: Duration = Duration::from_millis(300);
    let schema = postgres::fresh_schema("heldup").await;
    let calls = Arc::new(Calls::default());
    let engine = Engine::builder()
        .postgres_schema(&schema)
        .lease_time(LEASE)
        .provide_arc(calls.clone())
        .register(order)
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e));
    let mut runs = Vec::new();
    for i in 0..4 {
        let run = engine
            .start(order, &format!("held-up-{i}"), format!("item-{i}"))
            .await
            .unwrap();
        runs.push(run);
    }
    for run in &runs {
        helpers::until_status(run, Status::Waiting).await;
    }

    let locker = postgres::admin().await;
    locker
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE {schema}.journal, {schema}.instances, {schema}.inbox \
             IN ACCESS EXCLUSIVE MODE"
        ))
        .await
        .unwrap();
    // Events for every instance: their writes wait on the locked tables,
    // and the worker's own work with them.
    let sends: Vec<_> = (0..4)
        .map(|i| {
            let engine = engine.clone();
            tokio::spawn(async move {
                engine
                    .send_event(&format!("held-up-{i}"), "go", &true)
                    .await
            })
        })
        .collect();
    // Three leases, on the database's clock, while the writes wait.
    let admin = postgres::admin().await;
    let locked_at: std::time::SystemTime =
        admin.query_one("SELECT now()", &[]).await.unwrap().get(0);
    helpers::wait_until("three leases to pass", || async {
        let now: std::time::SystemTime = admin.query_one("SELECT now()", &[]).await.unwrap().get(0);
        now.duration_since(locked_at).unwrap_or_default() > 3 * LEASE
    })
    .await;
    let alive: bool = admin
        .query_one(
            &format!("SELECT bool_and(expires_at > now()) FROM {schema}.workers"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        alive,
        "the worker's lease ran out while its writes waited on locked tables"
    );
    locker.batch_execute("COMMIT").await.unwrap();

    for send in sends {
        within("an event sent while the tables were locked", send)
            .await
            .unwrap()
            .unwrap();
    }
    for run in &runs {
        assert_eq!(within("a result", run.result()).await.unwrap(), 6);
    }
    // And the worker writes on.
    let late = engine
        .start(order, "after-the-lock", "pen".to_owned())
        .await
        .unwrap();
    helpers::until_status(&late, Status::Waiting).await;
    engine.close().await;
    postgres::drop_schema(&schema).await;
}

/// A call posted to an instance whose worker is gone is not a success:
/// past the store timeout it is `NotAnswered`, saying no worker's lease is
/// live; the post is kept, and the worker that claims the instance acts on
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_nobody_answers_says_so_and_is_acted_on_by_the_next_worker() {
    let schema = postgres::fresh_schema("unanswered").await;
    let calls = Arc::new(Calls::default());
    let first = worker(&schema, &calls).await;
    let run = first
        .start(order, "orphan-1", "lamp".to_owned())
        .await
        .unwrap();
    helpers::until_status(&run, Status::Waiting).await;
    // Its worker leaves; none other runs yet.
    first.close().await;

    let reader = Engine::builder()
        .postgres_schema(&schema)
        .store_timeout(Duration::from_millis(500))
        .connect_read_only(&postgres::database_url())
        .await
        .unwrap();
    let instance = reader.instance("orphan-1").await.unwrap();
    let err = instance.pause().await.unwrap_err();
    assert!(
        matches!(&err, Error::NotAnswered { id, owner_live: false } if id == "orphan-1"),
        "{err}"
    );
    assert!(err.to_string().contains("claims the instance"), "{err}");
    assert_eq!(instance.status().await.unwrap(), Status::Waiting);

    // A worker comes: it claims the instance, and acts on the post.
    let second = worker(&schema, &calls).await;
    within("the kept post acted on", async {
        while instance.status().await.unwrap() != Status::Paused {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    reader.close().await;
    second.close().await;
    postgres::drop_schema(&schema).await;
}

/// A child that waits for a go-ahead.
#[workflow(name = "voyage-leg")]
async fn voyage_leg(ctx: WorkflowContext, miles: u64) -> Result<u64, WorkflowError> {
    let _: bool = ctx.wait_for_event("wait-go", "go", "1 day").await?;
    Ok(miles)
}

/// A parent of one `voyage-leg`.
#[workflow(name = "voyage")]
async fn voyage(ctx: WorkflowContext, miles: u64) -> Result<u64, WorkflowError> {
    let leg = ctx.child("leg", voyage_leg, miles).await?;
    Ok(leg + 1)
}

async fn voyage_worker(schema: &str, parents_too: bool) -> Engine {
    let mut builder = Engine::builder()
        .postgres_schema(schema)
        .lease_time(Duration::from_millis(500))
        .register(voyage_leg);
    if parents_too {
        builder = builder.register(voyage);
    }
    builder
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e))
}

/// A child driven by one worker and its parent by another: the child's
/// end reaches the parent through the store (a post to the parent's
/// worker), which wakes it from hibernation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_on_another_worker_tells_its_parent_through_the_store() {
    let schema = postgres::fresh_schema("kin").await;
    let first = voyage_worker(&schema, true).await;
    let run = first.start(voyage, "v-1", 41).await.unwrap();
    helpers::wait_until("the child waiting", || async {
        match first.instance("v-1.leg").await {
            Ok(child) => child.status().await.unwrap() == Status::Waiting,
            Err(_) => false,
        }
    })
    .await;
    // The first worker goes; a worker that runs only legs claims the child.
    let legs = voyage_worker(&schema, false).await;
    first.close().await;
    let child = legs.instance("v-1.leg").await.unwrap();
    helpers::wait_until("the child claimed", || async {
        child.info().await.unwrap().owner.is_some()
    })
    .await;
    let child_owner = child.info().await.unwrap().owner.unwrap().worker;
    // Then a worker that runs parents too claims the parent (the child's
    // worker is alive, so the child stays where it is).
    let parents = voyage_worker(&schema, true).await;
    let parent = parents.instance(run.id()).await.unwrap();
    helpers::wait_until("the parent claimed", || async {
        parent.info().await.unwrap().owner.is_some()
    })
    .await;
    let parent_owner = parent.info().await.unwrap().owner.unwrap().worker;
    assert_ne!(child_owner, parent_owner);
    parents.send_event("v-1.leg", "go", &true).await.unwrap();
    assert_eq!(
        within("the parent", parent.result::<u64>()).await.unwrap(),
        42
    );
    assert_eq!(
        child.info().await.unwrap().status,
        Status::Complete,
        "the child ended where it ran"
    );
    legs.close().await;
    parents.close().await;
    postgres::drop_schema(&schema).await;
}

/// The bank behind a queue, shared by every worker of a test: how many
/// calls run at once, the most so far, and a gate each call waits at.
struct Bank {
    gate: tokio::sync::Semaphore,
    running: AtomicU32,
    most: AtomicU32,
}

/// The worker a call ran on, and how many ran there.
struct Here {
    ran: AtomicU32,
}

#[step(name = "call-bank", read_only)]
async fn call_bank(bank: Service<Bank>, here: Service<Here>) -> Result<(), StepError> {
    let now = bank.running.fetch_add(1, Ordering::SeqCst) + 1;
    bank.most.fetch_max(now, Ordering::SeqCst);
    here.ran.fetch_add(1, Ordering::SeqCst);
    let permit = bank.gate.acquire().await.map_err(StepError::fatal)?;
    permit.forget();
    bank.running.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[workflow(name = "queued-transfer")]
async fn queued_transfer(ctx: WorkflowContext, _n: u32) -> Result<(), WorkflowError> {
    call_bank(&ctx).await?;
    Ok(())
}

async fn queue_worker(schema: &str, bank: &Arc<Bank>, here: &Arc<Here>, queue: Queue) -> Engine {
    Engine::builder()
        .postgres_schema(schema)
        .lease_time(Duration::from_millis(500))
        .poll_interval(Duration::from_millis(20))
        .provide_arc(bank.clone())
        .provide_arc(here.clone())
        .queue(queue)
        .register(queued_transfer)
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e))
}

fn bank() -> Arc<Bank> {
    Arc::new(Bank {
        gate: tokio::sync::Semaphore::new(0),
        running: AtomicU32::new(0),
        most: AtomicU32::new(0),
    })
}

fn here() -> Arc<Here> {
    Arc::new(Here {
        ran: AtomicU32::new(0),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_takes_what_another_worker_queued() {
    let schema = postgres::fresh_schema("qspread").await;
    let bank = bank();
    let (here_a, here_b) = (here(), here());
    let queue = || Queue::new("bank-api").per_worker(1);
    let a = queue_worker(&schema, &bank, &here_a, queue()).await;
    let b = queue_worker(&schema, &bank, &here_b, queue()).await;
    // Every start is on a; a has room for one, so b takes the next.
    let mut runs = Vec::new();
    for n in 0..3 {
        let id = format!("t-{n}");
        runs.push(
            a.start_on("bank-api", queued_transfer, &id, n)
                .await
                .unwrap(),
        );
    }
    helpers::wait_until("one call on each worker", || async {
        here_a.ran.load(Ordering::SeqCst) == 1 && here_b.ran.load(Ordering::SeqCst) == 1
    })
    .await;
    // The third waits for a slot on either.
    let third = a.instance("t-2").await.unwrap();
    let info = third.info().await.unwrap();
    assert_eq!(info.status, Status::Queued);
    assert_eq!(info.queue.as_deref(), Some("bank-api"));
    assert_eq!(info.owner, None, "a waiting instance is no worker's yet");
    bank.gate.add_permits(3);
    for run in &runs {
        within("the transfer's end", run.result()).await.unwrap();
    }
    assert_eq!(
        here_a.ran.load(Ordering::SeqCst) + here_b.ran.load(Ordering::SeqCst),
        3
    );
    assert!(bank.most.load(Ordering::SeqCst) <= 2);
    a.close().await;
    b.close().await;
    postgres::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_sharing_a_queue_never_run_more_than_its_concurrency() {
    let schema = postgres::fresh_schema("qlimit").await;
    let bank = bank();
    let (here_a, here_b) = (here(), here());
    let queue = || Queue::new("bank-api").concurrency(3);
    let a = queue_worker(&schema, &bank, &here_a, queue()).await;
    let b = queue_worker(&schema, &bank, &here_b, queue()).await;
    let mut runs = Vec::new();
    for n in 0..16 {
        let on = if n % 2 == 0 { &a } else { &b };
        let id = format!("t-{n}");
        runs.push(
            on.start_on("bank-api", queued_transfer, &id, n)
                .await
                .unwrap(),
        );
    }
    helpers::wait_until("three calls at the bank", || async {
        bank.running.load(Ordering::SeqCst) == 3
    })
    .await;
    helpers::quiet(&a).await;
    helpers::quiet(&b).await;
    assert_eq!(bank.running.load(Ordering::SeqCst), 3);
    let queued = ListFilter::all().queue("bank-api").status(Status::Queued);
    assert_eq!(a.list(&queued).await.unwrap().len(), 13);
    // One at a time through the gate: each end frees a slot on either.
    for _ in 0..16 {
        bank.gate.add_permits(1);
    }
    for run in &runs {
        within("the transfer's end", run.result()).await.unwrap();
    }
    assert_eq!(
        bank.most.load(Ordering::SeqCst),
        3,
        "more than 3 ran at once"
    );
    assert_eq!(
        here_a.ran.load(Ordering::SeqCst) + here_b.ran.load(Ordering::SeqCst),
        16
    );
    a.close().await;
    b.close().await;
    postgres::drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_instance_sent_an_event_goes_back_to_its_queue() {
    let schema = postgres::fresh_schema("qpost").await;
    let bank = bank();
    let (here_a, here_b) = (here(), here());
    let queue = || Queue::new("bank-api").concurrency(1);
    let a = queue_worker(&schema, &bank, &here_a, queue()).await;
    let b = queue_worker(&schema, &bank, &here_b, queue()).await;
    let first = a
        .start_on("bank-api", queued_transfer, "t-0", 0)
        .await
        .unwrap();
    helpers::wait_until("the slot held", || async {
        bank.running.load(Ordering::SeqCst) == 1
    })
    .await;
    let second = a
        .start_on("bank-api", queued_transfer, "t-1", 1)
        .await
        .unwrap();
    // Posted to no worker: one claims it to store the event, then lets go.
    let sent = b.event("t-1", "note").send(&7).await.unwrap();
    assert_ne!(sent, saga_runtime::Sent::Duplicate);
    helpers::wait_until("the queued instance back in its queue", || async {
        let info = second.info().await.unwrap();
        info.status == Status::Queued && info.owner.is_none()
    })
    .await;
    bank.gate.add_permits(2);
    within("the first's end", first.result()).await.unwrap();
    within("the second's end", second.result()).await.unwrap();
    assert_eq!(bank.most.load(Ordering::SeqCst), 1);
    a.close().await;
    b.close().await;
    postgres::drop_schema(&schema).await;
}
