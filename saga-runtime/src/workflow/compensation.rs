//! A step's compensation as workflow code registers it: the handler, its
//! retry settings, and what each attempt is given. `saga` runs them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::codec::Payload;
use crate::error::failure::{Failure, StepError};
use crate::workflow::config::StepConfig;
use crate::workflow::key::IdempotencyKey;
use crate::workflow::service::{Service, Services};

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

type Handler<T> = Box<dyn FnMut(RollbackInput<T>) -> BoxFuture<Result<(), StepError>> + Send>;

/// A step's compensation: its retry configuration and the handler. The
/// `#[step(rollback = ..)]` macro builds it; by hand it goes to
/// [`WorkflowContext::step_with_rollback`](crate::WorkflowContext::step_with_rollback).
pub struct RollbackRegistration<T> {
    config: StepConfig,
    handler: Handler<T>,
}

impl<T: DeserializeOwned + Send + 'static> RollbackRegistration<T> {
    /// A compensation retried as `config` says, running `handler` for each
    /// attempt.
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// let refund = RollbackRegistration::new(StepConfig::default(), |input: RollbackInput<u64>| {
    ///     Box::pin(async move {
    ///         let ctx = input.context();
    ///         if let Some(charge) = ctx.output() {
    ///             // payments.refund(*charge, ctx.key().as_str()).await?;
    ///             let _ = charge;
    ///         }
    ///         Ok(())
    ///     }) as saga_runtime::BoxFuture<Result<(), StepError>>
    /// });
    /// # let _ = refund;
    /// ```
    pub fn new<H>(config: StepConfig, handler: H) -> Self
    where
        H: FnMut(RollbackInput<T>) -> BoxFuture<Result<(), StepError>> + Send + 'static,
    {
        RollbackRegistration {
            config,
            handler: Box::new(handler),
        }
    }
}

/// What one attempt of a compensation is given; owns the values that its
/// [`RollbackContext`] lends to the handler.
pub struct RollbackInput<T> {
    output: Option<T>,
    cause: Failure,
    key: IdempotencyKey,
    step_key: IdempotencyKey,
    attempt: u32,
    services: Arc<Services>,
}

impl<T> RollbackInput<T> {
    /// The service of type `T` provided to the engine, as
    /// [`StepContext::service`](crate::StepContext::service).
    pub fn service<S: Send + Sync + 'static>(&self) -> Result<Service<S>, StepError> {
        self.services.get::<S>()
    }

    /// The context to hand to the handler.
    pub fn context(&self) -> RollbackContext<'_, T> {
        RollbackContext {
            output: self.output.as_ref(),
            cause: &self.cause,
            key: &self.key,
            step_key: &self.step_key,
            attempt: self.attempt,
            services: &self.services,
        }
    }
}

/// What a rollback handler knows.
pub struct RollbackContext<'a, T> {
    output: Option<&'a T>,
    cause: &'a Failure,
    key: &'a IdempotencyKey,
    step_key: &'a IdempotencyKey,
    attempt: u32,
    services: &'a Services,
}

impl<'a, T> RollbackContext<'a, T> {
    /// The step's stored output; `None` when the step failed or was still
    /// running when the workflow failed (it may still have had an effect:
    /// compensate by key).
    pub fn output(&self) -> Option<&'a T> {
        self.output
    }

    /// The error that failed the workflow (`Display` gives its message).
    /// When the workflow returned its own error type, `cause().downcast::<E>()`
    /// gives it back; one handler may serve several workflows, each with its
    /// own error type.
    pub fn cause(&self) -> &'a Failure {
        self.cause
    }

    /// The compensation's own idempotency key,
    /// `"{instance}:rollback:{step}"`, the same on every attempt and replay.
    pub fn key(&self) -> &'a IdempotencyKey {
        self.key
    }

    /// The idempotency key its step's attempts were given,
    /// `"{instance}:{step}"`. When [`output`](RollbackContext::output) is
    /// `None` the step may still have had its effect (its reply was lost,
    /// its last attempt timed out after the callee acted): ask the callee
    /// what it did under this key, and undo that.
    pub fn step_key(&self) -> &'a IdempotencyKey {
        self.step_key
    }

    /// The attempt number, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The service of type `S` provided to the engine, as
    /// [`StepContext::service`](crate::StepContext::service).
    pub fn service<S: Send + Sync + 'static>(&self) -> Result<Service<S>, StepError> {
        self.services.get::<S>()
    }
}

