//! Driving one instance: the driver that runs (and replays) its
//! workflow code, the runner that starts and lets go of drivers, and the
//! rollback that runs its compensations in reverse start order; what
//! the engine does for child workflows (`children`); and the replay of a
//! recorded history against today's code, with no side effects
//! (`replay`).

pub(crate) mod alarms;
pub(crate) mod children;
pub(crate) mod dequeue;
pub(crate) mod dispatch;
pub(crate) mod driver;
pub(crate) mod replay;
pub(crate) mod resident;
pub(crate) mod rollback;
pub(crate) mod runner;
