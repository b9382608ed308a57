//! Failures inside workflow code: what a step body returns, what a step call
//! resolves to when it gives up, what a workflow returns, and how a failure
//! is stored.

use std::any::Any;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::codec::Payload;

/// Why an instance (or one of its compensations) failed, as stored in its
/// record and shown by `status`/`result`.
///
/// When the workflow returned its own error type (or propagated a step's
/// typed error), the failure also carries that error as JSON:
/// [`Failure::downcast`] gives it back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    kind: FailureKind,
    message: String,
    /// The workflow's own error as JSON, when it returned one. Not part of
    /// `Failure`'s bincode layout (records written before it existed must
    /// still decode): the journal carries it in a record of its own
    /// (`Change::FailureValue`) and the fold puts it back here.
    #[serde(skip)]
    value: Option<Payload>,
}

/// What kind of failure a [`Failure`] is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum FailureKind {
    /// The workflow function returned an error of its own.
    Workflow,
    /// A step gave up (retries exhausted or a fatal error) and the workflow
    /// propagated its error.
    Step {
        /// The step's name.
        step: String,
    },
    /// The workflow function (or a rollback handler) panicked.
    Panic,
    /// Replay reached a different step than history recorded: the workflow
    /// code changed under a running instance.
    NonDeterminism {
        /// What history recorded at this point.
        expected: String,
        /// What the code asked for.
        found: String,
    },
    /// A stored value no longer decodes into the type the code asks for.
    Decode,
    /// A rollback handler gave up.
    Rollback {
        /// The step whose compensation failed.
        step: String,
    },
    /// The store failed while the instance ran.
    Store,
    /// A record of the instance's journal is damaged (a disk fault, a
    /// tampered store): the instance is parked `Blocked`.
    Corrupt {
        /// The damaged record's sequence number.
        seq: u64,
    },
}

impl Failure {
    pub(crate) fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: message.into(),
            value: None,
        }
    }

    /// The failure of a workflow that returned its own error `error`,
    /// stored as JSON beside its message. An error that does not encode
    /// keeps its message only.
    pub(crate) fn typed<E: Serialize + fmt::Display>(error: &E) -> Self {
        Failure {
            kind: FailureKind::Workflow,
            message: error.to_string(),
            value: Payload::encode(error).ok(),
        }
    }

    /// The workflow's own error as JSON, when it returned one.
    pub(crate) fn value(&self) -> Option<&Payload> {
        self.value.as_ref()
    }

    /// This failure with the typed error `value` the journal stored apart.
    pub(crate) fn with_value(mut self, value: Option<Payload>) -> Self {
        self.value = value;
        self
    }

    /// The workflow's own error, when it returned one of type `E`
    /// (`Result<O, E>` with `E: Serialize + DeserializeOwned + Display`),
    /// or the typed error of the step whose [`StepFailed`] the workflow
    /// propagated with `?` (see [`StepFailed::downcast`]). `None` for any
    /// other failure (a step error without a typed value, a panic, ...) or
    /// when the stored JSON is not an `E`.
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// #[derive(Debug, PartialEq, Serialize, Deserialize)]
    /// enum OrderError { OutOfStock, Declined }
    /// # impl std::fmt::Display for OrderError {
    /// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, "{self:?}") }
    /// # }
    /// fn handle(error: saga_runtime::Error) {
    ///     if let saga_runtime::Error::WorkflowFailed { failure, .. } = &error {
    ///         match failure.downcast::<OrderError>() {
    ///             Some(OrderError::OutOfStock) => { /* tell the customer */ }
    ///             Some(OrderError::Declined) => { /* ask for another card */ }
    ///             None => { /* a step gave up, a panic, ... */ }
    ///         }
    ///     }
    /// }
    /// ```
    pub fn downcast<E: DeserializeOwned>(&self) -> Option<E> {
        self.value.as_ref()?.decode().ok()
    }

    /// Whether the failure carries a typed error: the workflow's own, or
    /// that of the step whose failure it propagated.
    pub fn has_value(&self) -> bool {
        self.value.is_some()
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> &FailureKind {
        &self.kind
    }

    /// The message, as a person should read it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The error a step body (or a rollback handler) returns.
///
/// `StepError::retryable(e)` lets the engine try again after the configured
/// delay; `StepError::fatal(e)` skips the remaining attempts. `?` on any
/// `std::error::Error` gives a retryable error.
///
/// A `#[step]` (or `#[rollback]`) may also declare its own error type
/// instead: `Result<T, E>` where `E` is any `std::error::Error + Send +
/// Sync + 'static`, `anyhow::Error` (feature `anyhow`), `String` or
/// `&'static str`. The macro converts it: retryable, unless `E` implements
/// [`Permanent`] and says so. When `E` is also `Serialize` (and not
/// `String` or `&str`, which are their message), the error itself is
/// kept with it: the workflow gets it back typed from the step's failure,
/// [`StepFailed::downcast`].
///
/// Two step errors are equal when their messages and retryability are: the
/// typed value kept beside them is not compared (it is what the message
/// was made from).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepError {
    message: String,
    retryable: bool,
    /// The step's own error as JSON, when its type is `Serialize` and a
    /// `#[step]` returned it. Not part of `StepError`'s bincode layout
    /// (records of this format already hold it): the journal carries it in
    /// a record of its own (`Change::StepFailureValue`), and the fold puts
    /// it back here.
    #[serde(skip)]
    value: Option<Payload>,
}

