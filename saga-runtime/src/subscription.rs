//! The lifecycle event stream.

use tokio::sync::broadcast;

use crate::history::Event;

/// Lifecycle events of every instance, each sent after it is durable: a
/// subscriber that saw `StepCompleted` knows that step will never run again.
pub struct Subscription {
    receiver: broadcast::Receiver<Event>,
}

/// Why [`Subscription::recv`] returned no event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// The subscriber fell behind and this many events were dropped for it;
    /// read `history()` of the instances it cares about to catch up.
    #[error("the subscriber fell behind; {0} events were skipped")]
    Lagged(u64),
    /// The engine was closed.
    #[error("the engine was closed")]
    Closed,
}

impl Subscription {
    pub(crate) fn new(receiver: broadcast::Receiver<Event>) -> Self {
        Subscription { receiver }
    }

    /// The next event.
    ///
    /// # Cancel safety
    ///
    /// dropping the future loses no event: the next call receives it.
    pub async fn recv(&mut self) -> Result<Event, RecvError> {
        self.receiver.recv().await.map_err(|e| match e {
            broadcast::error::RecvError::Lagged(n) => RecvError::Lagged(n),
            broadcast::error::RecvError::Closed => RecvError::Closed,
        })
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").finish_non_exhaustive()
    }
}
