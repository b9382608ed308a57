//! Deterministic simulation: the pieces a seeded run of engines is made
//! of, so that one seed replays a run exactly.
//!
//! - [`SimRng`]: the one generator every choice of a run draws from.
//! - [`SimDisk`] and [`SimStore`]: a store in memory whose durable part
//!   is kept apart from the writes not flushed yet, with faults drawn
//!   from a seed ([`SimFaults`]: failed writes and flushes, slow calls on
//!   the runtime's clock) and crashes that keep the durable part and a
//!   prefix of the rest. It starts no thread: the engine flushes it on
//!   its own task.
//! - [`TraceHash`]: a hash of a run's trace that every machine agrees on.
//!
//! A run puts them together on a current-thread Tokio runtime with paused
//! time (`tokio::runtime::Builder::new_current_thread().enable_time()
//! .start_paused(true)`), a [`TestClock`](crate::testing::TestClock) that the run
//! moves, and engines built with
//! [`random_seed`](crate::EngineBuilder::random_seed):
//!
//! ```
//! use std::sync::Arc;
//! use saga_runtime::Engine;
//! use saga_runtime::testing::sim::{SimDisk, SimRng};
//! use saga_runtime::testing::TestClock;
//!
//! let runtime = tokio::runtime::Builder::new_current_thread()
//!     .enable_time()
//!     .start_paused(true)
//!     .build()
//!     .unwrap();
//! runtime.block_on(async {
//!     let mut rng = SimRng::new(42);
//!     let disk = SimDisk::new(rng.next_u64());
//!     let clock = TestClock::new();
//!     let engine = Engine::builder()
//!         .clock(clock.clone())
//!         .random_seed(rng.next_u64())
//!         .open_store(Arc::new(disk.open()))
//!         .unwrap();
//!     // ... start instances, move the clock, crash:
//!     disk.crash();
//!     drop(engine);
//!     let _reopened = Engine::builder().clock(clock).open_store(Arc::new(disk.open())).unwrap();
//! });
//! ```
//!
//! The engine's own simulation (`tests/simulation.rs`) runs workloads of
//! every feature against it and checks the engine's invariants after each
//! run.

mod store;

pub use self::store::{Journals, SimDisk, SimFaults, SimStore};
pub use crate::seeded::{SimRng, TraceHash};
