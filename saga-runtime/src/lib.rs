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
//! use saga_runtime::TestClock;
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
//!   [`Instance`] (control one instance), [`Queue`], [`Schedule`], and
//!   [`testing`]. `use saga_runtime::prelude::*;` brings what a workflow
//!   file needs.
//! - **Features**: `macros` (default), `postgres` (`EngineBuilder::connect`),
//!   `encryption` (`Keyring`), `anyhow`. On docs.rs each feature-gated item
//!   says which it needs.
//! - **The `saga` command** to see and control instances: the `saga-cli`
//!   crate.
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
mod queue;
mod quiet;
mod random;
mod run;
mod schedule;
mod seal;
mod seeded;
#[doc(hidden)]
pub mod store;
pub mod testing;
mod time;
mod workflow;

pub use crate::engine::counts::{InstanceCounts, QueueDepth};
pub use crate::engine::listing::{InstancePage, UnreadableInstance};
pub use crate::engine::start::{StartOn, StartOptions};
pub use crate::engine::subscription::{RecvError, Subscription};
pub use crate::engine::{Engine, EngineBuilder};
pub use crate::error::failure::{
    Failure, FailureKind, Permanent, StepError, StepFailed, WaitError, WorkflowError,
};
pub use crate::error::{Error, Result};
pub use crate::instance::filter::{Cursor, ListFilter, MAX_PAGE, Page};
pub use crate::instance::published::Published;
pub use crate::instance::send::{EventSender, Sent};
pub use crate::instance::{Instance, InstanceInfo, Owner, Run};
pub use crate::journal::tags::{MAX_TAG_VALUE_BYTES, MAX_TAGS};
#[cfg(feature = "encryption")]
pub use crate::keyring::{KEY_BYTES, Keyring};
pub use crate::model::history::{Event, EventKind};
pub use crate::model::status::Status;
pub use crate::names::id::InstanceId;
pub use crate::queue::{Queue, QueueLimits};
pub use crate::schedule::control::{NEXT_FIRES_LISTED, ScheduleInfo, Schedules};
pub use crate::schedule::{CatchUp, MAX_SCHEDULE_NAME, Overlap, Schedule, Tick};
pub use crate::seal::{Codec, CodecError, Sealed};
pub use crate::store::PageOrder;
pub use crate::time::clock::{Clock, Sleep, SystemClock, TestClock};
pub use crate::time::duration::IntoDuration;
pub use crate::workflow::child::{ChildCall, ChildFailed, ChildNeed};
pub use crate::workflow::compensation::{
    BoxFuture, RollbackContext, RollbackInput, RollbackRegistration,
};
pub use crate::workflow::config::{Backoff, MAX_RETRIES, StepConfig};
pub use crate::workflow::context::WorkflowContext;
pub use crate::workflow::continuation::ContinueAsNew;
pub use crate::workflow::key::{IdempotencyKey, StepContext};
pub use crate::workflow::service::Service;
pub use crate::workflow::step::StepFuture;
pub use crate::workflow::updates::Update;
pub use crate::workflow::wait::EventWaitCall;
pub use crate::workflow::{FnWorkflow, RollbackOrder, Workflow, WorkflowFuture, workflow_fn};

#[cfg(feature = "macros")]
pub use saga_macros::{rollback, step, workflow};

/// What [`Instance::inspect`] reads of an instance, for tools (`saga
/// show`, a dashboard): its steps, sleeps, waits and compensations with
/// their inputs and outputs, and its pending events.
pub mod inspect {
    pub use crate::instance::inspect::{
        CompensationOutcome, InspectedChild, InspectedCompensation, InspectedSleep, InspectedSlot,
        InspectedStep, InspectedWait, Inspection, PayloadView, PendingEvent, PublishedValue,
        REDACTED, RejectedEvent, RememberedEventId, StepState, WaitState,
    };
}

/// Everything a workflow file needs: `use saga_runtime::prelude::*;`.
pub mod prelude {
    pub use crate::{
        Backoff, ChildFailed, Engine, Error, Failure, FailureKind, IdempotencyKey, Instance,
        ListFilter, Page, Permanent, Queue, RollbackContext, RollbackInput, RollbackRegistration,
        Schedule, Sent, Service, Status, StepConfig, StepContext, StepError, StepFailed, WaitError,
        Workflow, WorkflowContext, WorkflowError, WorkflowFuture, workflow_fn,
    };
    #[cfg(feature = "macros")]
    pub use saga_macros::{rollback, step, workflow};
    pub use serde::{Deserialize, Serialize};
}

/// Support for the code the macros generate. Not a public API: it changes
/// without notice.
#[doc(hidden)]
pub mod __private {
    pub use crate::workflow::child::child_need;
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
    ) -> crate::StepFuture<T>
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
    send::<StepFuture<u64>>();
    send::<ChildCall<u64>>();
    send::<EventWaitCall<u64>>();
    send::<ContinueAsNew<u64>>();
    send::<Subscription>();
    send_sync::<TestClock>();
    send::<Schedule>();
    send_sync::<Tick>();
}
