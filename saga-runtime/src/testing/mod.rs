//! Checking a change to a workflow before a deploy: replay recorded
//! histories against today's code.
//!
//! An instance in flight replays its history against the code of the
//! release that runs it; a release whose calls no longer meet what history
//! recorded parks it `Blocked`. [`replay`] tells beforehand, in a test:
//! it runs the workflow function against a [`History`] with no side
//! effects (every step, child, sleep and wait is answered from history;
//! nothing runs for real, nothing is written to any store of yours) and
//! answers `Ok` or the first divergence, naming what history recorded and
//! what the code calls now.
//!
//! Histories come from a store: `saga export ID > order-7.json` (or
//! `saga export --all --status running DIR`, or [`History::export`]).
//! Commit a few to the repository and replay them in CI:
//!
//! ```no_run
//! use saga_runtime::prelude::*;
//! use saga_runtime::testing::{History, replay};
//!
//! #[workflow(name = "order")]
//! async fn order(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
//!     // reserve(&ctx).await?;
//!     // if ctx.patched("fraud-check") { fraud_check(&ctx).await?; }
//!     // charge_card(&ctx).await?;
//!     Ok(())
//! }
//!
//! #[tokio::test]
//! async fn in_flight_orders_replay() {
//!     let file = std::fs::read_to_string("tests/histories/order-7.json").unwrap();
//!     let history = History::from_json(&file).unwrap();
//!     if let Err(e) = replay(order, &history).await {
//!         panic!("{e}"); // history recorded step "charge-card", the workflow code now calls step "fraud-check"
//!     }
//! }
//! ```
//!
//! `saga check --replay`, run in the application (`saga_cli::run`), does
//! the same for every in-flight instance of a store, with the workflows
//! its engine registers ([`Replayer::of`]).
//!
//! [`explore`] runs a workflow under every failure the engine can
//! inject (each step failing for good, each compensation failing once, a
//! crash at every write) and checks your invariants after each: "money
//! is conserved".
//!
//! [`TestClock`] is here too, for tests that drive time, and [`sim`], the
//! pieces of a deterministic simulation.

mod explore;
mod history;
mod replayer;
pub mod sim;

pub use self::explore::{
    Explored, Explorer, Outcome, Report, Scenario, ScenarioKind, Unguarded, Verdict, explore,
};
pub use self::history::{FORMAT, History};
pub use self::replayer::{ReplayError, Replayed, Replayer, replay};
pub use crate::time::clock::TestClock;
