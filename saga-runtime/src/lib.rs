//! Durable workflows with saga rollback for async Rust.
//!
//! A workflow is an ordinary `async fn` made of named, durable steps. A
//! completed step is never run twice, even across crashes: its output is
//! stored (and flushed) before the workflow sees it, and replay after a
//! restart returns the stored output. When a workflow fails for good, the
//! compensations of the steps it started run in reverse start order,
//! durably.
//!
//! ```
//! use saga_runtime::prelude::*;
//! use saga_runtime::testing::TestClock;
//!
//! #[step(name = "charge-card", rollback = refund, retries = 3)]
//! async fn charge_card(key: IdempotencyKey, cents: u64) -> Result<String, StepError> {
//!     // payments.charge(cents, key.as_str()).await.map_err(StepError::retryable)
//!     Ok(format!("charged {cents} with key {key}"))
//! }
//!
//! #[rollback]
//! async fn refund(ctx: RollbackContext<'_, String>, cents: u64) -> Result<(), StepError> {
//!     // payments.refund(cents, ctx.key().as_str()).await.map_err(StepError::retryable)
//!     # let _ = ctx.key();
//!     Ok(())
//! }
//!
//! #[workflow(name = "checkout")]
//! async fn checkout(ctx: WorkflowContext, cents: u64) -> Result<String, WorkflowError> {
//!     let receipt = charge_card(&ctx, cents).await?;
//!     ctx.sleep("cool-off", "1 hour").await?; // durable: survives restarts
//!     Ok(receipt)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), saga_runtime::Error> {
//! let engine = Engine::builder()
//!     .clock(TestClock::auto_advancing()) // the hour passes at once
//!     .temporary()?;                      // Engine::open("./saga-data") for a durable store
//! let run = engine.start(checkout, "order-7", 1250).await?;
//! assert_eq!(run.result().await?, "charged 1250 with key order-7:charge-card");
//! # Ok(())
//! # }
//! ```
//!
//! # Where to read on
//!
//! - **The guide**, `book/` in the repository
//!   ([book/src/SUMMARY.md](https://github.com/saga-rs/saga/blob/main/book/src/SUMMARY.md)):
//!   steps, keys and determinism, rollback, errors, waits and children,
//!   changing workflows in flight, schedules, queues, search, sled,
//!   PostgreSQL, encryption, operations, testing, and every compile-time
//!   check. Its
//!   [Operations chapter](https://github.com/saga-rs/saga/blob/main/book/src/operations.md#tracing)
//!   lists the `tracing` spans and events the engine emits.
//! - **Here**: [`Engine`] and [`EngineBuilder`] (open a store, register
//!   workflows, start and find instances), [`WorkflowContext`] (what a
//!   workflow calls), the attribute macros [`workflow`], [`step`] and
//!   [`rollback`] (every attribute key is documented on its macro),
//!   [`Instance`] (control one instance), [`queue`], [`schedule`],
//!   [`inspect`] (find and look at instances), [`time`] (clocks) and
//!   [`testing`]. `use saga_runtime::prelude::*;` brings what a workflow
//!   file needs.
//! - **Features**: `macros` (default), `postgres` (`EngineBuilder::connect`),
//!   `encryption` (`Keyring`), `anyhow`. On docs.rs each feature-gated item
//!   says which it needs.
//! - **The `saga` command** to see and control instances: the `saga-cli`
//!   crate.
//!
//! # Words
//!
//! The docs, the errors and the `saga` command use these words in one
//! sense each.
//!
//! - **Workflow**: the code, registered under its name
//!   (`#[workflow(name = "checkout")]`).
//! - **Instance**: one execution of a workflow under an id you choose
//!   (`"order-7"`), from its start to its end; [`Instance`] is a handle on
//!   one, [`Run`] the handle `start` returns, which also knows the output
//!   type. An id names one instance for good: starting it again returns the
//!   same one.
//! - **Run** (of an instance): an instance that continues as new
//!   (`ctx.continue_as_new`) keeps its id and begins run 1, 2, ... with a
//!   fresh journal; [`inspect::Inspection::run`] says which run is read.
//! - **Journal**: an instance's records, in order, the only durable truth
//!   about it. **Replay** re-runs the workflow code against its journal after
//!   a restart: completed steps answer their stored output and do not run.
//! - **Slot**: one durable call in the workflow code (a step, a sleep, an
//!   event wait, a child), named by its literal name and its occurrence (the
//!   second call of `"charge"` is occurrence 1); [`inspect::InspectedSlot`]
//!   shows one. A **queue slot** is another thing: one of the places a
//!   [`Queue`](queue::Queue)'s limits allow, which an instance takes before its first step
//!   and holds until it ends.
//! - **Driver**: the task that runs an instance's workflow code in this
//!   process. An instance has at most one, and at most one **owner**: the
//!   worker whose driver may write its journal (on PostgreSQL, the worker
//!   that created or claimed it).
//! - **Resident**: an instance held in memory by this process (it has a
//!   driver, or waits with its state loaded). An instance that only sleeps
//!   is not resident: it stays in the store until it is due, an event
//!   comes for it, or it is controlled.
//! - **Worker**: a process that runs workflows on a store ([`Engine::open`],
//!   [`EngineBuilder::connect`]); a **reader** only looks and posts
//!   (`open_read_only`, `connect_read_only`, the `saga` command).
//! - **Rollback**: the compensations of the steps an instance started, run
//!   in reverse start order when it fails for good; a **compensation** is
//!   one step's undo (`#[rollback]`).
#![deny(clippy::too_many_lines)]
// On docs.rs, each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod codec;
mod engine;
mod error;
mod finite;
mod instance;
mod journal;
#[cfg(feature = "encryption")]
mod keyring;
mod lock;
mod metrics;
mod model;
mod names;
mod panic;
pub mod queue;
mod quiet;
mod random;
mod run;
pub mod schedule;
mod seal;
mod seeded;
#[doc(hidden)]
pub mod store;
pub mod testing;
pub mod time;
mod workflow;

