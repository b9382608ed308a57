//! Durable steps: started when called, run (with retries) in their own
//! task, their output stored and flushed before the workflow sees it, and
//! never run again once completed.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::attempt::run_attempt;
use crate::clock::{add_millis, from_millis};
use crate::codec::{decode_payload, encode_payload};
use crate::config::StepConfig;
use crate::context::{Mode, Shared, Slot, WorkflowContext};
use crate::failure::{Failure, FailureKind, StepError, StepFailed};
use crate::history::EventKind;
use crate::record::{SlotKind, SlotRecord, SlotState};
use crate::saga::{Registered, RollbackRegistration};
use crate::store::Op;

/// The idempotency key of a step or of a rollback handler.
///
/// Deterministic: `"{instance}:{step}"` (with `#{occurrence}` from the
/// second call of the same step on), and `"{instance}:rollback:{step}"` for
/// the step's compensation. Every attempt and every replay gets the same
/// key, so a callee that dedupes on it applies the side effect once.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(Arc<str>);

impl IdempotencyKey {
    /// The key as a string, to pass to the callee.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub(crate) fn forward(instance: &str, step: &str, occurrence: u32) -> Self {
        IdempotencyKey(with_occurrence(format!("{instance}:{step}"), occurrence).into())
    }

    pub(crate) fn rollback(instance: &str, step: &str, occurrence: u32) -> Self {
        IdempotencyKey(with_occurrence(format!("{instance}:rollback:{step}"), occurrence).into())
    }
}

fn with_occurrence(mut key: String, occurrence: u32) -> String {
    if occurrence > 0 {
        key.push_str(&format!("#{occurrence}"));
    }
    key
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// What a step body may know about the attempt it runs in.
#[derive(Clone, Debug)]
pub struct StepContext {
    key: IdempotencyKey,
    instance: Arc<str>,
    step: &'static str,
    occurrence: u32,
    attempt: u32,
}

impl StepContext {
    /// The step's idempotency key.
    pub fn key(&self) -> IdempotencyKey {
        self.key.clone()
    }

    /// The instance id.
    pub fn instance_id(&self) -> &str {
        &self.instance
    }

    /// The step's name.
    pub fn step_name(&self) -> &str {
        self.step
    }

    /// 0 for the first call of this step in the instance, 1 for the second, ...
    pub fn occurrence(&self) -> u32 {
        self.occurrence
    }

    /// The attempt number, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

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
            config,
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
        start_step(self, name, config, body, None)
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
            config,
            move |step: StepContext| body(step.key),
            Some(rollback),
        )
    }
}

