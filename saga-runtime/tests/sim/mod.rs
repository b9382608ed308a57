//! The deterministic simulator of the engine (issue 35): see
//! `tests/simulation.rs` for how to run it.

pub(crate) mod check;
pub(crate) mod run;
pub(crate) mod workload;
