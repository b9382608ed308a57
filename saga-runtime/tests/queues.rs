//! Queues, rule by rule: an instance started on a queue waits `Queued`
//! until it takes a slot, and holds it until it ends; the queue's
//! concurrency and per-key limits are never exceeded; higher priorities
//! go first, first come first served within one, and keys take turns;
//! a rate limit starts no more than its rate in any window of the
//! engine's clock, a reopen included; the queue survives a reopen in
//! order; bad declarations and starts are refused before anything is
//! stored.
//!
//! The workflow is a bank transfer, written with `#[workflow]` and
//! `#[step]` as users write them. Its one step notes in the test's
//! [`Bank`] (a service the engine provides) that it runs, then waits for
//! the test to let it through: the test reads how many ran at once, and
//! in which order they began.

#[path = "support/helpers.rs"]
mod helpers;

use std::collections::HashMap;
use std::future::IntoFuture;
use std::sync::Mutex;
use std::time::Duration;

use saga_runtime::prelude::*;
use saga_runtime::queue::Queue;
use saga_runtime::testing::TestClock;
use saga_runtime::{Engine, EngineBuilder, Error};
use tokio::sync::Semaphore;

use helpers::{Reopenable, fresh, wait_until, within};

/// What the bank saw: who runs now, the most at once (in all and per
/// key), and the order calls began in. Calls wait for a permit of `gate`.
struct Bank {
    gate: Semaphore,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    running: usize,
    most: usize,
    by_key: HashMap<String, (usize, usize)>,
    began: Vec<String>,
}

impl Bank {
    fn new() -> Bank {
        Bank {
            gate: Semaphore::new(0),
            seen: Mutex::new(Seen::default()),
        }
    }

    fn enter(&self, t: &Transfer) {
        let mut seen = self.seen.lock().unwrap();
        seen.running += 1;
        seen.most = seen.most.max(seen.running);
        let key = seen.by_key.entry(t.key.clone()).or_default();
        key.0 += 1;
        key.1 = key.1.max(key.0);
        seen.began.push(t.name.clone());
    }

    fn leave(&self, t: &Transfer) {
        let mut seen = self.seen.lock().unwrap();
        seen.running -= 1;
        if let Some(key) = seen.by_key.get_mut(&t.key) {
            key.0 -= 1;
        }
    }

    fn running(&self) -> usize {
        self.seen.lock().unwrap().running
    }

    fn most(&self) -> usize {
        self.seen.lock().unwrap().most
    }

    fn most_per_key(&self) -> usize {
        let seen = self.seen.lock().unwrap();
        seen.by_key
            .values()
            .map(|(_, most)| *most)
            .max()
            .unwrap_or(0)
    }

    fn began(&self) -> Vec<String> {
        self.seen.lock().unwrap().began.clone()
    }

