//! Replaying a recorded history against today's workflow code, with no
//! side effects: what `saga_runtime::testing::replay` and `saga check
//! --replay` ask.
//!
//! The workflow function runs in [`Mode::Replay`]: every durable call is
//! answered from history, nothing runs for real and nothing is recorded.
//! A call that does not meet what history recorded fails the run as it
//! would live (non-determinism, naming both calls), and that failure is
//! the answer. The first call history holds no answer for (one it never
//! saw, or one still in flight when it was recorded) ends the replay
//! there: a live run would go on from that point with calls of its own,
//! which no history can judge.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use crate::error::failure::Failure;
use crate::journal::InstanceState;
use crate::names::id::InstanceId;
use crate::run::driver::start_run;
use crate::store::now_or_never;
use crate::workflow::ErasedWorkflow;
use crate::workflow::context::{Ctx, Mode};
use crate::workflow::engine_core::Core;
use crate::workflow::live::{Interrupt, Live};

/// How many times the workflow future is polled for progress. Answers
/// from history are ready at once, so one poll runs as far as history
/// goes; more are for workflow code that yields on its own.
const REPLAY_POLLS: usize = 64;

/// How a replay of one history ended.
#[derive(Debug)]
pub(crate) enum Replayed {
    /// The workflow function returned (its output or its error) within
    /// the recorded history.
    Returned,
    /// It reached a call history holds no answer for: a live run goes on
    /// from there. Also the answer for code that waits on something other
    /// than a durable call.
    ReachedEnd,
    /// A live run would park the instance `Blocked` with this failure
    /// (non-determinism, a stored value that no longer decodes).
    Diverged(Failure),
    /// The workflow function panicked.
    Panicked(String),
}

/// Replays `state` (the instance `id`'s, folded from its records) with
/// `workflow`, on `core`, which should be a private one: nothing is
/// written, but the calls are answered as if on it.
pub(crate) async fn replay(
    core: &Arc<Core>,
    workflow: &Arc<dyn ErasedWorkflow>,
    id: &InstanceId,
    state: &InstanceState,
) -> Replayed {
    let live = Arc::new(Live::new());
    let ctx = Ctx::new(
        core.clone(),
        id.clone(),
        live.clone(),
        Mode::Replay,
        state,
        workflow.order_of_rollback(),
    );
    let mut run = match start_run(workflow, &ctx, state) {
        Ok(run) => run,
        Err(panic) => return Replayed::Panicked(panic),
    };
    let mut outcome = Replayed::ReachedEnd;
    for _ in 0..REPLAY_POLLS {
        let polled = poll_fn(|cx| Poll::Ready(Pin::new(&mut run).poll(cx))).await;
        // A divergence first, as the live driver looks at its interrupts
        // first: the call that diverged never completes.
        if let Some(Interrupt::Fail(failure)) = now_or_never(live.interrupted()) {
            outcome = Replayed::Diverged(failure);
            break;
        }
        match polled {
            Poll::Ready(Ok(_)) => outcome = Replayed::Returned,
            Poll::Ready(Err(panic)) => outcome = Replayed::Panicked(panic),
            Poll::Pending if !ctx.scope.history_ended() => {
                tokio::task::yield_now().await;
                continue;
            }
            Poll::Pending => {}
        }
        break;
    }
    drop(run);
    ctx.stop_tasks().await;
    outcome
}
