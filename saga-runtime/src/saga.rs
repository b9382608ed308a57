//! Saga rollback: compensations registered by steps when they start, run
//! in reverse step-start order when the workflow fails for good, each
//! durable (started and ended in history), so a crash mid-rollback resumes
//! where it stopped and never runs a finished compensation again.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::attempt::run_attempt;
use crate::clock::{add_millis, from_millis};
use crate::codec::decode_payload;
use crate::config::StepConfig;
use crate::context::Shared;
use crate::error::Result;
use crate::failure::{Failure, FailureKind, StepError};
use crate::history::EventKind;
use crate::record::{RollbackRecord, RollbackState, SlotRecord, SlotState};
use crate::step::IdempotencyKey;
use crate::store::Op;

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
    cause: String,
    key: IdempotencyKey,
    attempt: u32,
}

impl<T> RollbackInput<T> {
    /// The context to hand to the handler.
    pub fn context(&self) -> RollbackContext<'_, T> {
        RollbackContext {
            output: self.output.as_ref(),
            cause: &self.cause,
            key: &self.key,
            attempt: self.attempt,
        }
    }
}

/// What a rollback handler knows.
pub struct RollbackContext<'a, T> {
    output: Option<&'a T>,
    cause: &'a str,
    key: &'a IdempotencyKey,
    attempt: u32,
}

impl<'a, T> RollbackContext<'a, T> {
    /// The step's stored output; `None` when the step failed or was still
    /// running when the workflow failed (it may still have had an effect:
    /// compensate by key).
    pub fn output(&self) -> Option<&'a T> {
        self.output
    }

    /// The error that failed the workflow.
    pub fn cause(&self) -> &'a str {
        self.cause
    }

    /// The compensation's own idempotency key,
    /// `"{instance}:rollback:{step}"`, the same on every attempt and replay.
    pub fn key(&self) -> &'a IdempotencyKey {
        self.key
    }

    /// The attempt number, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

/// A compensation with its step's type erased.
trait ErasedRollback: Send {
    fn config(&self) -> StepConfig;
    fn attempt(
        &mut self,
        output: Option<&[u8]>,
        cause: &str,
        key: &IdempotencyKey,
        attempt: u32,
    ) -> std::result::Result<BoxFuture<Result<(), StepError>>, String>;
}

impl<T: DeserializeOwned + Send + 'static> ErasedRollback for RollbackRegistration<T> {
    fn config(&self) -> StepConfig {
        self.config
    }

    fn attempt(
        &mut self,
        output: Option<&[u8]>,
        cause: &str,
        key: &IdempotencyKey,
        attempt: u32,
    ) -> std::result::Result<BoxFuture<Result<(), StepError>>, String> {
        let output = match output {
            Some(bytes) => Some(decode_payload::<T>(bytes).map_err(|detail| {
                format!(
                    "the step's stored output does not decode as `{}`: {detail}",
                    std::any::type_name::<T>()
                )
            })?),
            None => None,
        };
        Ok((self.handler)(RollbackInput {
            output,
            cause: cause.to_owned(),
            key: key.clone(),
            attempt,
        }))
    }
}

/// A compensation registered by a started step.
pub(crate) struct Registered {
    pub(crate) index: u32,
    pub(crate) step: String,
    pub(crate) occurrence: u32,
    handler: Box<dyn ErasedRollback>,
}

impl Registered {
    pub(crate) fn new<T: DeserializeOwned + Send + 'static>(
        index: u32,
        step: &str,
        occurrence: u32,
        rollback: RollbackRegistration<T>,
    ) -> Self {
        Registered {
            index,
            step: step.to_owned(),
            occurrence,
            handler: Box::new(rollback),
        }
    }
}

/// Runs the compensations of every started step that has one, in reverse
/// start order, skipping those history says finished. Returns the failure
/// of the compensation that gave up, if one did (the rest did not run).
pub(crate) async fn compensate(
    shared: &Shared,
    handlers: Vec<Registered>,
    cause: &Failure,
) -> Result<Option<Failure>> {
    let engine = &shared.engine;
    let slots: BTreeMap<u32, SlotRecord> = engine.store.slots(&shared.id)?.into_iter().collect();
    let done: BTreeMap<u32, RollbackRecord> =
        engine.store.rollbacks(&shared.id)?.into_iter().collect();
    let mut handlers: BTreeMap<u32, Registered> =
        handlers.into_iter().map(|h| (h.index, h)).collect();
    // Eligible: started steps with a compensation, whether history has their
    // start (a crash since) or only this run does (a task not yet begun).
    let mut eligible: Vec<u32> = slots
        .iter()
        .filter(|(_, s)| s.has_rollback)
        .map(|(i, _)| *i)
        .chain(handlers.keys().copied())
        .collect();
    eligible.sort_unstable_by(|a, b| b.cmp(a));
    eligible.dedup();

    for index in eligible {
        let previous = done.get(&index).map(|r| &r.state);
        let resumed_after = match previous {
            Some(RollbackState::Completed) => continue,
            // It gave up before a crash that came before the instance's
            // end was stored: it stays given up, the rest stay skipped.
            Some(RollbackState::Failed { error }) => {
                let step = done.get(&index).map(|r| r.step.clone()).unwrap_or_default();
                return Ok(Some(gave_up(step, error)));
            }
            Some(RollbackState::Running { attempts }) => Some(*attempts),
            None => None,
        };
        let slot = slots.get(&index);
        let Some(mut handler) = handlers.remove(&index) else {
            let (step, occurrence) = slot
                .map(|s| (s.name.clone(), s.occurrence))
                .unwrap_or_else(|| (format!("#{index}"), 0));
            let error = format!(
                "it could not be rebuilt: replaying the workflow code did not reach step {step:?} again"
            );
            record_failure(shared, index, &step, occurrence, &error)?;
            return Ok(Some(gave_up(step, &error)));
        };
        let output = slot.and_then(|s| match &s.state {
            SlotState::Completed { output, .. } => Some(output.as_slice()),
            _ => None,
        });
        if let Err(error) =
            run_compensation(shared, &mut handler, output, cause, resumed_after).await?
        {
            record_failure(shared, index, &handler.step, handler.occurrence, &error)?;
            return Ok(Some(gave_up(handler.step, &error)));
        }
    }
    Ok(None)
}

