//! `Engine::idle`: waiting until nothing more happens on its own, so a
//! test can check that something did *not* happen without sleeping.

use crate::engine::Engine;

/// Yields this many times in a row before waiting a real millisecond
/// between looks (a flush or a step body may take a while).
const YIELDS_BEFORE_NAPPING: u32 = 32;

impl Engine {
    /// Completes once the engine has nothing left to do by itself: none of
    /// its tasks (drivers, step and compensation bodies, dispatchers,
    /// alarms) is woken or running, no write waits for a flush and no call
    /// for the store. What is left waits on something outside: an event,
    /// time moving on (a [`TestClock`](crate::testing::TestClock) that is not
    /// advanced), a control call, or whatever a step body awaits that is
    /// not the engine's. It is the barrier a test needs before checking
    /// that something did *not* happen:
    ///
    /// ```
    /// use saga_runtime::prelude::*;
    /// use saga_runtime::testing::TestClock;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), saga_runtime::Error> {
    /// let wait = workflow_fn("wait", |ctx: WorkflowContext, (): ()| async move {
    ///     let _: u32 = ctx.wait_for_event("approval", "approved", "1 day").await?;
    ///     Ok::<_, WorkflowError>(())
    /// });
    /// let clock = TestClock::new();
    /// let engine = Engine::builder().clock(clock.clone()).temporary()?;
    /// let run = engine.start(wait, "order-7", ()).await?;
    /// engine.idle().await;
    /// assert_eq!(run.status().await?, Status::Waiting); // no event, no time passed
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Nothing here waits a fixed time: the engine counts each of its
    /// tasks from the moment it is woken (by an event, a flush, the test
    /// clock moving) until it waits again, so `idle` cannot return between
    /// a cause and its effect. A step body is one of those tasks: one that
    /// waits on the test (a gate the test holds) waits on the outside, as
    /// an event wait does, and `idle` returns; one that waits on a real
    /// thing (a socket, a Tokio timer) does too, so a body's real I/O is
    /// for the test to wait on (with a timeout) before it calls `idle`.
    ///
    /// On a store shared by workers (PostgreSQL), `idle` counts this
    /// engine's calls until the store answers them and its writes until
    /// they are applied. What reaches the engine through the database's
    /// notifications is not counted: what other processes do, and on
    /// that store a child's end told to its parent. A check across
    /// processes, or on a child there, waits for a later event instead.
    ///
    /// # Cancel safety
    ///
    /// It only looks: dropping the future at any point changes nothing.
    /// On an engine that is closed it returns at once.
    pub async fn idle(&self) {
        let mut looks = 0;
        while !self.is_idle() {
            looks += 1;
            if looks < YIELDS_BEFORE_NAPPING {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        }
    }

    /// Whether the engine is idle now (see [`Engine::idle`]).
    pub(crate) fn is_idle(&self) -> bool {
        let core = &self.runner().core;
        // Closed, its tasks are stopped and what it queued is not its own.
        core.is_closed() || core.quiet.is_quiet_around(|| core.journal.is_quiet())
    }
}
