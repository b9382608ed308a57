//! Control calls that meet: each pair runs at once, many times, on a
//! multi-thread runtime. Calls on one instance are serialized by its
//! journal's write lock, so nothing is duplicated or lost: the journal
//! folds, `result()` answers, events are delivered once, and the final
//! status is one the two calls allow.

#[path = "support/helpers.rs"]
mod helpers;

use std::time::Duration;

use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;

use helpers::{until_status, within};

const ROUNDS: usize = 50;

#[step(name = "first", read_only)]
async fn first(n: u64) -> Result<u64, StepError> {
    Ok(n)
}

/// A step, then a wait for an event.
#[workflow(name = "waits")]
async fn waits(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let first = first(&ctx, n).await?;
    let got: u64 = ctx.wait_for_event("wait-go", "go", "1 day").await?;
    Ok(first + got)
}

struct World {
    engine: Engine,
    clock: TestClock,
}

fn world() -> World {
    world_keeping(Duration::ZERO)
}

/// A world whose finished instances are kept for `retention`.
fn world_keeping(retention: Duration) -> World {
    let clock = TestClock::new();
    let engine = Engine::builder()
        .clock(clock.clone())
        .retention(retention)
        .temporary()
        .unwrap();
    World { engine, clock }
}

impl World {
    async fn waiting(&self, id: &str) -> Instance {
        let run = self.engine.start(waits, id, 1).await.unwrap();
        until_status(&run, Status::Waiting).await;
        run.instance().clone()
    }
}