/// The rollback failure of the compensation of `step`, which gave up with
/// `error`.
fn gave_up(step: String, error: &str) -> Failure {
    let message = format!("the compensation of step {step:?} failed: {error}");
    Failure::new(FailureKind::Rollback { step }, message)
}

/// Runs one compensation's attempts; `Ok(Err(message))` when it gave up.
/// `resumed_after` is the number of attempts that failed before a crash,
/// when the compensation had started then.
async fn run_compensation(
    shared: &Shared,
    handler: &mut Registered,
    output: Option<&[u8]>,
    cause: &Failure,
    resumed_after: Option<u32>,
) -> Result<std::result::Result<(), String>> {
    let engine = &shared.engine;
    let config = handler.handler.config();
    let key = IdempotencyKey::rollback(&shared.id, &handler.step, handler.occurrence);
    let put = |kind: Option<EventKind>, state: RollbackState| {
        shared.write(|txn| {
            if let Some(kind) = kind {
                txn.event(kind);
            }
            txn.put(Op::PutRollback(
                shared.id.to_string(),
                handler.index,
                RollbackRecord {
                    step: handler.step.clone(),
                    occurrence: handler.occurrence,
                    state,
                },
            ));
            Ok(())
        })
    };
    let mut attempts = match resumed_after {
        // Its start is durable before it runs: after a crash it resumes
        // (with the same key), it does not start over.
        None => {
            put(
                Some(EventKind::RollbackStepStarted {
                    step: handler.step.clone(),
                    occurrence: handler.occurrence,
                }),
                RollbackState::Running { attempts: 0 },
            )?;
            engine.flush().await?;
            0
        }
        Some(attempts) => {
            // When the next retry was due is not stored: wait the whole
            // delay again rather than hammer a callee that was failing.
            if attempts > 0 {
                let at = add_millis(engine.now_millis(), config.delay_after(attempts));
                engine.clock.sleep_until(from_millis(at)).await;
            }
            attempts
        }
    };
    loop {
        attempts += 1;
        let span = tracing::info_span!(
            "saga.rollback",
            instance = %shared.id,
            workflow = %shared.workflow,
            step = %handler.step,
            occurrence = handler.occurrence,
            attempt = attempts,
        );
        let result = match handler
            .handler
            .attempt(output, cause.message(), &key, attempts)
        {
            Ok(future) => {
                run_attempt(&engine.clock, config.timeout, future)
                    .instrument(span)
                    .await
            }
            Err(decode) => Err(StepError::fatal(decode)),
        };
        match result {
            Ok(()) => {
                put(
                    Some(EventKind::RollbackStepCompleted {
                        step: handler.step.clone(),
                        occurrence: handler.occurrence,
                    }),
                    RollbackState::Completed,
                )?;
                engine.flush().await?;
                return Ok(Ok(()));
            }
            Err(error) if error.is_retryable() && config.allows_retry_after(attempts) => {
                let delay = config.delay_after(attempts);
                tracing::warn!(instance = %shared.id, step = %handler.step, attempt = attempts, error = %error, ?delay, "compensation attempt failed; retrying");
                put(None, RollbackState::Running { attempts })?;
                let at = add_millis(engine.now_millis(), delay);
                engine.clock.sleep_until(from_millis(at)).await;
            }
            Err(error) => return Ok(Err(error.to_string())),
        }
    }
}

fn record_failure(
    shared: &Shared,
    index: u32,
    step: &str,
    occurrence: u32,
    error: &str,
) -> Result<()> {
    shared.write(|txn| {
        txn.event(EventKind::RollbackStepFailed {
            step: step.to_owned(),
            occurrence,
            error: error.to_owned(),
        });
        txn.put(Op::PutRollback(
            shared.id.to_string(),
            index,
            RollbackRecord {
                step: step.to_owned(),
                occurrence,
                state: RollbackState::Failed {
                    error: error.to_owned(),
                },
            },
        ));
        Ok(())
    })
}
