//! The cancellation sweep: each public async fn of the engine, of instance
//! handles and of `EventSender`, dropped after its k-th poll for every k
//! until it completes on its own. Between polls the engine's tasks run.
//! After each drop: the instance finishes (or is as the caller left it
//! when the call never got its first poll), no step body ran twice for one
//! idempotency key, and each generation took the approval event once.

#[path = "support/helpers.rs"]
mod helpers;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saga_runtime::inspect::{EventKind, ListFilter};
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use saga_runtime::{Error, Instance};

use helpers::{drop_after, until_status, wait_until, within};

/// Beyond this many polls a call that has not completed is a hang.
const MAX_POLLS: usize = 64;

/// Counts step and rollback bodies by idempotency key.
#[derive(Default)]
struct Ledger {
    runs: Mutex<HashMap<String, u32>>,
    /// While set, the refund fails (for `retry_rollback`).
    refund_down: AtomicBool,
}

impl Ledger {
    fn ran(&self, key: &IdempotencyKey) {
        *self
            .runs
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_default() += 1;
    }

    fn runs_of(&self, id: &str) -> Vec<(String, u32)> {
        let prefix = format!("{id}:");
        let mut runs: Vec<_> = self
            .runs
            .lock()
            .unwrap()
            .iter()
            .filter(|(key, _)| key.starts_with(&prefix))
            .map(|(key, n)| (key.clone(), *n))
            .collect();
        runs.sort();
        runs
    }
}

#[step(name = "debit", rollback = refund)]
async fn debit(
    key: IdempotencyKey,
    ledger: Service<Ledger>,
    amount: u64,
) -> Result<u64, StepError> {
    ledger.ran(&key);
    Ok(amount)
}

#[rollback]
async fn refund(ctx: RollbackContext<'_, u64>, ledger: Service<Ledger>) -> Result<(), StepError> {
    if ledger.refund_down.load(Ordering::SeqCst) {
        return Err(StepError::fatal("the bank is down"));
    }
    ledger.ran(ctx.key());
    Ok(())
}

#[step(name = "credit")]
async fn credit(
    key: IdempotencyKey,
    ledger: Service<Ledger>,
    amount: u64,
) -> Result<u64, StepError> {
    ledger.ran(&key);
    Ok(amount)
}

/// Debits, waits for an approval, credits (or, declined, fails and refunds).
#[workflow(name = "transfer")]
async fn transfer(ctx: WorkflowContext, amount: u64) -> Result<u64, WorkflowError> {
    let debited = debit(&ctx, amount).await?;
    let approved: bool = ctx.wait_for_event("approval", "approve", "1 day").await?;
    if !approved {
        return Err(WorkflowError::new("declined"));
    }
    Ok(credit(&ctx, debited).await?)
}

struct World {
    engine: Engine,
    clock: TestClock,
    ledger: Arc<Ledger>,
}

fn world() -> World {
    let clock = TestClock::new();
    let ledger = Arc::new(Ledger::default());
    let engine = Engine::builder()
        .clock(clock.clone())
        .provide_arc(ledger.clone())
        .register(transfer)
        .temporary()
        .unwrap();
    World {
        engine,
        clock,
        ledger,
    }
}

/// Runs the sweep: for k = 0, 1, … makes a fresh instance with `setup`,
/// drops `call`'s future after k polls and hands k (and whether the call
/// completed) to `check`, until the call completes on its own.
async fn sweep<S, SF, C, CF, K, KF, T>(world: &World, name: &str, setup: S, call: C, check: K)
where
    S: Fn(String) -> SF,
    SF: Future<Output = Instance>,
    C: Fn(Instance) -> CF,
    CF: Future<Output = T>,
    K: Fn(Instance, usize, Option<T>) -> KF,
    KF: Future<Output = ()>,
{
    for polls in 0..=MAX_POLLS {
        let id = format!("{name}-{polls}");
        let instance = setup(id.clone()).await;
        let done = drop_after(call(instance.clone()), polls).await;
        let completed = done.is_some();
        check(instance.clone(), polls, done).await;
        check_invariants(world, &instance).await;
        if completed {
            return;
        }
    }
    panic!("{name}: the call did not complete within {MAX_POLLS} polls");
}