pub use crate::engine::start::{StartOn, StartOptions};
pub use crate::engine::{Engine, EngineBuilder};
pub use crate::error::failure::{
    Failure, FailureKind, Permanent, StepError, StepFailed, WaitError, WorkflowError,
};
pub use crate::error::{Error, Result};
pub use crate::instance::send::{EventSender, Sent};
pub use crate::instance::{Instance, Run};
#[cfg(feature = "encryption")]
pub use crate::keyring::{KEY_BYTES, Keyring};
pub use crate::model::status::Status;
pub use crate::names::id::InstanceId;
pub use crate::seal::{Codec, CodecError, Sealed};
pub use crate::workflow::child::ChildFailed;
pub use crate::workflow::compensation::{
    BoxFuture, RollbackContext, RollbackInput, RollbackRegistration,
};
pub use crate::workflow::config::{Backoff, MAX_RETRIES, StepConfig};
pub use crate::workflow::context::WorkflowContext;
pub use crate::workflow::key::{IdempotencyKey, StepContext};
pub use crate::workflow::service::Service;
pub use crate::workflow::{FnWorkflow, RollbackOrder, Workflow, WorkflowFuture, workflow_fn};

#[cfg(feature = "macros")]
pub use saga_macros::{rollback, step, workflow};

/// Finding and looking at instances: listing with filters and pages,
/// counts, an instance's history, published values and inspection, and
/// subscriptions to lifecycle events.
pub mod inspect {
    pub use crate::engine::counts::InstanceCounts;
    pub use crate::engine::listing::{InstancePage, UnreadableInstance};
    pub use crate::engine::subscription::{RecvError, Subscription};
    pub use crate::instance::filter::{Cursor, ListFilter, MAX_PAGE, Page};
    pub use crate::instance::inspect::{
        CompensationOutcome, InspectedChild, InspectedCompensation, InspectedSleep, InspectedSlot,
        InspectedStep, InspectedWait, Inspection, PayloadView, PendingEvent, PublishedValue,
        REDACTED, RejectedEvent, RememberedEventId, StepState, WaitState,
    };
    pub use crate::instance::published::Published;
    pub use crate::instance::{InstanceInfo, Owner};
    pub use crate::journal::tags::{MAX_TAG_VALUE_BYTES, MAX_TAGS};
    pub use crate::model::history::{Event, EventKind};
    pub use crate::store::PageOrder;
}

/// What [`WorkflowContext`]'s durable calls return: their futures, and the
/// [`Update`](context::Update) a workflow takes and replies to, for code
/// that names their types (to store one, or to pass it on).
pub mod context {
    pub use crate::workflow::child::ChildCall;
    pub use crate::workflow::continuation::ContinueAsNew;
    pub use crate::workflow::step::StepFuture;
    pub use crate::workflow::updates::Update;
    pub use crate::workflow::wait::EventWaitCall;
}

/// What a workflow file needs: `use saga_runtime::prelude::*;`.
pub mod prelude {
    pub use crate::inspect::{ListFilter, Page};
    pub use crate::queue::Queue;
    pub use crate::schedule::Schedule;
    pub use crate::{
        Backoff, ChildFailed, Engine, Error, Failure, FailureKind, IdempotencyKey, Instance,
        Permanent, RollbackContext, RollbackInput, RollbackRegistration, Sent, Service, Status,
        StepConfig, StepContext, StepError, StepFailed, WaitError, Workflow, WorkflowContext,
        WorkflowError, WorkflowFuture, workflow_fn,
    };
    #[cfg(feature = "macros")]
    pub use saga_macros::{rollback, step, workflow};
    pub use serde::{Deserialize, Serialize};
}

#[doc(hidden)]
pub mod __private {
    pub use crate::workflow::child::{ChildNeed, child_need};
    pub use crate::workflow::macro_support::*;
    pub use ::core;
    pub use ::serde;
    pub use ::serde_json;
    pub use ::std;

    /// Starts a step now (its start order is the call order), recording
    /// its `inputs` (from [`step_inputs`]) in its start record, and returns
    /// the future of its result.
    pub fn start_step<T, F, Fut>(
        ctx: &crate::WorkflowContext,
        name: &'static str,
        config: crate::StepConfig,
        read_only: bool,
        inputs: StepInputs,
        body: F,
        rollback: Option<crate::RollbackRegistration<T>>,
    ) -> crate::context::StepFuture<T>
    where
        T: ::serde::Serialize + ::serde::de::DeserializeOwned + Send + 'static,
        F: FnMut(crate::StepContext) -> Fut + Send + 'static,
        Fut: ::std::future::Future<Output = Result<T, crate::StepError>> + Send + 'static,
    {
        let _ = read_only;
        crate::workflow::step::start_step(ctx, name, None, config, inputs, body, rollback)
    }
}

/// Types users hold across `.await` must stay `Send` (and `Sync` where
/// shared), or every user's spawned future breaks.
#[allow(dead_code)]
fn compile_time_assertions() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Engine>();
    send_sync::<Instance>();
    send_sync::<WorkflowContext>();
    send_sync::<IdempotencyKey>();
    send_sync::<StepContext>();
    send_sync::<Error>();
    send::<context::StepFuture<u64>>();
    send::<context::ChildCall<u64>>();
    send::<context::EventWaitCall<u64>>();
    send::<context::ContinueAsNew<u64>>();
    send::<inspect::Subscription>();
    send_sync::<testing::TestClock>();
    send::<schedule::Schedule>();
    send_sync::<schedule::Tick>();
}
