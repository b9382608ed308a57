//! How the macros turn the error type a step, rollback handler or workflow
//! declares into the engine's [`StepError`] or [`WorkflowError`].
//!
//! One blanket `From` cannot serve `std::error::Error`s, `String` and
//! `anyhow::Error` at once: rustc rejects the overlap, since std may one day
//! implement `Error` for `String`. The macros know the concrete error type
//! where they expand, so they pick the conversion by method resolution
//! instead ("autoref specialization"): the generated code calls
//! `(&&&ErrorValue(e)).__saga_step_error()` with every `Via*` trait in
//! scope, and the impl on the most references whose bounds hold wins:
//!
//! | step error type                     | conversion                          |
//! |-------------------------------------|-------------------------------------|
//! | `E: Permanent + Display`            | fatal when `is_permanent`, else retryable |
//! | `StepError`, `String`, `&str`, `Box<dyn Error + Send + Sync>`, `anyhow::Error` | as is / retryable |
//! | `E: std::error::Error + Send + Sync + 'static` | retryable                  |
//!
//! | workflow error type                 | conversion                          |
//! |-------------------------------------|-------------------------------------|
//! | `WorkflowError`                     | as is                               |
//! | `E: Serialize + Display` (`String`, `&str` too) | typed: stored as JSON   |
//! | `Box<dyn Error + Send + Sync>`, `anyhow::Error` | its message             |
//! | `E: std::error::Error + Send + Sync + 'static` | its message (a `StepFailed` keeps its step) |
//!
//! Any other type fails the last impl's bound, whose message lists these.
//!
//! A step's error is also kept typed, beside its `StepError`, when its type
//! is `Serialize` (`ErrorRef`, `ViaTypedStepError`): the workflow gets it
//! back with `StepFailed::downcast`. `StepError`, `String` and `&str` are
//! their message and keep none. Only `#[step]` bodies ask for it: a
//! rollback handler's error is stored as its message
//! (`CompensationFailed`), so its value would be dropped.

use std::fmt;

use serde::Serialize;

use crate::codec::Payload;
use crate::error::failure::{Permanent, StepError, StepFailed, WorkflowError};

/// The error a body returned, to be converted.
pub struct ErrorValue<E>(pub E);

/// Step errors whose type declares its permanent errors.
pub trait ViaPermanent {
    /// The step error.
    fn __saga_step_error(&self) -> StepError;
}

impl<E: Permanent + fmt::Display> ViaPermanent for &&ErrorValue<E> {
    fn __saga_step_error(&self) -> StepError {
        if self.0.is_permanent() {
            StepError::fatal(&self.0)
        } else {
            StepError::retryable(&self.0)
        }
    }
}

/// The error types a step may declare besides `std::error::Error`s.
pub trait KnownStepError {
    /// The step error.
    fn to_step_error(&self) -> StepError;
}

impl KnownStepError for StepError {
    fn to_step_error(&self) -> StepError {
        self.clone()
    }
}

impl KnownStepError for String {
    fn to_step_error(&self) -> StepError {
        StepError::retryable(self)
    }
}

impl KnownStepError for &str {
    fn to_step_error(&self) -> StepError {
        StepError::retryable(self)
    }
}

impl KnownStepError for Box<dyn std::error::Error + Send + Sync> {
    fn to_step_error(&self) -> StepError {
        StepError::retryable(self)
    }
}

#[cfg(feature = "anyhow")]
impl KnownStepError for anyhow::Error {
    fn to_step_error(&self) -> StepError {
        // `{:#}`: the whole context chain, "charging: card declined".
        StepError::retryable(format!("{self:#}"))
    }
}

/// Step errors of the types in [`KnownStepError`].
pub trait ViaKnownStepError {
    /// The step error.
    fn __saga_step_error(&self) -> StepError;
}

impl<E: KnownStepError> ViaKnownStepError for &ErrorValue<E> {
    fn __saga_step_error(&self) -> StepError {
        self.0.to_step_error()
    }
}

/// What a step's (or rollback handler's) own error type must be.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the error type of a step or rollback handler",
    label = "the engine cannot turn this error into a `StepError`",
    note = "use `StepError`, a `std::error::Error + Send + Sync + 'static`, `anyhow::Error` (feature `anyhow` of saga-runtime), `String` or `&str`; implement `saga_runtime::Permanent` on your error type to mark errors no retry fixes"
)]
pub trait StdStepError: fmt::Display {}

