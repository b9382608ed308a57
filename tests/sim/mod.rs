//! The deterministic simulator of the engine (issue 35): see
//! `tests/simulation.rs` for how to run it.

pub mod check;
pub mod run;
pub mod workload;
