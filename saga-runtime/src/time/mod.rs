//! Time: the engine's clocks (the system's, and the test clock that
//! drives durable waits in tests) and the durations users write.

pub(crate) mod clock;
pub(crate) mod duration;
