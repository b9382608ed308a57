//! What a workflow is to the engine.
//!
//! This folder holds what workflow code calls and runs on: the context
//! (`context`), steps (`step`, `retry`, `key`, `config`, `service`), durable
//! waits (`wait`), child workflows (`child`), compensation handlers as steps register them
//! (`compensation`, `step_table`), what a run shares with its step tasks
//! (`engine_core`, `live`, `in_flight`), and the support of the macros'
//! generated code (`macro_support`).

pub(crate) mod child;
pub(crate) mod compensation;
pub(crate) mod config;
pub(crate) mod context;
pub(crate) mod continuation;
pub(crate) mod engine_core;
pub(crate) mod fault;
pub(crate) mod in_flight;
pub(crate) mod key;
pub(crate) mod kin;
pub(crate) mod live;
pub(crate) mod macro_support;
pub(crate) mod patch;
pub(crate) mod publishing;
pub(crate) mod retry;
pub(crate) mod service;
pub(crate) mod step;
pub(crate) mod step_table;
pub(crate) mod tagging;
pub(crate) mod updates;
pub(crate) mod wait;

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::Payload;
use crate::error::failure::{Failure, FailureKind, WorkflowError};
use crate::workflow::context::WorkflowContext;
use crate::workflow::service::ServiceNeed;

/// The future a workflow's `run` returns.
pub type WorkflowFuture<O> =
    Pin<Box<dyn Future<Output = Result<O, WorkflowError>> + Send + 'static>>;

/// A workflow: a name that never changes, an input, an output, and the code.
///
/// `#[workflow(name = "...")]` implements it for you; by hand, or with
/// [`workflow_fn`], it reads:
///
/// ```
/// use saga_runtime::prelude::*;
///
/// struct Greet;
///
/// impl Workflow for Greet {
///     type Input = String;
///     type Output = String;
///     fn name(&self) -> &'static str { "greet" }
///     fn run(&self, ctx: WorkflowContext, who: String) -> WorkflowFuture<String> {
///         Box::pin(async move {
///             let greeting = ctx
///                 .step("compose", StepConfig::default(), move |_key| {
///                     let who = who.clone();
///                     async move { Ok(format!("hello, {who}")) }
///                 })
///                 .await?;
///             Ok(greeting)
///         })
///     }
/// }
/// ```
pub trait Workflow: Send + Sync + 'static {
    /// What `engine.start` takes.
    type Input: Serialize + DeserializeOwned + Send + 'static;
    /// What the instance's `result()` gives.
    type Output: Serialize + DeserializeOwned + Send + 'static;

    /// The name stored with every instance. Never change it while
    /// instances run: recovery finds the code by this name.
    fn name(&self) -> &'static str;

    /// The workflow code. It is run again from the start on every recovery
    /// (replay): completed steps return their stored outputs instead of
    /// running, so it must make the same durable calls in the same order.
    fn run(&self, ctx: WorkflowContext, input: Self::Input) -> WorkflowFuture<Self::Output>;

    /// The services its steps and their rollback handlers take, checked
    /// by `register` and `start`. `#[workflow]` lists those of the
    /// `#[step]` functions it calls; by hand, list what the steps ask
    /// their `StepContext` for (or leave it empty: a missing service then
    /// fails the step that asks for it).
    fn services(&self) -> Vec<ServiceNeed> {
        Vec::new()
    }

    /// The `#[step]` functions the workflow calls, for compensating a
    /// `Blocked` instance from its history alone. `#[workflow]` fills it;
    /// a hand-written workflow leaves it empty (its Blocked instances are
    /// compensated by replaying its code, answered from history by name).
    #[doc(hidden)]
    fn steps(&self) -> Vec<crate::workflow::step_table::StepNames> {
        Vec::new()
    }

    /// The child workflows it starts (`ctx.child`), checked by `register`:
    /// a parent whose children's workflows are not registered is refused.
    /// `#[workflow]` lists its `ctx.child` calls; by hand, list them (or
    /// leave it empty: a child whose workflow is not registered then parks
    /// the parent `Blocked` when it is called).
    fn children(&self) -> Vec<crate::workflow::child::ChildNeed> {
        Vec::new()
    }

    /// The order its compensations run in when it rolls back:
    /// `#[workflow(.., rollback = "concurrent")]` makes it
    /// [`RollbackOrder::Concurrent`]; the default is
    /// [`RollbackOrder::Sequential`].
    fn rollback_order(&self) -> RollbackOrder {
        RollbackOrder::Sequential
    }

    /// The updates it takes (`ctx.take_update`), by name:
    /// `#[workflow(.., updates = ["approve"])]` lists them. An update of
    /// another name sent to its instances is refused at once
    /// ([`Error::UpdateNotDeclared`](crate::Error::UpdateNotDeclared)).
    fn updates(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// Checks an update's request before anything is recorded:
    /// `#[workflow(.., validator = check_update)]` calls
    /// `check_update(update, request)`. An `Err` refuses the update with
    /// [`Error::UpdateRejected`](crate::Error::UpdateRejected), which
    /// carries the reason. The default accepts every request.
    fn validate_update(&self, update: &str, request: &serde_json::Value) -> Result<(), String> {
        let _ = (update, request);
        Ok(())
    }
}

