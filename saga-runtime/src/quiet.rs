//! Quiescence: whether any of the engine's tasks can run, for
//! [`Engine::idle`](crate::Engine::idle).
//!
//! Every task the engine spawns runs inside a [`Tracked`] wrapper that
//! counts it as *runnable* from the moment it is woken (or spawned) until
//! the poll that follows returns. The count goes up inside `wake`, on the
//! waker's thread, before Tokio queues the task: whatever woke an engine
//! task (a test's `advance`, a flush, an event written) is seen at once,
//! so a zero count cannot be read between a cause and its effect. A task
//! is let go only after its poll returned, so the count never drops to
//! zero while a task runs.
//!
//! The cost is an `Arc` per task and two or three atomic operations per
//! poll and per wake; the wrapped waker is made again only when Tokio
//! hands a different one.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

/// How many engine tasks can run now.
#[derive(Default)]
pub(crate) struct Quiet {
    runnable: AtomicUsize,
    /// Moves on each wake and each poll: two equal readings with no task
    /// runnable at either mean none ran or woke in between.
    moves: AtomicUsize,
}

impl Quiet {
    /// Whether no engine task is woken or running.
    pub(crate) fn is_quiet(&self) -> bool {
        self.runnable.load(Ordering::SeqCst) == 0
    }

    /// Whether no engine task is woken or running, before and after
    /// `also` holds, and none woke or ran meanwhile: what `also` looks at
    /// (the flusher, the store) may wake a task between two looks.
    pub(crate) fn is_quiet_around(&self, also: impl FnOnce() -> bool) -> bool {
        let before = self.moves.load(Ordering::SeqCst);
        self.is_quiet() && also() && self.is_quiet() && self.moves.load(Ordering::SeqCst) == before
    }

    /// Spawns `work` on `runtime`, counted as runnable until its first
    /// poll returns.
    pub(crate) fn spawn<F>(
        self: &Arc<Self>,
        runtime: &tokio::runtime::Handle,
        work: F,
    ) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        runtime.spawn(Tracked::new(self.clone(), work))
    }
}

/// Where a tracked task stands.
const WAITING: u8 = 0;
const WOKEN: u8 = 1;
const ENDED: u8 = 2;

/// One task's standing, shared by its wakers.
struct Standing {
    state: AtomicU8,
    quiet: Arc<Quiet>,
}

impl Standing {
    /// Counted first and taken back when the task was woken already (or
    /// ended): the count may be high for a moment, never low.
    fn woken(&self) {
        self.quiet.moves.fetch_add(1, Ordering::SeqCst);
        self.quiet.runnable.fetch_add(1, Ordering::SeqCst);
        if self
            .state
            .compare_exchange(WAITING, WOKEN, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            self.quiet.runnable.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// The waker a tracked task's future sees: counts the task, then wakes it.
struct CountingWaker {
    standing: Arc<Standing>,
    inner: Waker,
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.standing.woken();
        self.inner.wake_by_ref();
    }
}

/// A future counted while it can run (see the module's doc).
pub(crate) struct Tracked<F> {
    work: Pin<Box<F>>,
    standing: Arc<Standing>,
    /// The waker last made, and the one of Tokio's it wraps.
    waker: Option<Waker>,
    wrapped: Option<Waker>,
}

impl<F: Future> Tracked<F> {
    /// Counted as woken from now: a spawned task is.
    pub(crate) fn new(quiet: Arc<Quiet>, work: F) -> Self {
        quiet.runnable.fetch_add(1, Ordering::SeqCst);
        Tracked {
            work: Box::pin(work),
            standing: Arc::new(Standing {
                state: AtomicU8::new(WOKEN),
                quiet,
            }),
            waker: None,
            wrapped: None,
        }
    }

    fn waker_for(&mut self, tokio: &Waker) -> Waker {
        match (&self.waker, &self.wrapped) {
            (Some(waker), Some(wrapped)) if wrapped.will_wake(tokio) => waker.clone(),
            _ => {
                let waker = Waker::from(Arc::new(CountingWaker {
                    standing: self.standing.clone(),
                    inner: tokio.clone(),
                }));
                self.waker = Some(waker.clone());
                self.wrapped = Some(tokio.clone());
                waker
            }
        }
    }
}

impl<F: Future> Future for Tracked<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Every field is Unpin (the work is boxed).
        let this = self.get_mut();
        let waker = this.waker_for(cx.waker());
        // Marked waiting before the poll (a wake during it marks it woken
        // again), but the count it held is let go only after.
        let was = match this.standing.state.compare_exchange(
            WOKEN,
            WAITING,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(was) | Err(was) => was,
        };
        let polled = this.work.as_mut().poll(&mut Context::from_waker(&waker));
        this.standing.quiet.moves.fetch_add(1, Ordering::SeqCst);
        if polled.is_ready() && this.standing.state.swap(ENDED, Ordering::SeqCst) == WOKEN {
            this.standing.quiet.runnable.fetch_sub(1, Ordering::SeqCst);
        }
        if was == WOKEN {
            this.standing.quiet.runnable.fetch_sub(1, Ordering::SeqCst);
        }
        polled
    }
}

impl<F> Drop for Tracked<F> {
    fn drop(&mut self) {
        if self.standing.state.swap(ENDED, Ordering::SeqCst) == WOKEN {
            self.standing.quiet.runnable.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_task_counts_while_woken_and_not_once_it_waits_or_ends() {
        let quiet = Arc::new(Quiet::default());
        let (tell, told) = tokio::sync::oneshot::channel::<()>();
        let task = quiet.spawn(&tokio::runtime::Handle::current(), async move {
            let _ = told.await;
        });
        assert!(!quiet.is_quiet(), "spawned, not yet polled");
        tokio::task::yield_now().await;
        assert!(quiet.is_quiet(), "waits on its channel");
        tell.send(()).unwrap();
        assert!(!quiet.is_quiet(), "woken by the send, before it runs");
        task.await.unwrap();
        assert!(quiet.is_quiet());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_aborted_task_lets_go_of_its_count() {
        let quiet = Arc::new(Quiet::default());
        let task = quiet.spawn(
            &tokio::runtime::Handle::current(),
            std::future::pending::<()>(),
        );
        task.abort();
        let _ = task.await;
        assert!(quiet.is_quiet());
    }
}