impl StepError {
    /// A failure worth another attempt (a timeout, a 503, a lost connection).
    pub fn retryable(error: impl fmt::Display) -> Self {
        StepError {
            message: error.to_string(),
            retryable: true,
            value: None,
        }
    }

    /// A failure no retry will fix (invalid input, insufficient funds): the
    /// step gives up at once.
    pub fn fatal(error: impl fmt::Display) -> Self {
        StepError {
            message: error.to_string(),
            retryable: false,
            value: None,
        }
    }

    /// Whether the engine may try again.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The error message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The step's own error as JSON, when it kept one.
    pub(crate) fn value(&self) -> Option<&Payload> {
        self.value.as_ref()
    }

    /// This error with the typed error `value` (or without one).
    pub(crate) fn with_value(mut self, value: Option<Payload>) -> Self {
        self.value = value;
        self
    }
}

impl PartialEq for StepError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message && self.retryable == other.retryable
    }
}

impl Eq for StepError {}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for StepError {
    fn from(error: E) -> Self {
        StepError::retryable(error)
    }
}

/// Declares which errors of a type no retry fixes, once, instead of a
/// `map_err(StepError::fatal)` at every call.
///
/// A `#[step]` (or `#[rollback]`) whose error type implements it gives up
/// at once on an error for which [`is_permanent`](Permanent::is_permanent)
/// is `true`; every other error stays retryable. The default method makes
/// every error of the type permanent:
///
/// ```
/// # use saga_runtime::prelude::*;
/// #[derive(Debug)]
/// struct InvalidInput;
/// # impl std::fmt::Display for InvalidInput {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("invalid") }
/// # }
/// # impl std::error::Error for InvalidInput {}
/// impl saga_runtime::Permanent for InvalidInput {}
///
/// #[derive(Debug)]
/// enum PaymentError { Declined, Unavailable }
/// # impl std::fmt::Display for PaymentError {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, "{self:?}") }
/// # }
/// # impl std::error::Error for PaymentError {}
/// impl saga_runtime::Permanent for PaymentError {
///     // A declined card stays declined; an outage passes.
///     fn is_permanent(&self) -> bool {
///         matches!(self, PaymentError::Declined)
///     }
/// }
/// ```
///
/// It applies where the macros convert a step's own error type. A step
/// declared `-> Result<T, StepError>` decides itself: `?` there is always
/// retryable, as is a hand-written `ctx.step` body's.
pub trait Permanent {
    /// Whether this error is permanent (the step gives up at once).
    /// `true` unless overridden.
    fn is_permanent(&self) -> bool {
        true
    }
}

/// What a step call resolves to when the step gave up: its retries are
/// exhausted, or it returned [`StepError::fatal`].
///
/// The workflow may catch it (then the workflow goes on and no rollback
/// starts) or propagate it with `?` (then the workflow fails and rollback
/// runs). Match it to its step with [`is::<step_fn>()`](StepFailed::is)
/// and to the step's own error type with
/// [`downcast::<E>()`](StepFailed::downcast).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepFailed {
    pub(crate) step: String,
    pub(crate) attempts: u32,
    pub(crate) error: StepError,
}

impl StepFailed {
    /// The step's name.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// How many attempts ran.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The last attempt's error.
    pub fn error(&self) -> &StepError {
        &self.error
    }