/// A compensation with its step's type erased.
pub(crate) trait ErasedRollback: Send {
    fn config(&self) -> StepConfig;
    /// Why this compensation cannot run at all (it could not be rebuilt),
    /// for one that stands in for a missing handler.
    fn unbuildable(&self) -> Option<&str> {
        None
    }
    fn attempt(
        &mut self,
        output: Option<&Payload>,
        cause: &Failure,
        key: &IdempotencyKey,
        step_key: &IdempotencyKey,
        attempt: u32,
        services: &Arc<Services>,
    ) -> std::result::Result<BoxFuture<Result<(), StepError>>, String>;
}

impl<T: DeserializeOwned + Send + 'static> ErasedRollback for RollbackRegistration<T> {
    fn config(&self) -> StepConfig {
        self.config
    }

    fn attempt(
        &mut self,
        output: Option<&Payload>,
        cause: &Failure,
        key: &IdempotencyKey,
        step_key: &IdempotencyKey,
        attempt: u32,
        services: &Arc<Services>,
    ) -> std::result::Result<BoxFuture<Result<(), StepError>>, String> {
        let output = match output {
            Some(payload) => Some(payload.decode::<T>().map_err(|detail| {
                format!(
                    "the step's stored output does not decode as `{}`: {detail}",
                    std::any::type_name::<T>()
                )
            })?),
            None => None,
        };
        Ok((self.handler)(RollbackInput {
            output,
            cause: cause.clone(),
            key: key.clone(),
            step_key: step_key.clone(),
            attempt,
            services: services.clone(),
        }))
    }
}

/// Stands in for a compensation that could not be rebuilt: recorded as
/// failed, with the reason, without an attempt.
pub(crate) struct Unbuildable(pub(crate) String);

impl ErasedRollback for Unbuildable {
    fn config(&self) -> StepConfig {
        StepConfig::new()
    }

    fn unbuildable(&self) -> Option<&str> {
        Some(&self.0)
    }

    fn attempt(
        &mut self,
        _output: Option<&Payload>,
        _cause: &Failure,
        _key: &IdempotencyKey,
        _step_key: &IdempotencyKey,
        _attempt: u32,
        _services: &Arc<Services>,
    ) -> std::result::Result<BoxFuture<Result<(), StepError>>, String> {
        Err(self.0.clone())
    }
}

/// A compensation registered by a started step.
pub(crate) struct Registered {
    pub(crate) index: u32,
    pub(crate) step: String,
    pub(crate) occurrence: u32,
    /// The generation of the step's slot; the compensation's key carries it.
    pub(crate) generation: u32,
    pub(crate) handler: Box<dyn ErasedRollback>,
}

impl Registered {
    /// A compensation whose handler's type is erased already (rebuilt from
    /// history, or standing in for one that could not be).
    pub(crate) fn erased(
        index: u32,
        step: &str,
        occurrence: u32,
        generation: u32,
        handler: Box<dyn ErasedRollback>,
    ) -> Self {
        Registered {
            index,
            step: step.to_owned(),
            occurrence,
            generation,
            handler,
        }
    }

    pub(crate) fn new<T: DeserializeOwned + Send + 'static>(
        index: u32,
        step: &str,
        occurrence: u32,
        generation: u32,
        rollback: RollbackRegistration<T>,
    ) -> Self {
        Registered {
            index,
            step: step.to_owned(),
            occurrence,
            generation,
            handler: Box::new(rollback),
        }
    }
}