impl<E: std::error::Error + Send + Sync + 'static> StdStepError for E {}

/// Step errors of any `std::error::Error`: retryable.
pub trait ViaStdStepError<E> {
    /// The step error.
    fn __saga_step_error(&self) -> StepError
    where
        E: StdStepError;
}

impl<E> ViaStdStepError<E> for ErrorValue<E> {
    fn __saga_step_error(&self) -> StepError
    where
        E: StdStepError,
    {
        StepError::retryable(&self.0)
    }
}

/// A step body's error, borrowed, to keep it typed (see the module docs).
pub struct ErrorRef<'a, E>(pub &'a E);

/// A step's typed error as JSON, or none, to go with its `StepError`.
pub struct StepValue(Option<Payload>);

impl StepValue {
    /// `error` with this value.
    pub fn attach(self, error: StepError) -> StepError {
        error.with_value(self.0)
    }
}

/// Step errors of a `Serialize` type: kept as JSON.
pub trait ViaTypedStepError {
    /// The error as JSON, unless it is only a message.
    fn __saga_step_value(&self) -> StepValue;
}

// `Serialize` alone, as for workflow errors below: `downcast` asks for
// `DeserializeOwned`.
impl<E: Serialize + 'static> ViaTypedStepError for &ErrorRef<'_, E> {
    fn __saga_step_value(&self) -> StepValue {
        let any = self.0 as &dyn std::any::Any;
        if any.is::<StepError>() || any.is::<String>() || any.is::<&'static str>() {
            return StepValue(None);
        }
        // One that does not encode keeps its message only.
        StepValue(Payload::encode(self.0).ok())
    }
}

/// Step errors of any other type: no value.
pub trait ViaUntypedStepError {
    /// No value.
    fn __saga_step_value(&self) -> StepValue;
}

impl<E> ViaUntypedStepError for ErrorRef<'_, E> {
    fn __saga_step_value(&self) -> StepValue {
        StepValue(None)
    }
}

/// Workflow errors that are `WorkflowError` already.
pub trait ViaWorkflowError {
    /// The workflow error.
    fn __saga_workflow_error(&self) -> WorkflowError;
}

impl ViaWorkflowError for &&&ErrorValue<WorkflowError> {
    fn __saga_workflow_error(&self) -> WorkflowError {
        WorkflowError::from_failure(self.0.failure().clone())
    }
}

/// Workflow errors of the workflow's own type: stored as JSON.
pub trait ViaTypedWorkflowError {
    /// The workflow error.
    fn __saga_workflow_error(&self) -> WorkflowError;
}

// `Serialize` alone: a `DeserializeOwned` bound here would be a hard
// error for `&'static str` (a lifetime mismatch, not a failed candidate),
// and storing needs only `Serialize`. The caller's `downcast::<E>()` asks
// for `DeserializeOwned`; a `&str` error reads back as a `String`.
impl<E> ViaTypedWorkflowError for &&ErrorValue<E>
where
    E: Serialize + fmt::Display + 'static,
{
    fn __saga_workflow_error(&self) -> WorkflowError {
        // A step's failure propagated as is keeps its step's name.
        match (&self.0 as &dyn std::any::Any).downcast_ref::<StepFailed>() {
            Some(failed) => WorkflowError::from(failed.clone()),
            None => WorkflowError::typed(&self.0),
        }
    }
}

/// The workflow error types known besides typed and `std::error::Error`s.
pub trait KnownWorkflowError {
    /// The workflow error.
    fn to_workflow_error(&self) -> WorkflowError;
}

impl KnownWorkflowError for Box<dyn std::error::Error + Send + Sync> {
    fn to_workflow_error(&self) -> WorkflowError {
        WorkflowError::new(self)
    }
}

#[cfg(feature = "anyhow")]
impl KnownWorkflowError for anyhow::Error {
    fn to_workflow_error(&self) -> WorkflowError {
        match self.downcast_ref::<StepFailed>() {
            Some(failed) => WorkflowError::from(failed.clone()),
            None => WorkflowError::new(format!("{self:#}")),
        }
    }
}

/// Workflow errors of the types in [`KnownWorkflowError`].
pub trait ViaKnownWorkflowError {
    /// The workflow error.
    fn __saga_workflow_error(&self) -> WorkflowError;
}

