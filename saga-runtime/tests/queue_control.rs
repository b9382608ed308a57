//! Every control call against every place an instance can be in its
//! queue: waiting for its first slot, holding one, asleep after giving
//! it back, waiting for one again after its sleep, paused while it
//! waits, and a child of a queued parent. Whatever the call, it answers
//! (done or a typed refusal), the instance then ends or stays where the
//! call put it, never stuck, its compensations run exactly for the
//! charges it made, and the queue never runs more than its concurrency.
//!
//! The workflow charges a card (compensated by a refund), sleeps an hour,
//! then charges a fee, as users write it with `#[workflow]` and
//! `#[step]`. The [`Till`] the engine provides counts who is at it at
//! once, and holds every call until the test lets it through.

#[path = "support/helpers.rs"]
mod helpers;

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use saga_runtime::prelude::*;
use saga_runtime::queue::Queue;
use saga_runtime::testing::TestClock;
use saga_runtime::{Engine, EngineBuilder, Error};
use tokio::sync::Semaphore;

use helpers::{fresh, until_status, wait_until, within};

/// The card terminal: who is at it now, the most at once, and the keys
/// of the charges and refunds it saw.
struct Till {
    gate: Semaphore,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    at_till: usize,
    most: usize,
    charged: Vec<String>,
    refunded: Vec<String>,
}

impl Till {
    fn new() -> Till {
        Till {
            gate: Semaphore::new(0),
            seen: Mutex::default(),
        }
    }

    async fn call(&self, charge: Option<&str>) -> Result<(), StepError> {
        {
            let mut seen = self.seen.lock().unwrap();
            seen.at_till += 1;
            seen.most = seen.most.max(seen.at_till);
            if let Some(key) = charge {
                seen.charged.push(key.to_owned());
            }
        }
        // Left however the call ends: let through, or stopped by a
        // control call while it waits.
        let _leave = Leave(self);
        let permit = self.gate.acquire().await.map_err(StepError::fatal)?;
        permit.forget();
        Ok(())
    }

    fn at_till(&self) -> usize {
        self.seen.lock().unwrap().at_till
    }

    fn charged(&self) -> Vec<String> {
        self.seen.lock().unwrap().charged.clone()
    }

    fn refunded(&self) -> Vec<String> {
        self.seen.lock().unwrap().refunded.clone()
    }

    fn most(&self) -> usize {
        self.seen.lock().unwrap().most
    }

    fn open(&self) {
        self.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    }
}

struct Leave<'a>(&'a Till);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.seen.lock().unwrap().at_till -= 1;
    }
}

#[step(name = "charge", rollback = refund)]
async fn charge(key: IdempotencyKey, till: Service<Till>, who: String) -> Result<(), StepError> {
    let _ = who;
    till.call(Some(key.as_str())).await
}

#[rollback]
async fn refund(ctx: RollbackContext<'_, ()>, till: Service<Till>) -> Result<(), StepError> {
    till.seen
        .lock()
        .unwrap()
        .refunded
        .push(ctx.key().to_string());
    Ok(())
}

#[step(name = "fee", read_only)]
async fn fee(till: Service<Till>) -> Result<(), StepError> {
    till.call(None).await
}

#[workflow(name = "order")]
async fn order(ctx: WorkflowContext, who: String) -> Result<(), WorkflowError> {
    charge(&ctx, who).await?;
    ctx.sleep("nap", Duration::from_secs(3600)).await?;
    fee(&ctx).await?;
    Ok(())
}

/// An order made as a child: the parent holds the queue's slot, its
/// child runs outside the queue.
#[workflow(name = "basket")]
async fn basket(ctx: WorkflowContext, who: String) -> Result<(), WorkflowError> {
    ctx.child("order", order, who).await?;
    Ok(())
}

