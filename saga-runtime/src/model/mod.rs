//! The values the engine reports about instances: their statuses and
//! their lifecycle events.

pub(crate) mod history;
pub(crate) mod status;