impl<E: KnownWorkflowError> ViaKnownWorkflowError for &ErrorValue<E> {
    fn __saga_workflow_error(&self) -> WorkflowError {
        self.0.to_workflow_error()
    }
}

/// What a workflow's own error type must be.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the error type of a workflow",
    label = "the engine cannot store this error",
    note = "a workflow returns `Result<Output, E>` where `E` is `WorkflowError`, your own error type that is `Serialize + DeserializeOwned + Display` (the caller gets it back with `failure.downcast::<E>()`), a `std::error::Error + Send + Sync + 'static`, `anyhow::Error` (feature `anyhow` of saga-runtime), `String` or `&str`"
)]
pub trait StdWorkflowError {
    /// The workflow error.
    fn to_workflow_error(&self) -> WorkflowError;
}

impl<E: std::error::Error + Send + Sync + 'static> StdWorkflowError for E {
    fn to_workflow_error(&self) -> WorkflowError {
        match (self as &dyn std::any::Any).downcast_ref::<StepFailed>() {
            Some(failed) => WorkflowError::from(failed.clone()),
            None => WorkflowError::new(self),
        }
    }
}

/// Workflow errors of any `std::error::Error`: their message.
pub trait ViaStdWorkflowError<E> {
    /// The workflow error.
    fn __saga_workflow_error(&self) -> WorkflowError
    where
        E: StdWorkflowError;
}

impl<E> ViaStdWorkflowError<E> for ErrorValue<E> {
    fn __saga_workflow_error(&self) -> WorkflowError
    where
        E: StdWorkflowError,
    {
        self.0.to_workflow_error()
    }
}

// The borrows pick the conversion, as in the generated code.
#[cfg(test)]
#[allow(clippy::needless_borrow)]
mod tests {
    use super::*;

    #[derive(Debug)]
    enum Payment {
        Declined,
        Down,
    }

    impl fmt::Display for Payment {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{self:?}")
        }
    }

    impl std::error::Error for Payment {}

    impl Permanent for Payment {
        fn is_permanent(&self) -> bool {
            matches!(self, Payment::Declined)
        }
    }

    #[test]
    fn the_most_specific_conversion_wins() {
        let io = std::io::Error::other("reset");
        assert!((&&&ErrorValue(io)).__saga_step_error().is_retryable());
        assert!((&&&ErrorValue("down")).__saga_step_error().is_retryable());
        assert!(
            (&&&ErrorValue(String::from("down")))
                .__saga_step_error()
                .is_retryable()
        );
        let fatal = StepError::fatal("no");
        assert!(!(&&&ErrorValue(fatal)).__saga_step_error().is_retryable());
        assert!(
            !(&&&ErrorValue(Payment::Declined))
                .__saga_step_error()
                .is_retryable()
        );
        assert!(
            (&&&ErrorValue(Payment::Down))
                .__saga_step_error()
                .is_retryable()
        );
    }

    #[test]
    fn serializable_step_errors_keep_their_value() {
        #[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
        struct Declined {
            code: u32,
        }
        let typed = (&&ErrorRef(&Declined { code: 51 })).__saga_step_value();
        let error = typed.attach(StepError::fatal("declined"));
        assert_eq!(
            error.value().and_then(|v| v.decode::<Declined>().ok()),
            Some(Declined { code: 51 })
        );
        // The value is not part of the error's equality.
        assert_eq!(error, StepError::fatal("declined"));
        let io = std::io::Error::other("reset");
        assert!((&&ErrorRef(&io)).__saga_step_value().0.is_none());
        assert!(
            (&&ErrorRef(&String::from("down")))
                .__saga_step_value()
                .0
                .is_none()
        );
        assert!((&&ErrorRef(&"down")).__saga_step_value().0.is_none());
        let plain = StepError::fatal("no");
        assert!((&&ErrorRef(&plain)).__saga_step_value().0.is_none());
    }

    #[test]
    fn typed_workflow_errors_keep_their_value() {
        let error = (&&&&ErrorValue(String::from("out of stock"))).__saga_workflow_error();
        assert_eq!(
            error.failure().downcast::<String>().as_deref(),
            Some("out of stock")
        );
        let error = (&&&&ErrorValue(std::io::Error::other("disk"))).__saga_workflow_error();
        assert_eq!(error.failure().downcast::<String>(), None);
        assert_eq!(error.to_string(), "disk");
    }
}
