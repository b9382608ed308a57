//! Durable steps: started when called, run (with retries) in their own
//! task, their output stored and flushed before the workflow sees it, and
//! never run again once completed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::codec::Payload;
use crate::error::failure::{Failure, FailureKind, StepError, StepFailed};
use crate::journal::{Change, SlotKind, SlotState};
use crate::workflow::compensation::{Registered, RollbackRegistration};
use crate::workflow::config::StepConfig;
use crate::workflow::context::{Mode, RunScope, Slot, WorkflowContext};
use crate::workflow::fault::{self, Attempt, Site};
use crate::workflow::key::{IdempotencyKey, StepContext};
use crate::workflow::retry::{Resume, Retried, retry};

/// The result of a step call: its output, or [`StepFailed`] once it gave up.
///
/// The step started when it was called, whether or not this future is
/// polled; dropping the future does not stop it.
#[must_use = "the step runs anyway; await it to get its output"]
pub struct StepFuture<T> {
    state: State<T>,
}

enum State<T> {
    Ready(Option<Result<T, StepFailed>>),
    Running(oneshot::Receiver<Result<T, StepFailed>>),
    /// The instance is being stopped (paused, terminated, failed by the
    /// engine): this call never completes and the driver drops the workflow.
    Never,
}

// The output is moved out, never pinned.
impl<T> Unpin for StepFuture<T> {}

impl<T> StepFuture<T> {
    fn never() -> Self {
        StepFuture {
            state: State::Never,
        }
    }
}

impl<T> Future for StepFuture<T> {
    type Output = Result<T, StepFailed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.state {
            State::Ready(result) => match result.take() {
                Some(result) => Poll::Ready(result),
                None => Poll::Pending,
            },
            State::Running(receiver) => match Pin::new(receiver).poll(cx) {
                Poll::Ready(Ok(result)) => Poll::Ready(result),
                Poll::Ready(Err(_)) => {
                    this.state = State::Never;
                    Poll::Pending
                }
                Poll::Pending => Poll::Pending,
            },
            State::Never => Poll::Pending,
        }
    }
}

impl WorkflowContext {
    /// Runs `body` as a durable step named `name` (a string literal that
    /// never changes: it is the step's cache key). The body gets the step's
    /// idempotency key; it is retried as `config` says.
    ///
    /// The closure's captures are not recorded: its start record has no
    /// inputs (a `#[step]` function records its inputs as JSON).
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// # async fn demo(ctx: WorkflowContext) -> Result<(), WorkflowError> {
    /// let id: u64 = ctx
    ///     .step("create-order", StepConfig::default().retries(3), |key| async move {
    ///         // orders.create(key.as_str()).await.map_err(StepError::retryable)
    ///         Ok(7)
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn step<T, F, Fut>(
        &self,
        name: &'static str,
        config: StepConfig,
        mut body: F,
    ) -> StepFuture<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnMut(IdempotencyKey) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StepError>> + Send + 'static,
    {
        start_step(
            self,
            name,
            None,
            config,
            StepInputs::unrecorded(),
            move |step: StepContext| body(step.key),
            None,
        )
    }

    /// Like [`step`](WorkflowContext::step), the body getting the whole
    /// [`StepContext`] (attempt number, instance id, ...).
    pub fn step_with_context<T, F, Fut>(
        &self,
        name: &'static str,
        config: StepConfig,
        body: F,
    ) -> StepFuture<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnMut(StepContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StepError>> + Send + 'static,
    {
        start_step(
            self,
            name,
            None,
            config,
            StepInputs::unrecorded(),
            body,
            None,
        )
    }

    /// Like [`step`](WorkflowContext::step), with a compensation that runs
    /// if the workflow fails for good after this step started.
    pub fn step_with_rollback<T, F, Fut>(
        &self,
        name: &'static str,
        config: StepConfig,
        mut body: F,
        rollback: RollbackRegistration<T>,
    ) -> StepFuture<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnMut(IdempotencyKey) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StepError>> + Send + 'static,
    {
        start_step(
            self,
            name,
            None,
            config,
            StepInputs::unrecorded(),
            move |step: StepContext| body(step.key),
            Some(rollback),
        )
    }
}

/// A step's caller-visible inputs, encoded as JSON when it is called, for
/// its start record. Built by `#[step]` code; a `ctx.step` closure has
/// none to record.
pub struct StepInputs(Option<Result<Payload, String>>);

impl StepInputs {
    /// No inputs recorded (a hand-written `ctx.step`).
    pub(crate) fn unrecorded() -> Self {
        StepInputs(None)
    }