/// How many events the instance's waits took since its last restart.
async fn delivered_since_restart(run: &(impl AsRef<Instance> + ?Sized)) -> usize {
    let run: &Instance = run.as_ref();
    let history = run.history().await.unwrap();
    let from = history
        .iter()
        .rposition(|e| matches!(e.kind, EventKind::InstanceRestarted { .. }))
        .unwrap_or(0);
    history[from..]
        .iter()
        .filter(|e| matches!(e.kind, EventKind::EventDelivered { .. }))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_restarts_at_once_make_two_generations_and_lose_no_event() {
    let w = world();
    for round in 0..ROUNDS {
        let id = format!("rr-{round}");
        let run = w.waiting(&id).await;
        w.engine.send_event(&id, "go", &1u64).await.unwrap();
        within("the result", run.result::<u64>()).await.unwrap();
        let (a, b) = tokio::join!(run.restart(), run.restart());
        a.unwrap();
        b.unwrap();
        // The event the first run took is delivered again, once per run:
        // the newest generation takes it.
        within("the restarted result", run.result::<u64>())
            .await
            .unwrap();
        assert_eq!(delivered_since_restart(&run).await, 1, "{id}");
        let restarts = run
            .history()
            .await
            .unwrap()
            .iter()
            .filter(|e| matches!(e.kind, EventKind::InstanceRestarted { .. }))
            .count();
        assert_eq!(restarts, 2, "{id}: both restarts recorded");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_and_a_retention_sweep_never_remove_a_running_instance() {
    // Kept for an hour: the end of the first run is expired by the time of
    // the race, and the end of the restarted run (which may come before
    // the sweep reaches it: the event is delivered again at once) is not.
    const HOUR: Duration = Duration::from_secs(3600);
    let w = world_keeping(HOUR);
    for round in 0..ROUNDS {
        let id = format!("rs-{round}");
        let run = w.waiting(&id).await;
        w.engine.send_event(&id, "go", &1u64).await.unwrap();
        within("the result", run.result::<u64>()).await.unwrap();
        w.clock.advance(2 * HOUR);
        let (restarted, swept) = tokio::join!(run.restart(), w.engine.sweep_expired());
        swept.unwrap();
        let still_there = run.status().await;
        match restarted {
            // The restart came first: the sweep kept the running instance,
            // which finishes on the event its discarded wait took (a restart
            // delivers it again).
            Ok(()) => {
                assert!(
                    still_there.is_ok(),
                    "{id}: a restarted instance was removed: {still_there:?}"
                );
                within("the restarted result", run.result::<u64>())
                    .await
                    .unwrap();
            }
            // The sweep came first: the instance is gone, the restart says so.
            Err(saga_runtime::Error::UnknownInstance { .. }) => {
                assert!(still_there.is_err(), "{id}");
            }
            Err(other) => panic!("{id}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_and_a_terminate_at_once_deliver_at_most_once_and_end_the_instance() {
    let w = world();
    for round in 0..ROUNDS {
        let id = format!("et-{round}");
        let run = w.waiting(&id).await;
        let (sent, ended) = tokio::join!(w.engine.send_event(&id, "go", &1u64), run.terminate());
        let status = run.status().await.unwrap();
        match ended {
            // Terminated, or the event came first and the instance completed.
            Ok(()) => assert_eq!(status, Status::Terminated, "{id}"),
            Err(saga_runtime::Error::InvalidState { .. }) => {
                assert_eq!(status, Status::Complete, "{id}")
            }
            Err(other) => panic!("{id}: {other:?}"),
        }
        if sent.is_err() {
            assert_eq!(
                status,
                Status::Terminated,
                "{id}: an event refused only once ended"
            );
        }
        assert!(delivered_since_restart(&run).await <= 1, "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_and_a_pause_at_once_end_the_instance() {
    let w = world();
    for round in 0..ROUNDS {
        let id = format!("tp-{round}");
        let run = w.waiting(&id).await;
        let (ended, paused) = tokio::join!(run.terminate(), run.pause());
        ended.unwrap();
        // A pause after the end is refused; one before it changes nothing.
        if let Err(e) = paused {
            assert!(
                matches!(e, saga_runtime::Error::InvalidState { .. }),
                "{id}: {e:?}"
            );
        }
        assert_eq!(run.status().await.unwrap(), Status::Terminated, "{id}");
        let outcome = within("the result", run.result::<u64>()).await;
        assert!(
            matches!(outcome, Err(saga_runtime::Error::Terminated { .. })),
            "{id}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_and_a_resume_at_once_never_strand_the_instance() {
    let w = world();
    for round in 0..ROUNDS {
        let id = format!("pr-{round}");
        let run = w.waiting(&id).await;
        let (paused, resumed) = tokio::join!(run.pause(), run.resume());
        paused.unwrap();
        resumed.unwrap();
        // Whatever the order, a resume (again) lets it finish.
        run.resume().await.unwrap();
        w.engine.send_event(&id, "go", &1u64).await.unwrap();
        assert_eq!(
            within("the result", run.result::<u64>()).await.unwrap(),
            2,
            "{id}"
        );
        assert_eq!(delivered_since_restart(&run).await, 1, "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_and_a_terminate_at_once_leave_one_outcome() {
    let w = world();
    for round in 0..ROUNDS {
        let id = format!("rt-{round}");
        let run = w.waiting(&id).await;
        let (restarted, ended) = tokio::join!(run.restart(), run.terminate());
        restarted.unwrap();
        let status = run.status().await.unwrap();
        match ended {
            // Terminated after the restart, or before it (then the restart
            // runs it again).
            Ok(()) => assert!(
                matches!(
                    status,
                    Status::Terminated | Status::Queued | Status::Running | Status::Waiting
                ),
                "{id}: {status}"
            ),
            Err(saga_runtime::Error::InvalidState { .. }) => {}
            Err(other) => panic!("{id}: {other:?}"),
        }
        // Whatever it is, it answers: ended, or finishes on its event.
        if !status.is_terminal() {
            w.engine.send_event(&id, "go", &1u64).await.unwrap();
        }
        let _ = within("the result", run.result::<u64>()).await;
    }
    let _ = &w.clock;
}

/// A terminate that meets the instance while its driver lets go of it to
/// hibernate leaves no alarm behind: nothing wakes the terminated
/// instance at its deadline, and the clock holds no sleeper for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_as_the_instance_hibernates_leaves_no_alarm() {
    let w = world();
    for round in 0..ROUNDS {
        let id = format!("th-{round}");
        let run = w.engine.start(waits, &id, 1).await.unwrap();
        // Into the wait, or nearly: the driver decides to hibernate and
        // lets go of the instance while the terminate lands.
        while w.clock.sleepers() == 0 && run.status().await.unwrap() != Status::Waiting {
            tokio::task::yield_now().await;
        }
        run.terminate().await.unwrap();
        helpers::wait_until("the terminated instance's alarm to go", || async {
            w.clock.sleepers() == 0
        })
        .await;
    }
}