    /// Lets every call through, now and later.
    fn open_gate(&self) {
        self.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Transfer {
    name: String,
    key: String,
}

fn transfer_of(name: &str, key: &str) -> Transfer {
    Transfer {
        name: name.into(),
        key: key.into(),
    }
}

#[step(name = "call-bank", read_only)]
async fn call_bank(bank: Service<Bank>, t: Transfer) -> Result<(), StepError> {
    call_bank_body(&bank, &t).await
}

/// After the bank call: a boundary where a paused transfer parks.
#[step(name = "confirm", read_only)]
async fn confirm() -> Result<(), StepError> {
    Ok(())
}

#[workflow(name = "transfer")]
async fn transfer(ctx: WorkflowContext, t: Transfer) -> Result<(), WorkflowError> {
    call_bank(&ctx, t).await?;
    confirm(&ctx).await?;
    Ok(())
}

/// A batch of one transfer, made as a child workflow.
#[workflow(name = "batch")]
async fn batch(ctx: WorkflowContext, t: Transfer) -> Result<(), WorkflowError> {
    ctx.child("one", transfer, t).await?;
    Ok(())
}

fn with_queue(bank: std::sync::Arc<Bank>, queue: Queue) -> EngineBuilder {
    Engine::builder()
        .provide_arc(bank)
        .queue(queue)
        .register(transfer)
        .register(batch)
}

async fn queued_on(engine: &Engine, queue: &str) -> usize {
    let filter = ListFilter::all().queue(queue).status(Status::Queued);
    engine.list(&filter).await.unwrap().len()
}

/// Starts `n` transfers on the queue `bank-api`, `{prefix}-0` to
/// `{prefix}-{n-1}`, all under key `any`; their ids.
async fn start_transfers(engine: &Engine, prefix: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for n in 0..n {
        let id = format!("{prefix}-{n}");
        let t = transfer_of(&id, "any");
        engine.start_on("bank-api", transfer, &id, t).await.unwrap();
        ids.push(id);
    }
    ids
}

async fn all_complete(engine: &Engine, ids: &[String]) {
    for id in ids {
        let run = engine.instance(id).await.unwrap();
        within("the transfer's end", run.result::<()>())
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_are_told_when_an_instance_leaves_its_queue() {
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(with_queue(
        bank.clone(),
        Queue::new("bank-api").concurrency(1),
    ))
    .await;
    let mut events = engine.subscribe();
    start_transfers(&engine, "s", 2).await;
    wait_until("one at the bank", || async { bank.running() == 1 }).await;
    let mut left = Vec::new();
    while left.is_empty() {
        let event = within("a dequeue", events.recv()).await.unwrap();
        if let saga_runtime::inspect::EventKind::Dequeued { queue } = &event.kind {
            assert_eq!(queue, "bank-api");
            left.push(event.instance.clone());
        }
    }
    assert_eq!(left, ["s-0"]);
    bank.open_gate();
    while left.len() < 2 {
        let event = within("the second dequeue", events.recv()).await.unwrap();
        if matches!(
            event.kind,
            saga_runtime::inspect::EventKind::Dequeued { .. }
        ) {
            left.push(event.instance.clone());
        }
    }
    assert_eq!(left, ["s-0", "s-1"]);
    let history = engine
        .instance("s-1")
        .await
        .unwrap()
        .history()
        .await
        .unwrap();
    assert!(
        history
            .iter()
            .any(|e| e.to_string().contains("took a slot of queue \"bank-api\"")),
        "{history:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_never_runs_more_than_its_concurrency() {
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(with_queue(
        bank.clone(),
        Queue::new("bank-api").concurrency(3),
    ))
    .await;
    let ids = start_transfers(&engine, "t", 10).await;
    wait_until("three transfers at the bank", || async {
        bank.running() == 3
    })
    .await;
    // The others wait, seen as queued on the queue.
    wait_until("seven queued", || async {
        queued_on(&engine, "bank-api").await == 7
    })
    .await;
    helpers::quiet(&engine).await;
    assert_eq!(bank.running(), 3);
    let info = engine.instance("t-9").await.unwrap().info().await.unwrap();
    assert_eq!(info.queue.as_deref(), Some("bank-api"));
    // One at a time through the gate: each end lets the next in.
    for _ in 0..10 {
        bank.gate.add_permits(1);
    }
    all_complete(&engine, &ids).await;
    assert_eq!(bank.most(), 3, "the queue ran more than its concurrency");
    assert_eq!(bank.began().len(), 10);
    assert_eq!(queued_on(&engine, "bank-api").await, 0);
}

/// The count of `status` in `counts`.
fn in_status(counts: &saga_runtime::inspect::InstanceCounts, status: Status) -> u64 {
    counts
        .statuses
        .iter()
        .find(|(s, _)| *s == status)
        .map_or(0, |(_, n)| *n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_counts_give_each_status_and_each_queues_depth() {
    let bank = std::sync::Arc::new(Bank::new());
    let queue = Queue::new("bank-api").concurrency(2);
    let engine = fresh(with_queue(bank.clone(), queue).queue(Queue::new("idle"))).await;
    let ids = start_transfers(&engine, "c", 5).await;
    wait_until("two at the bank, three queued", || async {
        bank.running() == 2 && queued_on(&engine, "bank-api").await == 3
    })
    .await;
    let counts = engine.instance_counts().await.unwrap();
    assert_eq!(in_status(&counts, Status::Queued), 3);
    assert_eq!(in_status(&counts, Status::Running), 2);
    assert_eq!(
        in_status(&counts, Status::Complete),
        0,
        "a status with none is listed, as 0"
    );
    assert_eq!(counts.statuses.len(), Status::ALL.len());
    assert_eq!(depth_of(&counts, "bank-api"), (3, 2));
    let oldest = |counts: &saga_runtime::inspect::InstanceCounts| {
        counts
            .queues
            .iter()
            .find(|d| d.queue == "bank-api")
            .unwrap()
            .oldest_waiting
    };
    assert!(
        oldest(&counts).is_some(),
        "three wait: the oldest one's creation"
    );
    assert_eq!(
        depth_of(&counts, "idle"),
        (0, 0),
        "a declared queue with none waiting is listed"
    );
    assert_eq!(counts.unreadable, 0);

    bank.open_gate();
    all_complete(&engine, &ids).await;
    let counts = engine.instance_counts().await.unwrap();
    assert_eq!(in_status(&counts, Status::Complete), 5);
    assert_eq!(in_status(&counts, Status::Queued), 0);
    assert_eq!(depth_of(&counts, "bank-api"), (0, 0));
    assert_eq!(oldest(&counts), None);
}

fn depth_of(counts: &saga_runtime::inspect::InstanceCounts, name: &str) -> (u64, u64) {
    let d = counts.queues.iter().find(|d| d.queue == name).unwrap();
    (d.waiting, d.started)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_holds_at_most_its_per_key_slots() {
    let bank = std::sync::Arc::new(Bank::new());
    let queue = Queue::new("bank-api").concurrency(10).per_key(1);
    let engine = fresh(with_queue(bank.clone(), queue)).await;
    let mut ids = Vec::new();
    for key in ["alice", "bob", "carol"] {
        for n in 0..3 {
            let id = format!("{key}-{n}");
            let t = transfer_of(&id, key);
            engine
                .start_on("bank-api", transfer, &id, t)
                .key(key)
                .await
                .unwrap();
            ids.push(id);
        }
    }
    wait_until("one transfer per customer", || async {
        bank.running() == 3
    })
    .await;
    helpers::quiet(&engine).await;
    assert_eq!(bank.running(), 3);
    bank.open_gate();
    all_complete(&engine, &ids).await;
    assert_eq!(bank.most_per_key(), 1, "a key ran more than its limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_takes_no_more_than_its_capacity() {
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(with_queue(
        bank.clone(),
        Queue::new("bank-api").per_worker(2),
    ))
    .await;
    let ids = start_transfers(&engine, "t", 5).await;
    wait_until("two transfers at the bank", || async {
        bank.running() == 2
    })
    .await;
    helpers::quiet(&engine).await;
    assert_eq!(bank.running(), 2);
    bank.open_gate();
    all_complete(&engine, &ids).await;
    assert_eq!(bank.most(), 2);
}

/// Starts `hold` on a queue of concurrency 1 and waits until it holds the
/// slot, so what is started next waits, and is taken in the queue's order.
async fn hold_the_slot(engine: &Engine, bank: &Bank) {
    let t = transfer_of("hold", "h");
    engine
        .start_on("bank-api", transfer, "hold", t)
        .key("h")
        .await
        .unwrap();
    wait_until("the slot held", || async { bank.running() == 1 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_priorities_go_first_then_first_come_first_served() {
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(with_queue(
        bank.clone(),
        Queue::new("bank-api").concurrency(1),
    ))
    .await;
    hold_the_slot(&engine, &bank).await;
    let mut ids = vec!["hold".to_owned()];
    for (name, priority) in [
        ("low-1", 0),
        ("high-1", 5),
        ("low-2", 0),
        ("high-2", 5),
        ("mid", 1),
    ] {
        let t = transfer_of(name, name);
        engine
            .start_on("bank-api", transfer, name, t)
            .priority(priority)
            .await
            .unwrap();
        ids.push(name.to_owned());
    }
    wait_until("five queued", || async {
        queued_on(&engine, "bank-api").await == 5
    })
    .await;
    bank.open_gate();
    all_complete(&engine, &ids).await;
    assert_eq!(
        bank.began(),
        ["hold", "high-1", "high-2", "mid", "low-1", "low-2"]
    );
    assert_eq!(bank.most(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_take_turns_so_a_busy_key_starves_no_other() {
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(with_queue(
        bank.clone(),
        Queue::new("bank-api").concurrency(1),
    ))
    .await;
    hold_the_slot(&engine, &bank).await;
    let mut ids = vec!["hold".to_owned()];
    let busy = (1..=20).map(|n| (format!("busy-{n}"), "busy"));
    let quiet = (1..=2).map(|n| (format!("quiet-{n}"), "quiet"));
    for (name, key) in busy.chain(quiet) {
        let t = transfer_of(&name, key);
        engine
            .start_on("bank-api", transfer, &name, t)
            .key(key)
            .await
            .unwrap();
        ids.push(name);
    }
    bank.open_gate();
    all_complete(&engine, &ids).await;
    let began = bank.began();
    assert_eq!(
        began[..6],
        ["hold", "busy-1", "quiet-1", "busy-2", "quiet-2", "busy-3"],
        "the quiet key waited behind the busy one: {began:?}"
    );
    let busy: Vec<String> = (1..=20).map(|n| format!("busy-{n}")).collect();
    let busy_began: Vec<&String> = began.iter().filter(|b| b.starts_with("busy")).collect();
    assert!(
        busy_began.iter().copied().eq(busy.iter()),
        "FIFO within a key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_instances_survive_a_reopen_in_order() {
    let store = Reopenable::new("queuesreopen").await;
    let queue = || Queue::new("bank-api").concurrency(1);
    let before = std::sync::Arc::new(Bank::new());
    let engine = store.open(|| with_queue(before.clone(), queue())).await;
    hold_the_slot(&engine, &before).await;
    let names: Vec<String> = (1..=50).map(|n| format!("q-{n}")).collect();
    for name in &names {
        let t = transfer_of(name, "k");
        engine
            .start_on("bank-api", transfer, name, t)
            .await
            .unwrap();
    }
    engine.close().await;

    let after = std::sync::Arc::new(Bank::new());
    let engine = store.open(|| with_queue(after.clone(), queue())).await;
    wait_until("fifty queued after the reopen", || async {
        queued_on(&engine, "bank-api").await == 50
    })
    .await;
    // The instance that held the slot holds it again, and runs again.
    wait_until("the holder running again", || async {
        after.running() == 1
    })
    .await;
    helpers::quiet(&engine).await;
    assert_eq!(after.running(), 1);
    after.open_gate();
    let mut ids = vec!["hold".to_owned()];
    ids.extend(names.iter().cloned());
    all_complete(&engine, &ids).await;
    let mut expected = vec!["hold".to_owned()];
    expected.extend(names);
    assert_eq!(after.began(), expected);
    assert_eq!(after.most(), 1);
    engine.close().await;
}

/// Two transfers begin per minute of the engine's clock, however many run.
fn two_a_minute() -> Queue {
    Queue::new("bank-api").rate_limit(2, Duration::from_secs(60))
}

/// On PostgreSQL a worker also looks at its queues every poll interval
/// (real time): made an hour here, so that only the dispatcher's own wake
/// at the window's end, on the engine's clock, starts what the rate held
/// back. (On sled the dispatcher looks every 200 ms as well.)
fn polling_rarely(builder: EngineBuilder) -> EngineBuilder {
    #[cfg(feature = "postgres")]
    if helpers::on_postgres() {
        return builder.poll_interval(Duration::from_secs(3600));
    }
    builder
}

async fn began_count(bank: &Bank, n: usize) {
    wait_until(&format!("{n} transfers begun"), || async {
        bank.began().len() == n
    })
    .await;
}

/// Which transfers began, in id order: those dispatched together run at
/// once, and may reach the bank in either order.
fn began_sorted(bank: &Bank) -> Vec<String> {
    let mut began = bank.began();
    began.sort();
    began
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_starts_no_more_than_its_rate_in_any_window() {
    let clock = TestClock::new();
    let bank = std::sync::Arc::new(Bank::new());
    // Transfers end at once: the rate counts starts, not what runs.
    bank.open_gate();
    let builder = with_queue(bank.clone(), two_a_minute()).clock(clock.clone());
    let engine = fresh(polling_rarely(builder)).await;
    let ids = start_transfers(&engine, "r", 5).await;
    began_count(&bank, 2).await;
    all_complete(&engine, &ids[..2]).await;
    wait_until("three queued", || async {
        queued_on(&engine, "bank-api").await == 3
    })
    .await;
    helpers::quiet(&engine).await;
    assert_eq!(began_sorted(&bank), ids[..2]);
    // The window has not moved on yet.
    clock.advance(Duration::from_secs(59));
    helpers::quiet(&engine).await;
    assert_eq!(began_sorted(&bank), ids[..2]);
    assert_eq!(queued_on(&engine, "bank-api").await, 3);
    // A minute after the first two began, the next two do: first come,
    // first served.
    clock.advance(Duration::from_secs(1));
    began_count(&bank, 4).await;
    helpers::quiet(&engine).await;
    assert_eq!(began_sorted(&bank), ids[..4]);
    assert_eq!(queued_on(&engine, "bank-api").await, 1);
    clock.advance(Duration::from_secs(60));
    all_complete(&engine, &ids).await;
    assert_eq!(began_sorted(&bank), ids);
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopen_does_not_reset_the_rate_window() {
    let store = Reopenable::new("queuesrate").await;
    let clock = TestClock::new();
    let before = std::sync::Arc::new(Bank::new());
    before.open_gate();
    let open = |bank: &std::sync::Arc<Bank>| {
        let bank = bank.clone();
        let clock = clock.clone();
        move || polling_rarely(with_queue(bank.clone(), two_a_minute()).clock(clock.clone()))
    };
    let engine = store.open(open(&before)).await;
    let ids = start_transfers(&engine, "r", 3).await;
    // Two begin and end; their starts still fill the window.
    all_complete(&engine, &ids[..2]).await;
    assert_eq!(began_sorted(&before), ids[..2]);
    engine.close().await;

    clock.advance(Duration::from_secs(30));
    let after = std::sync::Arc::new(Bank::new());
    after.open_gate();
    let engine = store.open(open(&after)).await;
    wait_until("one queued after the reopen", || async {
        queued_on(&engine, "bank-api").await == 1
    })
    .await;
    helpers::quiet(&engine).await;
    assert!(after.began().is_empty(), "the reopen reset the window");
    clock.advance(Duration::from_secs(30));
    all_complete(&engine, &ids[2..]).await;
    assert_eq!(after.began(), ids[2..]);
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_instance_keeps_its_slot() {
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(with_queue(
        bank.clone(),
        Queue::new("bank-api").concurrency(1),
    ))
    .await;
    hold_the_slot(&engine, &bank).await;
    let t = transfer_of("next", "n");
    engine
        .start_on("bank-api", transfer, "next", t)
        .await
        .unwrap();
    let hold = engine.instance("hold").await.unwrap();
    hold.pause().await.unwrap();
    // The step in flight finishes; the instance then parks, paused.
    bank.gate.add_permits(1);
    helpers::until_status(&hold, Status::Paused).await;
    helpers::quiet(&engine).await;
    assert_eq!(
        bank.began(),
        ["hold"],
        "a paused instance gave its slot away"
    );
    let next = engine.instance("next").await.unwrap();
    assert_eq!(next.status().await.unwrap(), Status::Queued);
    hold.resume().await.unwrap();
    bank.open_gate();
    all_complete(&engine, &["hold".into(), "next".into()]).await;
    assert_eq!(bank.began(), ["hold", "next"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_instance_waits_for_a_slot_again() {
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(with_queue(
        bank.clone(),
        Queue::new("bank-api").concurrency(1),
    ))
    .await;
    let t = transfer_of("again", "a");
    let again = engine
        .start_on("bank-api", transfer, "again", t)
        .await
        .unwrap();
    bank.gate.add_permits(1);
    within("the first run", again.result()).await.unwrap();
    hold_the_slot(&engine, &bank).await;
    again.restart().await.unwrap();
    helpers::until_status(&again, Status::Queued).await;
    helpers::quiet(&engine).await;
    assert_eq!(
        bank.began(),
        ["again", "hold"],
        "a restart skipped the queue"
    );
    bank.open_gate();
    all_complete(&engine, &["hold".into(), "again".into()]).await;
    assert_eq!(bank.began(), ["again", "hold", "again"]);
    assert_eq!(bank.most(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_instance_paused_is_passed_over_until_resumed() {
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(with_queue(
        bank.clone(),
        Queue::new("bank-api").concurrency(1),
    ))
    .await;
    hold_the_slot(&engine, &bank).await;
    for name in ["paused", "next"] {
        let t = transfer_of(name, name);
        engine
            .start_on("bank-api", transfer, name, t)
            .await
            .unwrap();
    }
    let paused = engine.instance("paused").await.unwrap();
    paused.pause().await.unwrap();
    assert_eq!(paused.status().await.unwrap(), Status::Paused);
    bank.gate.add_permits(2);
    let next = engine.instance("next").await.unwrap();
    within("the next's end", next.result::<()>()).await.unwrap();
    assert_eq!(bank.began(), ["hold", "next"]);
    // Resumed, it waits in its queue again, and takes the free slot.
    paused.resume().await.unwrap();
    bank.open_gate();
    within("the resumed one's end", paused.result::<()>())
        .await
        .unwrap();
    assert_eq!(bank.began(), ["hold", "next", "paused"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_start_runs_at_once_beside_a_full_queue() {
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(with_queue(
        bank.clone(),
        Queue::new("bank-api").concurrency(1),
    ))
    .await;
    hold_the_slot(&engine, &bank).await;
    let t = transfer_of("plain", "p");
    engine.start(transfer, "plain", t).await.unwrap();
    wait_until("the plain start at the bank", || async {
        bank.running() == 2
    })
    .await;
    let info = engine
        .instance("plain")
        .await
        .unwrap()
        .info()
        .await
        .unwrap();
    assert_eq!(info.queue, None);
    bank.open_gate();
    all_complete(&engine, &["hold".into(), "plain".into()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_runs_outside_its_parents_queue() {
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(with_queue(
        bank.clone(),
        Queue::new("bank-api").concurrency(1),
    ))
    .await;
    let t = transfer_of("child", "c");
    let parent = engine
        .start_on("bank-api", batch, "batch-1", t)
        .await
        .unwrap();
    // The parent holds the queue's one slot; its child runs beside it.
    wait_until("the child at the bank", || async { bank.running() == 1 }).await;
    let child = engine.instance("batch-1.one").await.unwrap();
    assert_eq!(child.info().await.unwrap().queue, None);
    bank.open_gate();
    within("the batch's end", parent.result()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_instance_terminated_while_it_waits_never_runs() {
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(with_queue(
        bank.clone(),
        Queue::new("bank-api").concurrency(1),
    ))
    .await;
    hold_the_slot(&engine, &bank).await;
    for name in ["gone", "next"] {
        let t = transfer_of(name, name);
        engine
            .start_on("bank-api", transfer, name, t)
            .await
            .unwrap();
    }
    let gone = engine.instance("gone").await.unwrap();
    gone.terminate().await.unwrap();
    bank.open_gate();
    all_complete(&engine, &["hold".into(), "next".into()]).await;
    assert_eq!(bank.began(), ["hold", "next"]);
    assert_eq!(gone.status().await.unwrap(), Status::Terminated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_queues_and_starts_are_refused_before_anything_is_stored() {
    let bank = || std::sync::Arc::new(Bank::new());
    for bad in [
        Queue::new("bank-api").concurrency(0),
        Queue::new("bank-api").per_key(0),
        Queue::new("bank-api").per_worker(0),
        Queue::new("bank-api").rate_limit(0, Duration::from_secs(1)),
        Queue::new("bank-api").rate_limit(10, Duration::ZERO),
        Queue::new("Bank API"),
    ] {
        let opened = with_queue(bank(), bad.clone()).temporary();
        match opened {
            Err(Error::InvalidQueue { queue, reason }) => {
                assert_eq!(queue, bad.name());
                assert!(!reason.is_empty());
            }
            other => panic!("{bad:?} opened: {other:?}"),
        }
    }
    let twice = with_queue(bank(), Queue::new("q"))
        .queue(Queue::new("q"))
        .temporary();
    assert!(matches!(twice, Err(Error::InvalidQueue { .. })));

    let engine = fresh(with_queue(bank(), Queue::new("bank-api"))).await;
    let t = transfer_of("t", "k");
    let unknown = engine
        .start_on("no-such-queue", transfer, "t-1", t.clone())
        .await;
    match unknown {
        Err(Error::UnknownQueue { queue, known }) => {
            assert_eq!(queue, "no-such-queue");
            assert_eq!(known, ["bank-api"]);
        }
        other => panic!("an unknown queue started: {:?}", other.map(drop)),
    }
    let long_key = "k".repeat(101);
    let bad_key = engine
        .start_on("bank-api", transfer, "t-2", t.clone())
        .key(long_key)
        .await;
    assert!(matches!(bad_key, Err(Error::InvalidQueueKey { .. })));
    let empty_key = engine
        .start_on("bank-api", transfer, "t-3", t)
        .key("")
        .await;
    assert!(matches!(empty_key, Err(Error::InvalidQueueKey { .. })));
    for id in ["t-1", "t-2", "t-3"] {
        assert!(matches!(
            engine.instance(id).await,
            Err(Error::UnknownInstance { .. })
        ));
    }
}

/// After the bank call and a wait: a second call at the bank.
#[step(name = "call-bank-again", read_only)]
async fn call_bank_again(bank: Service<Bank>, t: Transfer) -> Result<(), StepError> {
    call_bank_body(&bank, &t).await
}

async fn call_bank_body(bank: &Bank, t: &Transfer) -> Result<(), StepError> {
    bank.enter(t);
    let permit = bank.gate.acquire().await.map_err(StepError::fatal)?;
    permit.forget();
    bank.leave(t);
    Ok(())
}

/// A transfer that calls the bank, sleeps an hour, and calls it again.
#[workflow(name = "napping-transfer")]
async fn napping_transfer(ctx: WorkflowContext, t: Transfer) -> Result<(), WorkflowError> {
    call_bank(&ctx, t.clone()).await?;
    ctx.sleep("nap", Duration::from_secs(3600)).await?;
    call_bank_again(&ctx, t).await?;
    Ok(())
}

/// A transfer that calls the bank, waits for an approval, and calls it
/// again.
#[workflow(name = "approved-transfer")]
async fn approved_transfer(ctx: WorkflowContext, t: Transfer) -> Result<(), WorkflowError> {
    call_bank(&ctx, t.clone()).await?;
    let approved: bool = ctx
        .wait_for_event("approval", "approval", Duration::from_secs(86_400))
        .await?;
    if approved {
        call_bank_again(&ctx, t).await?;
    }
    Ok(())
}

fn releasing(bank: &std::sync::Arc<Bank>, clock: &TestClock) -> EngineBuilder {
    Engine::builder()
        .clock(clock.clone())
        .provide_arc(bank.clone())
        .queue(
            Queue::new("bank-api")
                .concurrency(1)
                .release_while_waiting(),
        )
        .register(napping_transfer)
        .register(approved_transfer)
}

/// Whether the history of `id` has an event that `is` picks.
async fn told(
    engine: &Engine,
    id: &str,
    is: fn(&saga_runtime::inspect::EventKind) -> bool,
) -> bool {
    let history = engine.instance(id).await.unwrap().history().await.unwrap();
    history.iter().any(|e| is(&e.kind))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_releases_while_waiting_lends_a_sleepers_slot() {
    let clock = TestClock::new();
    let bank = std::sync::Arc::new(Bank::new());
    bank.open_gate();
    let engine = fresh(releasing(&bank, &clock)).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        let id = format!("nap-{n}");
        let t = transfer_of(&id, "any");
        engine
            .start_on("bank-api", napping_transfer, &id, t)
            .await
            .unwrap();
        ids.push(id);
    }
    // Each gives its slot back as it sleeps, so the next takes it: all
    // three called the bank and sleep, one at a time. The clock moves
    // only once each gave its slot back (`Waiting` comes a moment
    // before): one that wakes still holding its slot never waits again.
    wait_until("all three asleep, their slots given back", || async {
        let mut asleep = 0;
        for id in &ids {
            let status = engine.instance(id).await.unwrap().status().await.unwrap();
            let released = told(&engine, id, |k| {
                matches!(k, saga_runtime::inspect::EventKind::SlotReleased { .. })
            })
            .await;
            asleep += usize::from(status == Status::Waiting && released);
        }
        asleep == 3 && bank.began().len() == 3
    })
    .await;
    let counts = engine.instance_counts().await.unwrap();
    assert_eq!(depth_of(&counts, "bank-api"), (0, 3));
    // Awake, each waits for a slot again, and goes on from its sleep once
    // it takes one.
    clock.advance(Duration::from_secs(7200));
    all_complete(&engine, &ids).await;
    assert_eq!(bank.began().len(), 6);
    assert_eq!(bank.most(), 1, "two held the queue's one slot at once");
    assert!(
        told(&engine, "nap-2", |k| matches!(
            k,
            saga_runtime::inspect::EventKind::Requeued { .. }
        ))
        .await
    );
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_wait_gives_its_slot_back_and_waits_for_one_when_the_event_came() {
    let clock = TestClock::new();
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(releasing(&bank, &clock)).await;
    for id in ["a-0", "a-1"] {
        let t = transfer_of(id, "any");
        engine
            .start_on("bank-api", approved_transfer, id, t)
            .await
            .unwrap();
    }
    bank.gate.add_permits(2);
    wait_until("both at their wait", || async {
        bank.began().len() == 2 && queued_on(&engine, "bank-api").await == 0
    })
    .await;
    // a-1 holds no slot while it waits: a-0, approved first, takes the
    // free one; a-1's approval puts it back in the queue, behind a-0's
    // second bank call, which holds the slot.
    engine.send_event("a-0", "approval", &true).await.unwrap();
    wait_until("a-0 at the bank again", || async { bank.running() == 1 }).await;
    engine.send_event("a-1", "approval", &true).await.unwrap();
    wait_until("a-1 queued again", || async {
        queued_on(&engine, "bank-api").await == 1
    })
    .await;
    helpers::quiet(&engine).await;
    assert_eq!(bank.running(), 1, "a-1 went on without a slot");
    bank.open_gate();
    all_complete(&engine, &["a-0".into(), "a-1".into()]).await;
    assert_eq!(bank.began(), ["a-0", "a-1", "a-0", "a-1"]);
    assert_eq!(bank.most(), 1);
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeper_that_gave_its_slot_back_survives_a_reopen_without_one() {
    let store = Reopenable::new("queuesrelease").await;
    let clock = TestClock::new();
    let bank = std::sync::Arc::new(Bank::new());
    bank.open_gate();
    let engine = store.open(|| releasing(&bank, &clock)).await;
    for id in ["r-0", "r-1"] {
        let t = transfer_of(id, "any");
        engine
            .start_on("bank-api", napping_transfer, id, t)
            .await
            .unwrap();
    }
    wait_until("both asleep", || async { bank.began().len() == 2 }).await;
    wait_until("both gave their slot back", || async {
        engine.instance_counts().await.unwrap().queues[0].started == 2
            && told(&engine, "r-1", |k| {
                matches!(k, saga_runtime::inspect::EventKind::SlotReleased { .. })
            })
            .await
    })
    .await;
    engine.close().await;
    let engine = store.open(|| releasing(&bank, &clock)).await;
    helpers::quiet(&engine).await;
    assert_eq!(bank.began().len(), 2, "a reopen ran a sleeper on");
    clock.advance(Duration::from_secs(7200));
    all_complete(&engine, &["r-0".into(), "r-1".into()]).await;
    assert_eq!(bank.began().len(), 4);
    assert_eq!(bank.most(), 1);
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_queue_takes_every_plain_start_but_no_child() {
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(
        Engine::builder()
            .provide_arc(bank.clone())
            .default_queue(Queue::new("work").concurrency(1))
            .register(transfer)
            .register(batch),
    )
    .await;
    let t = transfer_of("first", "f");
    engine.start(transfer, "first", t).await.unwrap();
    wait_until("the first at the bank", || async { bank.running() == 1 }).await;
    let t = transfer_of("second", "s");
    engine.start(transfer, "second", t).await.unwrap();
    let options = saga_runtime::StartOptions::new().tag("customer", "42");
    let t = transfer_of("tagged", "t");
    engine
        .start_with(transfer, "tagged", t, options)
        .await
        .unwrap();
    for id in ["first", "second", "tagged"] {
        let info = engine.instance(id).await.unwrap().info().await.unwrap();
        assert_eq!(info.queue.as_deref(), Some("work"), "{id}");
    }
    assert_eq!(queued_on(&engine, "work").await, 2);
    helpers::quiet(&engine).await;
    assert_eq!(bank.began(), ["first"]);
    bank.open_gate();
    all_complete(&engine, &["first".into(), "second".into(), "tagged".into()]).await;
    assert_eq!(bank.most(), 1);
    // A batch takes the queue's slot; its child runs outside the queue.
    let t = transfer_of("in-batch", "b");
    let parent = engine.start(batch, "batch-9", t).await.unwrap();
    within("the batch's end", parent.result()).await.unwrap();
    let child = engine.instance("batch-9.one").await.unwrap();
    assert_eq!(child.info().await.unwrap().queue, None);
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_waiting_for_its_child_gives_its_slot_back() {
    let clock = TestClock::new();
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(releasing(&bank, &clock).register(transfer).register(batch)).await;
    for id in ["batch-a", "batch-b"] {
        let t = transfer_of(id, id);
        engine.start_on("bank-api", batch, id, t).await.unwrap();
    }
    // Each parent lets go of the queue's one slot while its child runs
    // (outside the queue): both children are at the bank at once.
    wait_until("both children at the bank", || async {
        bank.running() == 2
    })
    .await;
    bank.open_gate();
    for id in ["batch-a", "batch-b"] {
        let run = engine.instance(id).await.unwrap();
        within("the batch's end", run.result::<()>()).await.unwrap();
        assert!(
            told(&engine, id, |k| matches!(
                k,
                saga_runtime::inspect::EventKind::Requeued { .. }
            ))
            .await,
            "{id} went on without waiting for a slot"
        );
    }
    engine.close().await;
}

/// `start_on` dropped after each of its polls: the instance is not
/// created, or it waits in its queue and runs once it takes a slot (on
/// PostgreSQL, let go of by the worker that created it, for any worker to
/// take), and a start again returns it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_start_on_leaves_the_instance_queued_or_not_created() {
    let bank = std::sync::Arc::new(Bank::new());
    bank.open_gate();
    let engine = fresh(with_queue(
        bank.clone(),
        Queue::new("bank-api").concurrency(2),
    ))
    .await;
    for polls in 0..=64 {
        let id = format!("dropped-{polls}");
        let start = engine.start_on("bank-api", transfer, &id, transfer_of(&id, "k"));
        let done = helpers::drop_after(start.into_future(), polls).await;
        match engine.instance(&id).await {
            Err(Error::UnknownInstance { .. }) => assert!(done.is_none(), "{id}"),
            Ok(instance) => within("the dropped start's instance", instance.result::<()>())
                .await
                .unwrap(),
            Err(e) => panic!("{id}: {e}"),
        }
        let again = engine
            .start_on("bank-api", transfer, &id, transfer_of(&id, "k"))
            .await
            .unwrap();
        within("the start again", again.result()).await.unwrap();
        if done.is_some() {
            engine.close().await;
            return;
        }
    }
    panic!("start_on did not complete within 64 polls");
}

/// A pause that comes while an instance waits without its slot: the wait
/// ends, and it stays paused without asking for a slot; resumed, it waits
/// for one and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeper_paused_without_its_slot_asks_for_one_only_once_resumed() {
    let clock = TestClock::new();
    let bank = std::sync::Arc::new(Bank::new());
    bank.open_gate();
    let engine = fresh(releasing(&bank, &clock)).await;
    let t = transfer_of("paused-nap", "p");
    let run = engine
        .start_on("bank-api", napping_transfer, "paused-nap", t)
        .await
        .unwrap();
    wait_until("it gave its slot back", || async {
        told(&engine, "paused-nap", |k| {
            matches!(k, saga_runtime::inspect::EventKind::SlotReleased { .. })
        })
        .await
    })
    .await;
    run.pause().await.unwrap();
    helpers::until_status(&run, Status::Paused).await;
    clock.advance(Duration::from_secs(7200));
    helpers::quiet(&engine).await;
    assert_eq!(run.status().await.unwrap(), Status::Paused);
    assert_eq!(bank.began().len(), 1, "a paused instance went on");
    assert!(
        !told(&engine, "paused-nap", |k| matches!(
            k,
            saga_runtime::inspect::EventKind::Requeued { .. }
        ))
        .await
    );
    run.resume().await.unwrap();
    within("the resumed nap's end", run.result()).await.unwrap();
    assert_eq!(bank.began().len(), 2);
    assert!(
        told(&engine, "paused-nap", |k| matches!(
            k,
            saga_runtime::inspect::EventKind::Requeued { .. }
        ))
        .await
    );
    engine.close().await;
}

/// A queued instance never took a slot, so it started no step: terminated
/// with rollback, it has nothing to compensate and ends `Terminated` at
/// once, holding no slot, and the queue counts it no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_instance_terminated_with_rollback_ends_at_once() {
    let bank = std::sync::Arc::new(Bank::new());
    let engine = fresh(with_queue(
        bank.clone(),
        Queue::new("bank-api").concurrency(1),
    ))
    .await;
    hold_the_slot(&engine, &bank).await;
    let t = transfer_of("queued", "q");
    let queued = engine
        .start_on("bank-api", transfer, "queued", t)
        .await
        .unwrap();
    within("the terminate", queued.terminate_with_rollback())
        .await
        .unwrap();
    assert_eq!(queued.status().await.unwrap(), Status::Terminated);
    let ended = within("the result", queued.result()).await;
    assert!(matches!(ended, Err(Error::Terminated { .. })), "{ended:?}");
    let kinds = helpers::kinds(&queued).await;
    assert!(
        !kinds.iter().any(|k| matches!(
            k,
            saga_runtime::inspect::EventKind::RollbackStepCompleted { .. }
                | saga_runtime::inspect::EventKind::RollbackStepFailed { .. }
        )),
        "nothing was started, so nothing is compensated: {kinds:?}"
    );
    let counts = engine.instance_counts().await.unwrap();
    assert_eq!(
        depth_of(&counts, "bank-api"),
        (0, 1),
        "only the holder counts as started"
    );
    bank.open_gate();
    all_complete(&engine, &["hold".into()]).await;
    assert_eq!(bank.began(), ["hold"]);
}

/// The limits the store holds for `queue`, as `instance_counts` gives them.
async fn stored_limits(engine: &Engine, queue: &str) -> Option<saga_runtime::queue::QueueLimits> {
    let counts = engine.instance_counts().await.unwrap();
    counts.queues.iter().find(|d| d.queue == queue)?.stored
}

/// The store keeps each queue's limits, so every worker runs it by the
/// same ones. On PostgreSQL a worker that declares others is refused,
/// naming both, unless its declaration replaces them; every worker then
/// takes by the stored ones, and `set_queue_limits` changes them for all.
/// On sled one process cannot disagree with itself: its declaration
/// replaces the stored limits, and `set_queue_limits` refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_limits_are_stored_and_a_worker_declaring_others_is_refused_or_replaces_them() {
    let store = Reopenable::new("queuelimits").await;
    let bank = std::sync::Arc::new(Bank::new());
    let declare = |queue: Queue| {
        let bank = bank.clone();
        move || with_queue(bank.clone(), queue.clone())
    };
    let five = store
        .open(declare(Queue::new("bank-api").concurrency(5)))
        .await;
    let stored = stored_limits(&five, "bank-api").await.unwrap();
    assert_eq!(stored.concurrency, Some(5));
    if !helpers::on_postgres() {
        five.close().await;
        let two = store
            .open(declare(Queue::new("bank-api").concurrency(2)))
            .await;
        let stored = stored_limits(&two, "bank-api").await.unwrap();
        assert_eq!(stored.concurrency, Some(2), "the declaration replaces them");
        let refused = two
            .set_queue_limits(Queue::new("bank-api").concurrency(3))
            .await;
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "{refused:?}"
        );
        two.close().await;
        return;
    }
    let refused = store
        .try_open(declare(Queue::new("bank-api").concurrency(2)))
        .await;
    let Err(Error::QueueLimitsDiffer {
        queue,
        declared,
        stored,
    }) = refused
    else {
        panic!(
            "a worker declaring other limits connected: {:?}",
            refused.map(drop)
        );
    };
    assert_eq!(
        (queue.as_str(), declared.as_str(), stored.as_str()),
        ("bank-api", "concurrency 2", "concurrency 5")
    );
    let two = store
        .open(declare(
            Queue::new("bank-api")
                .concurrency(2)
                .replaces_stored_limits(),
        ))
        .await;
    assert_eq!(
        stored_limits(&two, "bank-api").await.unwrap().concurrency,
        Some(2)
    );
    // The first worker, which declared 5, takes by the stored 2.
    let ids = start_transfers(&five, "lim", 5).await;
    wait_until("two at the bank, three queued", || async {
        bank.running() == 2 && queued_on(&five, "bank-api").await == 3
    })
    .await;
    helpers::quiet(&five).await;
    helpers::quiet(&two).await;
    assert_eq!(bank.running(), 2, "a worker took by its own declaration");
    // Changed for every worker while they run: a third slot.
    let limits = two
        .set_queue_limits(Queue::new("bank-api").concurrency(3))
        .await
        .unwrap();
    assert_eq!(limits.concurrency, Some(3));
    five.start_on("bank-api", transfer, "lim-5", transfer_of("lim-5", "any"))
        .await
        .unwrap();
    wait_until("a third at the bank", || async { bank.running() == 3 }).await;
    bank.open_gate();
    all_complete(&five, &ids).await;
    assert_eq!(bank.most(), 3);
    five.close().await;
    two.close().await;
}