    /// The inputs, each encoded on its own, as the tuple of them; marked
    /// with the positions of those `#[step(redact = [..])]` names.
    pub(crate) fn encoded(inputs: impl IntoIterator<Item = EncodedInput>) -> Self {
        let mut hidden = Vec::new();
        let inputs: Result<Vec<Payload>, String> = inputs
            .into_iter()
            .enumerate()
            .map(|(position, input)| {
                if input.redacted {
                    hidden.push(position as u32);
                }
                input.encoded
            })
            .collect();
        StepInputs(Some(inputs.map(|inputs| {
            let tuple = Payload::tuple(&inputs);
            match tuple {
                Payload::Json(json) if !hidden.is_empty() => Payload::Redacted { json, hidden },
                other => other,
            }
        })))
    }

    /// What the start record of step `name` stores, or why the step
    /// cannot start: inputs that do not encode, or are over `limit` bytes.
    /// No attempt changes either, so the refusal is fatal.
    fn checked(self, name: &str, limit: usize) -> Result<Option<Payload>, StepError> {
        match self.0 {
            None => Ok(None),
            Some(Err(detail)) => Err(StepError::fatal(format!(
                "could not record the inputs of step {name:?}: {detail}"
            ))),
            Some(Ok(payload)) if payload.len() > limit => Err(StepError::fatal(format!(
                "the inputs of step {name:?} are {} bytes as JSON (stored as one array of them; \
                 the limit applies before the engine's codec encodes them), \
                 {} bytes over the limit of {limit} bytes; \
                 pass a reference (a key, a URL) instead, or raise EngineBuilder::max_payload_bytes",
                payload.len(),
                payload.len() - limit
            ))),
            Some(Ok(payload)) => Ok(Some(payload)),
        }
    }
}

/// One input of a step, encoded as JSON, or why it did not encode; and
/// whether `saga show` hides it (`#[step(redact = [..])]`).
pub struct EncodedInput {
    encoded: Result<Payload, String>,
    redacted: bool,
}

impl EncodedInput {
    /// Encodes the caller's input number `position` (from 1). A panic in
    /// its `Serialize` is an input that does not encode.
    pub(crate) fn encode<T: Serialize>(position: usize, input: &T) -> Self {
        let type_name = std::any::type_name::<T>();
        let encoded = crate::panic::catch(|| Payload::encode(input))
            .unwrap_or_else(|panic| Err(format!("its Serialize panicked: {panic}")));
        EncodedInput {
            encoded: encoded.map_err(|detail| {
                format!("input {position} (`{type_name}`) does not encode as JSON: {detail}")
            }),
            redacted: false,
        }
    }