fn engine_with(till: &std::sync::Arc<Till>, clock: &TestClock) -> EngineBuilder {
    Engine::builder()
        .clock(clock.clone())
        .provide_arc(till.clone())
        .queue(Queue::new("till").concurrency(1).release_while_waiting())
        .register(order)
        .register(basket)
}

/// Where the instance under test is when the call comes.
#[derive(Clone, Copy, Debug)]
enum Place {
    /// Behind another order, never having held a slot.
    Queued,
    /// At the till with the queue's one slot.
    HoldingASlot,
    /// Asleep after its charge, its slot given back.
    Released,
    /// Awake after its sleep, waiting for a slot again behind another.
    Requeued,
    /// Waiting for its first slot, and paused.
    PausedInQueue,
    /// The child of a queued parent, at the till.
    Child,
}

/// The control calls, each as a user makes it.
#[derive(Clone, Copy, Debug)]
enum Call {
    Pause,
    Resume,
    Terminate,
    TerminateWithRollback,
    Restart,
    RetryRollback,
    SendEvent,
}

const PLACES: [Place; 6] = [
    Place::Queued,
    Place::HoldingASlot,
    Place::Released,
    Place::Requeued,
    Place::PausedInQueue,
    Place::Child,
];

const CALLS: [Call; 7] = [
    Call::Pause,
    Call::Resume,
    Call::Terminate,
    Call::TerminateWithRollback,
    Call::Restart,
    Call::RetryRollback,
    Call::SendEvent,
];

/// Starts what `place` needs; the id of the instance under test.
async fn bring_to(place: Place, engine: &Engine, till: &Till, clock: &TestClock) -> String {
    let start = |id: &'static str| async move {
        engine
            .start_on("till", order, id, id.to_owned())
            .await
            .unwrap();
    };
    match place {
        Place::Queued | Place::PausedInQueue => {
            start("first").await;
            wait_until("the first at the till", || async { till.at_till() == 1 }).await;
            start("target").await;
            let target = engine.instance("target").await.unwrap();
            until_status(&target, Status::Queued).await;
            if let Place::PausedInQueue = place {
                target.pause().await.unwrap();
                until_status(&target, Status::Paused).await;
            }
        }
        Place::HoldingASlot => {
            start("target").await;
            wait_until("the target at the till", || async { till.at_till() == 1 }).await;
        }
        Place::Released | Place::Requeued => {
            start("target").await;
            till.gate.add_permits(1);
            released(engine, "target").await;
            if let Place::Requeued = place {
                start("first").await;
                wait_until("the first at the till", || async { till.at_till() == 1 }).await;
                clock.advance(Duration::from_secs(7200));
                let target = engine.instance("target").await.unwrap();
                until_status(&target, Status::Queued).await;
            }
        }
        Place::Child => {
            engine
                .start_on("till", basket, "parent", "parent".to_owned())
                .await
                .unwrap();
            wait_until("the child at the till", || async { till.at_till() == 1 }).await;
            return "parent.order".to_owned();
        }
    }
    "target".to_owned()
}

/// Waits until `id` sleeps with its slot given back.
async fn released(engine: &Engine, id: &str) {
    let instance = engine.instance(id).await.unwrap();
    wait_until("the slot given back", || async {
        instance.history().await.unwrap().iter().any(|e| {
            matches!(
                e.kind,
                saga_runtime::inspect::EventKind::SlotReleased { .. }
            )
        })
    })
    .await;
}

/// Makes `call` on `id`: whether it was taken (a refusal must be the
/// typed one, and only where the call does not apply).
async fn make(call: Call, engine: &Engine, id: &str) -> bool {
    let instance = engine.instance(id).await.unwrap();
    let answer = match call {
        Call::Pause => within("pause", instance.pause()).await,
        Call::Resume => within("resume", instance.resume()).await,
        Call::Terminate => within("terminate", instance.terminate()).await,
        Call::TerminateWithRollback => {
            within("terminate", instance.terminate_with_rollback()).await
        }
        Call::Restart => within("restart", instance.restart()).await,
        Call::RetryRollback => within("retry", instance.retry_rollback()).await,
        Call::SendEvent => within("send", engine.send_event(id, "nudge", &1))
            .await
            .map(drop),
    };
    match answer {
        Ok(()) => true,
        Err(Error::InvalidState { .. }) => false,
        Err(e) => panic!("{call:?} on {id}: an unexpected error: {e}"),
    }
}