/// The order a workflow's compensations run in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RollbackOrder {
    /// One at a time, in reverse start order: the last step started is
    /// compensated first (the seeds' rule, and the default).
    #[default]
    Sequential,
    /// In reverse happens-before order: when step A ended before step B
    /// started, B's compensation completes before A's begins; steps whose
    /// lifetimes overlapped (started together in a `join!`) are compensated
    /// at once. A compensation that gives up stops those not yet begun;
    /// those under way finish and are recorded.
    Concurrent,
}

/// A workflow made of a name and an async closure.
///
/// ```
/// use saga_runtime::prelude::*;
///
/// let double = workflow_fn("double", |ctx: WorkflowContext, n: u64| async move {
///     let doubled = ctx
///         .step("double", StepConfig::default(), move |_key| async move { Ok(n * 2) })
///         .await?;
///     Ok::<_, WorkflowError>(doubled)
/// });
/// # let _ = double;
/// ```
pub fn workflow_fn<I, O, F, Fut>(name: &'static str, run: F) -> FnWorkflow<F, I, O, Fut>
where
    I: Serialize + DeserializeOwned + Send + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
    F: Fn(WorkflowContext, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, WorkflowError>> + Send + 'static,
{
    FnWorkflow {
        name,
        run,
        types: PhantomData,
    }
}

/// The workflow [`workflow_fn`] makes. `Copy` when the closure is.
pub struct FnWorkflow<F, I, O, Fut> {
    name: &'static str,
    run: F,
    types: PhantomData<fn(I) -> (O, Fut)>,
}

impl<F: Clone, I, O, Fut> Clone for FnWorkflow<F, I, O, Fut> {
    fn clone(&self) -> Self {
        FnWorkflow {
            name: self.name,
            run: self.run.clone(),
            types: PhantomData,
        }
    }
}

impl<F: Copy, I, O, Fut> Copy for FnWorkflow<F, I, O, Fut> {}

impl<I, O, F, Fut> Workflow for FnWorkflow<F, I, O, Fut>
where
    I: Serialize + DeserializeOwned + Send + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
    F: Fn(WorkflowContext, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, WorkflowError>> + Send + 'static,
{
    type Input = I;
    type Output = O;

    fn name(&self) -> &'static str {
        self.name
    }

    fn run(&self, ctx: WorkflowContext, input: I) -> WorkflowFuture<O> {
        Box::pin((self.run)(ctx, input))
    }
}

/// A workflow with its types erased, as the engine's registry holds it.
pub(crate) trait ErasedWorkflow: Send + Sync + 'static {
    fn workflow_name(&self) -> &'static str;

    /// The Rust type of the workflow, to tell two workflows of one name apart.
    fn workflow_type(&self) -> std::any::TypeId;

    fn services_needed(&self) -> Vec<ServiceNeed>;

    fn step_table(&self) -> Vec<crate::workflow::step_table::StepNames>;

    fn children_needed(&self) -> Vec<crate::workflow::child::ChildNeed>;

    fn order_of_rollback(&self) -> RollbackOrder;

    fn updates_taken(&self) -> Vec<&'static str>;

    fn update_valid(&self, update: &str, request: &serde_json::Value) -> Result<(), String>;

    fn run_erased(
        &self,
        ctx: WorkflowContext,
        input: &Payload,
    ) -> Pin<Box<dyn Future<Output = Result<Payload, Failure>> + Send + 'static>>;
}

impl<W: Workflow> ErasedWorkflow for W {
    fn workflow_name(&self) -> &'static str {
        self.name()
    }

    fn workflow_type(&self) -> std::any::TypeId {
        std::any::TypeId::of::<W>()
    }

    fn services_needed(&self) -> Vec<ServiceNeed> {
        self.services()
    }

    fn step_table(&self) -> Vec<crate::workflow::step_table::StepNames> {
        self.steps()
    }

    fn children_needed(&self) -> Vec<crate::workflow::child::ChildNeed> {
        self.children()
    }

    fn order_of_rollback(&self) -> RollbackOrder {
        self.rollback_order()
    }

    fn updates_taken(&self) -> Vec<&'static str> {
        self.updates()
    }

    fn update_valid(&self, update: &str, request: &serde_json::Value) -> Result<(), String> {
        self.validate_update(update, request)
    }

    fn run_erased(
        &self,
        ctx: WorkflowContext,
        input: &Payload,
    ) -> Pin<Box<dyn Future<Output = Result<Payload, Failure>> + Send + 'static>> {
        // Sealed with a key this engine lacks: parked, not failed (a
        // failure would compensate an instance that is only unreadable
        // here); an engine with the key resumes it.
        if let Some(key) = input.sealed_key() {
            ctx.run.scope.fail(Failure::new(
                FailureKind::Decode,
                format!(
                    "the stored workflow input does not decode: {}",
                    crate::codec::missing_key_detail(key)
                ),
            ));
            return Box::pin(std::future::pending());
        }
        // A stored input that no longer decodes (the input type changed
        // under running instances) parks the instance as any other stored
        // value that no longer decodes: a release whose type reads it
        // again resumes it.
        let input = match input.decode::<W::Input>() {
            Ok(input) => input,
            Err(detail) => {
                ctx.run.scope.fail(Failure::new(
                    FailureKind::Decode,
                    format!(
                        "stored input does not decode as `{}`: {detail}",
                        std::any::type_name::<W::Input>()
                    ),
                ));
                return Box::pin(std::future::pending());
            }
        };
        let max = ctx.run.scope.core.max_payload;
        let run = self.run(ctx, input);
        Box::pin(async move {
            let output = run.await.map_err(|error| {
                let failure = error.into_failure();
                // A typed error over the payload limit keeps its message only.
                match failure.value() {
                    Some(value) if value.len() > max => failure.with_value(None),
                    _ => failure,
                }
            })?;
            let payload = Payload::encode(&output).map_err(|detail| {
                Failure::new(
                    FailureKind::Workflow,
                    format!("could not encode the workflow output as JSON: {detail}"),
                )
            })?;
            if payload.len() > max {
                return Err(Failure::new(
                    FailureKind::Workflow,
                    format!(
                        "the workflow output is {} bytes, over the limit of {max}; return a reference instead",
                        payload.len()
                    ),
                ));
            }
            if let Err(detail) = payload.decode::<W::Output>() {
                return Err(Failure::new(
                    FailureKind::Workflow,
                    format!(
                        "the workflow output `{}` does not survive the store: encoded as JSON it does not decode back ({detail})",
                        std::any::type_name::<W::Output>()
                    ),
                ));
            }
            Ok(payload)
        })
    }
}