    /// The input, stored whole (a rollback gets it), but shown as
    /// `<redacted>` by the inspection read model and `saga show`.
    pub(crate) fn redacted(mut self) -> Self {
        self.redacted = true;
        self
    }
}

/// Starts a step: takes its slot now, records its start with its inputs,
/// registers its compensation, and either answers from history or spawns
/// its task.
///
/// The start record is appended, not flushed: the flush of the step's
/// outcome covers it. A crash before then loses the start of a step in
/// flight, which replay starts again (the README, "Storage", says what
/// that leaves out).
pub(crate) fn start_step<T, F, Fut>(
    workflow: &WorkflowContext,
    name: &'static str,
    renamed_from: Option<&'static str>,
    config: StepConfig,
    inputs: StepInputs,
    body: F,
    rollback: Option<RollbackRegistration<T>>,
) -> StepFuture<T>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    F: FnMut(StepContext) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, StepError>> + Send + 'static,
{
    let ctx = &workflow.run;
    let shared = &ctx.scope;
    let Some(slot) = ctx.take_slot_renamed(SlotKind::Step, name, renamed_from) else {
        return StepFuture::never();
    };
    let forward = shared.mode == Mode::Forward;
    let recorded_state = slot.recorded.as_ref().map(|r| &r.state);
    // A pause stops the workflow before a step that is to run (anew, or
    // again after a crash): it is not started, so its compensation is not
    // registered either.
    let to_run = matches!(recorded_state, None | Some(SlotState::Running { .. }));
    if to_run && forward && shared.pause_here() {
        return StepFuture::never();
    }
    // Checked whenever the body is to run, so a step resumed after a crash
    // refuses its inputs as its first call did. A refused step never ran:
    // there is nothing for a compensation to undo.
    let (input, refused) = match to_run && forward {
        true => match inputs.checked(name, shared.core.max_payload) {
            Ok(input) => (input, None),
            Err(error) => (None, Some(error)),
        },
        false => (None, None),
    };
    let rollback = rollback.filter(|_| refused.is_none());
    // In rebuild mode only steps that history says started get their
    // handler back; a call past that point never happened.
    let started = slot.recorded.is_some();
    if !started {
        if !forward {
            return StepFuture::never();
        }
        // Recorded now, in call order, so history and rollback both see
        // steps in the order the workflow called them.
        let recorded = shared.append(Change::StepStarted {
            slot: slot.index,
            name: slot.name.to_string(),
            occurrence: slot.occurrence,
            has_rollback: rollback.is_some(),
            input,
        });
        if let Err(e) = recorded {
            shared.store_failed(e);
            return StepFuture::never();
        }
    }
    if let Some(rollback) = rollback {
        ctx.register_rollback(Registered::new(
            slot.index,
            &slot.name,
            slot.occurrence,
            slot.generation,
            rollback,
        ));
    }
    match slot.recorded.as_ref().map(|r| &r.state) {
        // A panic in the user's `Deserialize` is a value that no longer
        // decodes, like any other decode failure.
        Some(SlotState::Completed { output, .. }) => {
            match crate::panic::catch(|| output.decode::<T>())
                .unwrap_or_else(|panic| Err(format!("its Deserialize panicked: {panic}")))
            {
                Ok(value) => StepFuture {
                    state: State::Ready(Some(Ok(value))),
                },
                Err(detail) => {
                    shared.fail(Failure::new(
                    FailureKind::Decode,
                    format!(
                        "the stored output of step {name:?} does not decode as `{}`: {detail}; \
                         the step's output type changed under a running instance (keep the old type, or restart the instance)",
                        std::any::type_name::<T>()
                    ),
                ));
                    StepFuture::never()
                }
            }
        }
        // A typed error still sealed would make `downcast` answer `None`
        // where the first run got `Some`: parked, as a sealed output is.
        Some(SlotState::Failed { error, attempts }) => {
            match error.value().and_then(|value| value.sealed_key()) {
                Some(key) => {
                    shared.fail(Failure::new(
                        FailureKind::Decode,
                        format!(
                            "the stored error of step {name:?} does not decode: {}",
                            crate::codec::missing_key_detail(key)
                        ),
                    ));
                    StepFuture::never()
                }
                None => StepFuture {
                    state: State::Ready(Some(Err(StepFailed {
                        step: name.to_owned(),
                        attempts: *attempts,
                        error: StepError::clone(error),
                    }))),
                },
            }
        }
        Some(SlotState::Running { .. }) | None if forward => {
            let (done, result) = oneshot::channel();
            let task = StepTask {
                scope: shared.clone(),
                slot,
                name,
                config,
            };
            ctx.spawn(async move {
                let outcome = match refused {
                    Some(error) => task.refuse(error).await,
                    None => task.run(body).await,
                };
                if let Some(outcome) = outcome {
                    // The workflow may have dropped the call; the step ran anyway.
                    let _ = done.send(outcome);
                }
            });
            StepFuture {
                state: State::Running(result),
            }
        }
        _ => StepFuture::never(),
    }
}

struct StepTask {
    scope: Arc<RunScope>,
    slot: Slot,
    name: &'static str,
    config: StepConfig,
}

impl StepTask {
    /// Runs the attempts; `None` if the store failed (the driver has been
    /// told and stops the instance).
    async fn run<T, F, Fut>(self, mut body: F) -> Option<Result<T, StepFailed>>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnMut(StepContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StepError>> + Send + 'static,
    {
        let shared = &self.scope;
        let slot = &self.slot;
        let key = IdempotencyKey::forward(
            &shared.id,
            &slot.name,
            slot.occurrence,
            slot.generation,
            shared.run,
        );
        let resume = match slot.recorded.as_ref().map(|r| &r.state) {
            Some(SlotState::Running { attempts, retry_at }) => Resume {
                attempts: *attempts,
                retry_at: *retry_at,
            },
            _ => Resume::default(),
        };
        let this = &self;
        let attempt = |attempts: u32| {
            let step = StepContext {
                key: key.clone(),
                instance: shared.id.clone(),
                step: self.name,
                occurrence: slot.occurrence,
                attempt: attempts,
                services: shared.core.services.clone(),
            };
            let span = tracing::info_span!(
                "saga.step",
                instance = %shared.id,
                workflow = %shared.workflow,
                step = self.name,
                occurrence = slot.occurrence,
                attempt = attempts,
            );
            let run = body(step).instrument(span);
            let faults = shared.core.faults.as_deref();
            let at = move || Attempt {
                site: Site::Step,
                instance: shared.id.to_string(),
                step: this.name.to_owned(),
                occurrence: slot.occurrence,
                attempt: attempts,
            };
            async move {
                fault::attempt(faults, at, run)
                    .await
                    .and_then(|value| this.round_trip(&value))
            }
        };
        let record_retry = |attempt: u32, error: &StepError, retry_at: u64, delay| {
            tracing::warn!(instance = %shared.id, step = self.name, attempt, error = %error, ?delay, "step attempt failed; retrying");
            shared.append(Change::StepRetrying {
                slot: slot.index,
                attempt,
                error: error.clone(),
                retry_at,
                delay,
            })
        };
        let outcome = retry(
            &shared.core.clock,
            &self.config,
            resume,
            attempt,
            record_retry,
        )
        .await;
        let (change, result) = match outcome {
            Err(e) => return self.store_failed(e),
            Ok(Retried::Done((value, output), attempts)) => {
                tracing::info!(instance = %shared.id, step = self.name, occurrence = slot.occurrence, attempts, "step completed");
                (
                    Change::StepCompleted {
                        slot: slot.index,
                        output,
                        attempts,
                    },
                    Ok(value),
                )
            }
            Ok(Retried::GaveUp(error, attempts)) => {
                tracing::warn!(instance = %shared.id, step = self.name, occurrence = slot.occurrence, attempts, error = %error, "step failed");
                let error = self.typed_value_within_limit(error);
                // The typed error goes first: a journal keeps a prefix of
                // what it was given, so no `StepFailed` is durable without it.
                if let Some(value) = error.value()
                    && let Err(e) = shared.append(Change::StepFailureValue {
                        slot: slot.index,
                        value: value.clone(),
                    })
                {
                    return self.store_failed(e);
                }
                (
                    Change::StepFailed {
                        slot: slot.index,
                        error: error.clone(),
                        attempts,
                    },
                    Err(StepFailed {
                        step: self.name.to_owned(),
                        attempts,
                        error,
                    }),
                )
            }
        };
        self.settle(change, result).await
    }

    /// The error that ends the step, without its typed value when that is
    /// over the payload limit (its message stays): the failure is what the
    /// workflow handles, and it must not be refused for its size.
    fn typed_value_within_limit(&self, error: StepError) -> StepError {
        let limit = self.scope.core.max_payload;
        match error.value().map(|value| value.len()) {
            Some(size) if size > limit => {
                tracing::warn!(
                    instance = %self.scope.id,
                    step = self.name,
                    size,
                    limit,
                    "the step's typed error is over the payload limit: it is stored as its message only"
                );
                error.with_value(None)
            }
            _ => error,
        }
    }

    /// Fails the step without an attempt: its inputs could not be recorded.
    async fn refuse<T>(self, error: StepError) -> Option<Result<T, StepFailed>> {
        tracing::warn!(instance = %self.scope.id, step = self.name, occurrence = self.slot.occurrence, error = %error, "step refused");
        let change = Change::StepFailed {
            slot: self.slot.index,
            error: error.clone(),
            attempts: 0,
        };
        let failed = StepFailed {
            step: self.name.to_owned(),
            attempts: 0,
            error,
        };
        self.settle(change, Err(failed)).await
    }

    /// Stores the step's outcome and hands `result` over. The outcome is
    /// durable before the workflow sees it, so a replay gives the same.
    async fn settle<T>(
        &self,
        change: Change,
        result: Result<T, StepFailed>,
    ) -> Option<Result<T, StepFailed>> {
        let shared = &self.scope;
        let written = match shared.append(change) {
            Ok(()) => shared.core.journal.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            return self.store_failed(e);
        }
        Some(result)
    }

    /// Encodes an output and decodes it again, so the first run sees what
    /// every replay will see. One over the size limit, or one that does not
    /// round-trip, fails the step for good (no retry changes it).
    fn round_trip<T: Serialize + DeserializeOwned>(
        &self,
        value: &T,
    ) -> Result<(T, Payload), StepError> {
        let limit = self.scope.core.max_payload;
        let type_name = std::any::type_name::<T>();
        let payload = Payload::encode(value).map_err(|detail| {
            StepError::fatal(format!(
                "could not encode the output of step {:?} (`{type_name}`) as JSON: {detail}",
                self.name
            ))
        })?;
        if payload.len() > limit {
            return Err(StepError::fatal(format!(
                "the output of step {:?} is {} bytes, {} bytes over the limit of {limit} bytes; return a reference (a key, a URL) instead",
                self.name,
                payload.len(),
                payload.len() - limit
            )));
        }
        let decoded = payload.decode::<T>().map_err(|detail| {
            StepError::fatal(format!(
                "the output of step {:?} does not survive the store: `{type_name}` encoded as JSON does not decode back ({detail}); \
                 NaN, infinities and maps with non-string keys cannot be stored",
                self.name
            ))
        })?;
        Ok((decoded, payload))
    }

    fn store_failed<T>(&self, error: crate::Error) -> Option<T> {
        self.scope.store_failed(error);
        None
    }
}

impl StepFailed {
    /// Whether the step that failed is `S`, a `#[step]` function named as
    /// a type: `failed.is::<charge_card>()`. It compares the step's name
    /// and its `renamed_from`, so a renamed step still matches, and a
    /// misspelt or removed step is a compile error, where comparing
    /// [`step()`](StepFailed::step) with a string literal silently stops
    /// matching.
    pub fn is<S: crate::workflow::step_table::StepDefinition>(&self) -> bool {
        let names = S::NAMES;
        self.step == names.name || names.renamed_from == Some(self.step.as_str())
    }
}