/// Awaits `end` while the clock moves on an hour at a time, so every
/// sleep ends, whenever it began.
async fn over_time<T>(what: &str, clock: &TestClock, end: impl Future<Output = T>) -> T {
    let mut end = std::pin::pin!(end);
    within(&format!("{what}: the end"), async {
        loop {
            if let Ok(out) = tokio::time::timeout(Duration::from_millis(5), end.as_mut()).await {
                return out;
            }
            clock.advance(Duration::from_secs(3600));
        }
    })
    .await
}

/// The keys of the charges `id` made (every generation).
fn charges_of(till: &Till, id: &str) -> Vec<String> {
    let prefix = format!("{id}:");
    till.charged()
        .into_iter()
        .filter(|k| k.starts_with(&prefix))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_control_call_in_every_queue_place_ends_or_stays_as_asked() {
    for place in PLACES {
        for call in CALLS {
            one_call(place, call).await;
        }
    }
}

async fn one_call(place: Place, call: Call) {
    let what = format!("{call:?} when {place:?}");
    let clock = TestClock::new();
    let till = std::sync::Arc::new(Till::new());
    let engine = fresh(engine_with(&till, &clock)).await;
    let id = bring_to(place, &engine, &till, &clock).await;
    eprintln!("{what}");
    let taken = make(call, &engine, &id).await;
    let applies = !matches!(call, Call::RetryRollback);
    assert_eq!(taken, applies, "{what}: taken {taken}");

    // Everything else may go on now: the till lets every call through,
    // and every sleep is over.
    let instance = engine.instance(&id).await.unwrap();
    if let Call::Pause = call {
        until_status(&instance, Status::Paused).await;
    }
    // Paused (by the call, or before it), it stays so until resumed.
    if instance.status().await.unwrap() == Status::Paused {
        within("resume", instance.resume()).await.unwrap();
    }
    till.open();
    let ended = over_time(&what, &clock, instance.result::<()>()).await;
    let status = instance.status().await.unwrap();
    match call {
        Call::Terminate | Call::TerminateWithRollback => {
            assert!(
                matches!(ended, Err(Error::Terminated { .. })),
                "{what}: {ended:?}"
            );
            assert_eq!(status, Status::Terminated, "{what}");
        }
        _ => {
            ended.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(status, Status::Complete, "{what}");
        }
    }
    // Exactly the charges it made are refunded, and only when asked.
    let charged = charges_of(&till, &id);
    let refunded: Vec<String> = till
        .refunded()
        .into_iter()
        .filter(|k| k.starts_with(&format!("{id}:")))
        .collect();
    match call {
        Call::TerminateWithRollback => {
            let mut expected: Vec<String> = charged
                .iter()
                .map(|k| k.replacen(':', ":rollback:", 1))
                .collect();
            expected.sort();
            let mut refunded = refunded.clone();
            refunded.sort();
            assert_eq!(refunded, expected, "{what}: refunds for {charged:?}");
        }
        _ => assert!(refunded.is_empty(), "{what}: refunded {refunded:?}"),
    }
    // The others end too (how is theirs), and the queue never ran more
    // than one at once.
    for other in ["first", "parent"] {
        if other != id
            && let Ok(other) = engine.instance(other).await
        {
            let _ = over_time(&what, &clock, other.result::<()>()).await;
        }
    }
    assert_eq!(till.most(), 1, "{what}: more than one at the till");
    engine.close().await;
}
