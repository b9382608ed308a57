//! The error context: every stage pushes its errors here and the expansion
//! reports them all at once (serde's `Ctxt`, in small). Also the errors that
//! only the compiler can decide (`StepCallError`: "if this callee is a
//! step"), which the lock finds and the step checks emit.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use std::fmt::Display;

/// Errors collected while expanding one item.
#[derive(Default)]
pub(crate) struct Errors {
    combined: Option<syn::Error>,
}

impl Errors {
    /// Records an error.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.combined {
            Some(combined) => combined.combine(error),
            None => self.combined = Some(error),
        }
    }

    /// Records an error spanning `tokens`.
    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// Records the error of a fallible step, returning its value if any.
    pub(crate) fn ok<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }

    /// Whether no error was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.combined.is_none()
    }

    /// The `compile_error!`s of every recorded error.
    pub(crate) fn into_compile_errors(self) -> TokenStream {
        self.combined
            .map(syn::Error::into_compile_error)
            .unwrap_or_default()
    }
}

/// An extra assertion on a callee: "if it is a step, fail with `message`"
/// (emitted by `steps::workflow_checks`).
pub(crate) struct StepCallError {
    /// Index into `BodySummary::calls.callees`.
    pub(crate) callee: usize,
    pub(crate) span: Span,
    /// The message; each [`STEP_NAME`] in it becomes the step's name,
    /// which only the compiler knows.
    pub(crate) message: String,
}

/// Stands for the callee's step name in a [`StepCallError`]'s message.
pub(crate) const STEP_NAME: &str = "{step}";