/// Starts a step: takes its slot now, registers its compensation, and
/// either answers from history or spawns its task.
pub(crate) fn start_step<T, F, Fut>(
    workflow: &WorkflowContext,
    name: &'static str,
    config: StepConfig,
    body: F,
    rollback: Option<RollbackRegistration<T>>,
) -> StepFuture<T>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    F: FnMut(StepContext) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, StepError>> + Send + 'static,
{
    let ctx = &workflow.ctx;
    let shared = &ctx.shared;
    let Some(slot) = ctx.take_slot(SlotKind::Step, name) else {
        return StepFuture::never();
    };
    // A pause stops the workflow before a step that is to run (anew, or
    // again after a crash): it is not started, so its compensation is not
    // registered either.
    let to_run = matches!(
        slot.recorded.as_ref().map(|r| &r.state),
        None | Some(SlotState::Running { .. })
    );
    if to_run && shared.mode == Mode::Forward && shared.pause_here() {
        return StepFuture::never();
    }
    let has_rollback = rollback.is_some();
    if let Some(rollback) = rollback {
        // In rebuild mode only steps that history says started get their
        // handler back; a call past that point never happened.
        if shared.mode == Mode::Forward || slot.recorded.is_some() {
            ctx.register_rollback(Registered::new(slot.index, name, slot.occurrence, rollback));
        }
    }
    match slot.recorded.as_ref().map(|r| &r.state) {
        Some(SlotState::Completed { output, .. }) => match decode_payload::<T>(output) {
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
        },
        Some(SlotState::Failed { error, attempts }) => StepFuture {
            state: State::Ready(Some(Err(StepFailed {
                step: name.to_owned(),
                attempts: *attempts,
                error: error.clone(),
            }))),
        },
        Some(SlotState::Running { .. }) | None if shared.mode == Mode::Forward => {
            let (done, result) = oneshot::channel();
            let task = StepTask {
                shared: shared.clone(),
                slot,
                name,
                config,
                has_rollback,
            };
            ctx.spawn(async move {
                if let Some(outcome) = task.run(body).await {
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
    shared: Arc<Shared>,
    slot: Slot,
    name: &'static str,
    config: StepConfig,
    has_rollback: bool,
}

impl StepTask {
    /// Runs the attempts; `None` if the store failed (the driver has been
    /// told and stops the instance).
    async fn run<T, F, Fut>(self, mut body: F) -> Option<Result<T, StepFailed>>
    where
        T: Serialize + Send + 'static,
        F: FnMut(StepContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StepError>> + Send + 'static,
    {
        let shared = &self.shared;
        let engine = &shared.engine;
        let key = IdempotencyKey::forward(&shared.id, self.name, self.slot.occurrence);
        let (mut attempts, retry_at) = match self.slot.recorded.as_ref().map(|r| &r.state) {
            Some(SlotState::Running { attempts, retry_at }) => (*attempts, *retry_at),
            _ => (0, None),
        };
        let mut record = match &self.slot.recorded {
            Some(record) => record.clone(),
            None => {
                let started = shared.write(|txn| {
                    let record = SlotRecord {
                        kind: SlotKind::Step,
                        name: self.name.to_owned(),
                        occurrence: self.slot.occurrence,
                        has_rollback: self.has_rollback,
                        history_seq: txn.next_seq(),
                        state: SlotState::Running {
                            attempts: 0,
                            retry_at: None,
                        },
                    };
                    txn.event(EventKind::StepStarted {
                        step: self.name.to_owned(),
                        occurrence: self.slot.occurrence,
                    });
                    txn.put(Op::PutSlot(
                        shared.id.to_string(),
                        self.slot.index,
                        record.clone(),
                    ));
                    Ok(record)
                });
                match started {
                    Ok(record) => record,
                    Err(e) => return self.store_failed(e),
                }
            }
        };
        if let Some(at) = retry_at {
            engine.clock.sleep_until(from_millis(at)).await;
        }
        loop {
            attempts += 1;
            let step = StepContext {
                key: key.clone(),
                instance: shared.id.clone(),
                step: self.name,
                occurrence: self.slot.occurrence,
                attempt: attempts,
            };
            let span = tracing::info_span!(
                "saga.step",
                instance = %shared.id,
                workflow = %shared.workflow,
                step = self.name,
                occurrence = self.slot.occurrence,
                attempt = attempts,
            );
            let outcome = run_attempt(&engine.clock, self.config.timeout, body(step))
                .instrument(span)
                .await
                .and_then(|value| self.encode(&value).map(|bytes| (value, bytes)));
            match outcome {
                Ok((value, output)) => {
                    record.state = SlotState::Completed { output, attempts };
                    let completed = EventKind::StepCompleted {
                        step: self.name.to_owned(),
                        occurrence: self.slot.occurrence,
                        attempts,
                    };
                    if let Err(e) = self.save(&record, completed, true).await {
                        return self.store_failed(e);
                    }
                    return Some(Ok(value));
                }
                Err(error) if error.is_retryable() && self.config.allows_retry_after(attempts) => {
                    let delay = self.config.delay_after(attempts);
                    let at = add_millis(engine.now_millis(), delay);
                    record.state = SlotState::Running {
                        attempts,
                        retry_at: Some(at),
                    };
                    tracing::warn!(instance = %shared.id, step = self.name, attempt = attempts, error = %error, ?delay, "step attempt failed; retrying");
                    let retrying = EventKind::StepRetrying {
                        step: self.name.to_owned(),
                        occurrence: self.slot.occurrence,
                        attempt: attempts,
                        error: error.to_string(),
                        delay,
                    };
                    if let Err(e) = self.save(&record, retrying, false).await {
                        return self.store_failed(e);
                    }
                    engine.clock.sleep_until(from_millis(at)).await;
                }
                Err(error) => {
                    record.state = SlotState::Failed {
                        error: error.clone(),
                        attempts,
                    };
                    let failed = EventKind::StepFailed {
                        step: self.name.to_owned(),
                        occurrence: self.slot.occurrence,
                        attempts,
                        error: error.to_string(),
                    };
                    if let Err(e) = self.save(&record, failed, true).await {
                        return self.store_failed(e);
                    }
                    return Some(Err(StepFailed {
                        step: self.name.to_owned(),
                        attempts,
                        error,
                    }));
                }
            }
        }
    }

    /// Stores the slot with its history event, and with `durable` waits
    /// until both are on disk. An outcome the workflow will see (output or
    /// failure) is durable before it sees it, so replay gives the same.
    async fn save(
        &self,
        record: &SlotRecord,
        event: EventKind,
        durable: bool,
    ) -> crate::Result<()> {
        let shared = &self.shared;
        shared.write(|txn| {
            txn.event(event);
            txn.put(Op::PutSlot(
                shared.id.to_string(),
                self.slot.index,
                record.clone(),
            ));
            Ok(())
        })?;
        if durable {
            shared.engine.flush().await?;
        }
        Ok(())
    }

    /// Encodes an output; one over the size limit fails the step for good
    /// (no retry makes it smaller).
    fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, StepError> {
        let limit = self.shared.engine.max_payload;
        let bytes = encode_payload(value).map_err(|detail| {
            StepError::fatal(format!(
                "could not encode the output of step {:?}: {detail}",
                self.name
            ))
        })?;
        if bytes.len() > limit {
            return Err(StepError::fatal(format!(
                "the output of step {:?} is {} bytes, over the limit of {limit}; return a reference (a key, a URL) instead",
                self.name,
                bytes.len()
            )));
        }
        Ok(bytes)
    }

    fn store_failed<T>(&self, error: crate::Error) -> Option<T> {
        self.shared.store_failed(error);
        None
    }
}