    /// The step's own error, typed: `Some` when the `#[step]` function
    /// returned `Result<T, E>` with `E: Serialize + DeserializeOwned` and
    /// its last attempt (the one that gave up) failed with an `E`. Stored
    /// with the failure, so a replay after a restart gets it back too.
    ///
    /// `None` for an error type that is not `Serialize` (its message is in
    /// [`error()`](StepFailed::error)), for `StepError`, `String` and
    /// `&str` errors, for inline `ctx.step` closures (they return
    /// `StepError`), when the last attempt timed out or the inputs could not
    /// be recorded, when the error's JSON was over the payload limit, and
    /// when the stored JSON is not an `E`.
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// #[derive(Debug, Serialize, Deserialize)]
    /// enum BankError { Declined { reason: String }, Unavailable }
    /// # impl std::fmt::Display for BankError {
    /// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, "{self:?}") }
    /// # }
    /// # impl std::error::Error for BankError {}
    /// fn next_move(failed: &StepFailed) -> &'static str {
    ///     match failed.downcast::<BankError>() {
    ///         Some(BankError::Declined { .. }) => "ask for another card",
    ///         Some(BankError::Unavailable) => "try later",
    ///         None => "give up",
    ///     }
    /// }
    /// ```
    pub fn downcast<E: DeserializeOwned>(&self) -> Option<E> {
        self.error.value.as_ref()?.decode().ok()
    }
}

impl fmt::Display for StepFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.attempts == 1 { "" } else { "s" };
        write!(
            f,
            "step {:?} failed after {} attempt{s}: {}",
            self.step, self.attempts, self.error
        )
    }
}

impl std::error::Error for StepFailed {}

/// What a durable wait (`ctx.sleep`, `ctx.wait_for_event`) resolves to when
/// it does not succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitError {
    /// No event of the type arrived before the timeout. The workflow may
    /// catch this and go on.
    Timeout {
        /// The wait's name.
        name: String,
        /// The event type it waited for.
        event_type: String,
    },
    /// A duration string did not parse.
    InvalidDuration {
        /// The string as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The event's payload does not decode into the type the wait asked for.
    Decode {
        /// The wait's name.
        name: String,
        /// The type asked for.
        type_name: &'static str,
        /// What the decoder said.
        detail: String,
    },
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::Timeout { name, event_type } => {
                write!(
                    f,
                    "wait {name:?} timed out before an event of type {event_type:?} arrived"
                )
            }
            WaitError::InvalidDuration { input, reason } => {
                write!(f, "invalid duration {input:?}: {reason}")
            }
            WaitError::Decode {
                name,
                type_name,
                detail,
            } => write!(
                f,
                "event received by wait {name:?} does not decode as `{type_name}`: {detail}"
            ),
        }
    }
}

impl std::error::Error for WaitError {}

/// The error a workflow function returns. It fails the instance, and the
/// compensations of the steps it started run.
///
/// Any `std::error::Error` converts into it with `?` (a [`StepFailed`] keeps
/// the step's name), and [`WorkflowError::new`] makes one from a message.
pub struct WorkflowError {
    failure: Failure,
}

impl WorkflowError {
    /// A workflow error with this message.
    pub fn new(message: impl fmt::Display) -> Self {
        WorkflowError {
            failure: Failure::new(FailureKind::Workflow, message.to_string()),
        }
    }

    /// A workflow error carrying the typed `error`, stored as JSON: the
    /// caller gets it back with `failure.downcast::<E>()`, and rollback
    /// handlers with `ctx.cause().downcast::<E>()`. A `#[workflow]`
    /// returning `Result<O, E>` makes this for you.
    pub fn typed<E: Serialize + fmt::Display>(error: &E) -> Self {
        WorkflowError {
            failure: Failure::typed(error),
        }
    }

    pub(crate) fn from_failure(failure: Failure) -> Self {
        WorkflowError { failure }
    }

    /// The failure this error is stored as.
    pub fn failure(&self) -> &Failure {
        &self.failure
    }

    pub(crate) fn into_failure(self) -> Failure {
        self.failure
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for WorkflowError {
    fn from(error: E) -> Self {
        // A step's failure keeps its step, and its typed error: the
        // caller's `failure.downcast::<E>()` gives it back.
        let (kind, value) = match (&error as &dyn Any).downcast_ref::<StepFailed>() {
            Some(failed) => (
                FailureKind::Step {
                    step: failed.step.clone(),
                },
                failed.error.value.clone(),
            ),
            None => (FailureKind::Workflow, None),
        };
        WorkflowError {
            failure: Failure::new(kind, error.to_string()).with_value(value),
        }
    }
}

impl fmt::Debug for WorkflowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.failure, f)
    }
}

impl fmt::Display for WorkflowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.failure, f)
    }
}