/// No step body ran twice for one key; each generation took the approval
/// event once when it got past its wait.
async fn check_invariants(world: &World, instance: &(impl AsRef<Instance> + ?Sized)) {
    let instance: &Instance = instance.as_ref();
    for (key, runs) in world.ledger.runs_of(instance.id()) {
        assert_eq!(runs, 1, "{key} ran {runs} times");
    }
    let history = within("the history", instance.history()).await.unwrap();
    for generation in history.split(|e| matches!(e.kind, EventKind::InstanceRestarted { .. })) {
        let delivered = generation
            .iter()
            .filter(|e| matches!(e.kind, EventKind::EventDelivered { .. }))
            .count();
        assert!(
            delivered <= 1,
            "{}: {delivered} deliveries in a generation",
            instance.id()
        );
    }
}

async fn started(world: &World, id: &str) -> Instance {
    let run = world.engine.start(transfer, id, 5).await.unwrap();
    let instance = run.instance().clone();
    until_status(&instance, Status::Waiting).await;
    instance
}

async fn approve(world: &World, id: &str) {
    world.engine.send_event(id, "approve", &true).await.unwrap();
}

async fn finished(world: &World, id: &str) -> Instance {
    let instance = started(world, id).await;
    approve(world, id).await;
    within("the result", instance.result::<u64>())
        .await
        .unwrap();
    instance
}

