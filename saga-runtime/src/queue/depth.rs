//! How deep a queue is, as `Engine::counts` reports it.

use super::QueueLimits;

/// One queue's depth (see [`InstanceCounts::queues`](crate::inspect::InstanceCounts::queues)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueDepth {
    /// The queue's name.
    pub queue: String,
    /// Instances waiting for a slot (`Queued`).
    pub waiting: u64,
    /// Instances that left the queue's wait and have not ended: those
    /// that hold a slot, paused or waiting ones included.
    pub started: u64,
    /// When the instance that has waited longest was created (`None`:
    /// none waits).
    pub oldest_waiting: Option<std::time::SystemTime>,
    /// Its limits, as this engine declares them (`None`: this engine does
    /// not declare it, as the `saga` command on a store does not; the
    /// workers that take from it do).
    pub declared: Option<QueueLimits>,
    /// Its limits as the store holds them: those every worker takes by
    /// (`None`: none stored yet; see
    /// [`Queue::replaces_stored_limits`](super::Queue::replaces_stored_limits)).
    pub stored: Option<QueueLimits>,
}
