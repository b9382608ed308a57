//! Time: the engine's clock ([`Clock`]: the system's by default, or
//! `testing::TestClock` in tests, set with `EngineBuilder::clock`) and the
//! durations users write (`"1 hour"`, `Duration`: [`IntoDuration`]).

pub(crate) mod clock;
pub(crate) mod duration;

pub use clock::{Clock, Sleep, SystemClock};
pub use duration::IntoDuration;