async fn completes(instance: &(impl AsRef<Instance> + ?Sized)) {
    let instance: &Instance = instance.as_ref();
    assert_eq!(
        within("the result", instance.result::<u64>())
            .await
            .unwrap(),
        5
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start() {
    let w = &world();
    let engine = &w.engine;
    for polls in 0..=MAX_POLLS {
        let id = format!("start-{polls}");
        let done = drop_after(engine.start(transfer, &id, 5), polls).await;
        if polls == 0 {
            let unknown = engine.instance(&id).await;
            assert!(
                matches!(unknown, Err(Error::UnknownInstance { .. })),
                "{unknown:?}"
            );
        }
        // The caller's retry returns what the dropped call began.
        let run = engine.start(transfer, &id, 5).await.unwrap();
        until_status(run.instance(), Status::Waiting).await;
        approve(w, &id).await;
        completes(run.instance()).await;
        check_invariants(w, run.instance()).await;
        if done.is_some() {
            return;
        }
    }
    panic!("start did not complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_event() {
    let w = &world();
    let setup = |id: String| async move { started(w, &id).await };
    let call = |i: Instance| async move { w.engine.send_event(i.id(), "approve", &true).await };
    let check = |i: Instance, polls: usize, _| async move {
        if polls == 0 {
            assert_eq!(i.status().await.unwrap(), Status::Waiting);
            approve(w, i.id()).await;
        }
        completes(&i).await;
    };
    sweep(w, "send", setup, call, check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_with_an_event_id() {
    let w = &world();
    let setup = |id: String| async move { started(w, &id).await };
    let call = |i: Instance| async move {
        w.engine
            .event(i.id(), "approve")
            .id("evt-1")
            .send(&true)
            .await
    };
    let check = |i: Instance, _, _| async move {
        // The caller cannot know whether it got through: it sends again,
        // with the same event id.
        w.engine
            .event(i.id(), "approve")
            .id("evt-1")
            .send(&true)
            .await
            .unwrap();
        completes(&i).await;
    };
    sweep(w, "send-id", setup, call, check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_with_start() {
    let w = &world();
    let engine = &w.engine;
    for polls in 0..=MAX_POLLS {
        let id = format!("with-start-{polls}");
        let send = || {
            engine
                .event(&id, "approve")
                .id("evt-1")
                .send_with_start(transfer, 5, &true)
        };
        let done = drop_after(send(), polls).await;
        if polls == 0 {
            let unknown = engine.instance(&id).await;
            assert!(
                matches!(unknown, Err(Error::UnknownInstance { .. })),
                "{unknown:?}"
            );
        }
        send().await.unwrap();
        let instance = engine.instance(&id).await.unwrap();
        completes(&instance).await;
        check_invariants(w, &instance).await;
        if done.is_some() {
            return;
        }
    }
    panic!("send_with_start did not complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause() {
    let w = &world();
    let setup = |id: String| async move { started(w, &id).await };
    let call = |i: Instance| async move { i.pause().await };
    let check = |i: Instance, polls: usize, _| async move {
        let status = i.status().await.unwrap();
        if polls == 0 {
            assert_eq!(status, Status::Waiting);
        } else {
            // Paused from the first poll on; the caller resumes it.
            assert_eq!(status, Status::Paused);
            i.resume().await.unwrap();
        }
        approve(w, i.id()).await;
        completes(&i).await;
    };
    sweep(w, "pause", setup, call, check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume() {
    let w = &world();
    let setup = |id: String| async move {
        let i = started(w, &id).await;
        i.pause().await.unwrap();
        i
    };
    let call = |i: Instance| async move { i.resume().await };
    let check = |i: Instance, polls: usize, _| async move {
        if polls == 0 {
            assert_eq!(i.status().await.unwrap(), Status::Paused);
            i.resume().await.unwrap();
        }
        // No second resume: the dropped one's driver runs the instance.
        approve(w, i.id()).await;
        completes(&i).await;
    };
    sweep(w, "resume", setup, call, check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate() {
    let w = &world();
    let setup = |id: String| async move { started(w, &id).await };
    let call = |i: Instance| async move { i.terminate().await };
    let check = |i: Instance, polls: usize, _| async move {
        if polls == 0 {
            assert_eq!(i.status().await.unwrap(), Status::Waiting);
            i.terminate().await.unwrap();
        }
        let ended = within("the end", i.result::<u64>()).await;
        assert!(matches!(ended, Err(Error::Terminated { .. })), "{ended:?}");
        assert!(
            w.ledger
                .runs_of(i.id())
                .iter()
                .all(|(k, _)| !k.contains("rollback"))
        );
    };
    sweep(w, "terminate", setup, call, check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_with_rollback() {
    let w = &world();
    let setup = |id: String| async move { started(w, &id).await };
    let call = |i: Instance| async move { i.terminate_with_rollback().await };
    let check = |i: Instance, polls: usize, _| async move {
        if polls == 0 {
            assert_eq!(i.status().await.unwrap(), Status::Waiting);
            i.terminate_with_rollback().await.unwrap();
        }
        let ended = within("the end", i.result::<u64>()).await;
        assert!(matches!(ended, Err(Error::Terminated { .. })), "{ended:?}");
        let refunded = format!("{}:rollback:debit", i.id());
        assert!(
            w.ledger.runs_of(i.id()).iter().any(|(k, _)| *k == refunded),
            "{:?}",
            w.ledger.runs_of(i.id())
        );
    };
    sweep(w, "terminate-rb", setup, call, check).await;
}

/// A restart's new generation runs on its own: the approval it took is
/// delivered to it again.
async fn restarted(i: &(impl AsRef<Instance> + ?Sized), polls: usize, restart_again: impl Future) {
    let i: &Instance = i.as_ref();
    if polls == 0 {
        assert_eq!(i.status().await.unwrap(), Status::Complete);
        restart_again.await;
    }
    until_status(i, Status::Complete).await;
    completes(i).await;
    let history = i.history().await.unwrap();
    let restarts = history
        .iter()
        .filter(|e| matches!(e.kind, EventKind::InstanceRestarted { .. }))
        .count();
    assert_eq!(restarts, 1, "{}", i.id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart() {
    let w = &world();
    let setup = |id: String| async move { finished(w, &id).await };
    let call = |i: Instance| async move { i.restart().await };
    let check = |i: Instance, polls: usize, _| async move {
        restarted(&i, polls, async { i.restart().await.unwrap() }).await;
        let debit = format!("{}:debit@1", i.id());
        assert!(w.ledger.runs_of(i.id()).iter().any(|(k, _)| *k == debit));
    };
    sweep(w, "restart", setup, call, check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_from() {
    let w = &world();
    let setup = |id: String| async move { finished(w, &id).await };
    let call = |i: Instance| async move { i.restart_from("credit").await };
    let check = |i: Instance, polls: usize, _| async move {
        restarted(&i, polls, async { i.restart_from("credit").await.unwrap() }).await;
        let keys: Vec<String> = w
            .ledger
            .runs_of(i.id())
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert!(keys.contains(&format!("{}:credit@1", i.id())), "{keys:?}");
        assert!(!keys.contains(&format!("{}:debit@1", i.id())), "{keys:?}");
    };
    sweep(w, "restart-from", setup, call, check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_rollback() {
    let w = &world();
    let setup = |id: String| async move {
        let i = started(w, &id).await;
        w.ledger.refund_down.store(true, Ordering::SeqCst);
        w.engine.send_event(&id, "approve", &false).await.unwrap();
        let failed = within("the failure", i.result::<u64>()).await;
        assert!(
            matches!(failed, Err(Error::WorkflowFailed { .. })),
            "{failed:?}"
        );
        w.ledger.refund_down.store(false, Ordering::SeqCst);
        i
    };
    let call = |i: Instance| async move { i.retry_rollback().await };
    let check = |i: Instance, polls: usize, _| async move {
        let refunded = format!("{}:rollback:debit", i.id());
        let refunds = || {
            w.ledger
                .runs_of(i.id())
                .into_iter()
                .filter(|(k, _)| *k == refunded)
                .count()
        };
        if polls == 0 {
            assert_eq!(refunds(), 0);
            i.retry_rollback().await.unwrap();
        }
        eprintln!(
            "DBG polls={polls} refunds={} info={:?}",
            refunds(),
            i.info().await.unwrap()
        );
        wait_until("the refund", || async {
            refunds() > 0 && i.info().await.unwrap().rollback_failure.is_none()
        })
        .await;
    };
    sweep(w, "retry-rb", setup, call, check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_expired() {
    let w = &world();
    let setup = |id: String| async move {
        let i = finished(w, &id).await;
        w.clock
            .advance(saga_runtime::EngineBuilder::DEFAULT_RETENTION + Duration::from_secs(1));
        i
    };
    let call = |_: Instance| async { w.engine.sweep_expired().await };
    let check = |i: Instance, _, _| async move {
        // Either removed or whole (the engine's own sweeper, woken by the
        // clock, may remove it at any moment); sweeping again removes it.
        match within("the result", i.result::<u64>()).await {
            Ok(output) => assert_eq!(output, 5),
            Err(Error::UnknownInstance { .. }) => {}
            Err(other) => panic!("{other:?}"),
        }
        w.engine.sweep_expired().await.unwrap();
        let gone = w.engine.instance(i.id()).await;
        assert!(
            matches!(gone, Err(Error::UnknownInstance { .. })),
            "{gone:?}"
        );
    };
    // A removed instance has no history left to check.
    for polls in 0..=MAX_POLLS {
        let id = format!("sweep-{polls}");
        let instance = setup(id).await;
        let done = drop_after(call(instance.clone()), polls).await;
        let completed = done.is_some();
        check(instance, polls, done).await;
        if completed {
            return;
        }
    }
    panic!("sweep_expired did not complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads() {
    let w = &world();
    let setup = |id: String| async move { started(w, &id).await };
    let call = |i: Instance| async move {
        let (status, info, history) = tokio::join!(i.status(), i.info(), i.history());
        let listed = w.engine.list(&ListFilter::all()).await;
        let handle = w.engine.instance(i.id()).await;
        (
            status.is_ok(),
            info.is_ok(),
            history.is_ok(),
            listed.is_ok(),
            handle.is_ok(),
        )
    };
    let check = |i: Instance, _, done: Option<_>| async move {
        if let Some(answers) = done {
            assert_eq!(answers, (true, true, true, true, true));
        }
        // The reads changed nothing: the instance waits on, and finishes.
        assert_eq!(i.status().await.unwrap(), Status::Waiting);
        approve(w, i.id()).await;
        completes(&i).await;
    };
    sweep(w, "reads", setup, call, check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result() {
    let w = &world();
    // Approved at once: the result comes within a few polls.
    let setup = |id: String| async move {
        let i = started(w, &id).await;
        approve(w, &id).await;
        i
    };
    let call = |i: Instance| async move { i.result::<u64>().await };
    let check = |i: Instance, _, done: Option<Result<u64, Error>>| async move {
        if let Some(answer) = done {
            assert_eq!(answer.unwrap(), 5);
        }
        completes(&i).await;
    };
    sweep(w, "result", setup, call, check).await;
}
