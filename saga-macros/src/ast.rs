//! Stage 2: the annotated function in our own terms. Each type keeps the
//! original `ItemFn` (for spans, attributes and the fallback expansion) and
//! adds what the macros need: which parameters are injected, the output type,
//! the context binding.
//!
//! `from_syn` records every problem it finds and returns `None` only when the
//! function cannot be expanded at all; the caller then emits it unchanged.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{FnArg, Ident, ItemFn, Pat, PatType, Type};

use crate::errors::Errors;
use crate::types;

/// The type name of the injected idempotency key.
const IDEMPOTENCY_KEY: &str = "IdempotencyKey";
/// The type name of the injected step context.
const STEP_CONTEXT: &str = "StepContext";
/// The type name of an injected shared service, `Service<T>`.
const SERVICE: &str = "Service";
/// The type name of a rollback handler's context.
const ROLLBACK_CONTEXT: &str = "RollbackContext";
/// The type name of a workflow's context.
pub(crate) const WORKFLOW_CONTEXT: &str = "WorkflowContext";

/// What a step parameter is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParamKind {
    /// `key: IdempotencyKey`, supplied by the engine.
    Key,
    /// `step: StepContext`, supplied by the engine.
    StepContext,
    /// `payments: Service<Payments>`, a service provided to the engine.
    Service,
    /// An input the caller passes.
    Input,
}

/// One parameter of a step.
pub(crate) struct Param {
    pub(crate) kind: ParamKind,
    pub(crate) ty: Type,
    /// The variable it binds, if the pattern is a plain identifier.
    pub(crate) binding: Option<Ident>,
    /// The whole `pat: Type`, for error spans.
    pub(crate) span: Span,
}

/// A function under `#[step]`.
pub(crate) struct StepFn {
    pub(crate) item: ItemFn,
    pub(crate) params: Vec<Param>,
    /// `T` of `Result<T, StepError>`.
    pub(crate) output: Type,
}

/// A function under `#[rollback]`.
pub(crate) struct RollbackFn {
    pub(crate) item: ItemFn,
    /// The binding of the `RollbackContext` parameter.
    pub(crate) ctx: Option<Ident>,
    /// `T` of `RollbackContext<'_, T>`: the output of the step it compensates.
    pub(crate) step_output: Type,
    /// The parameters after the context, in order: the step's inputs and
    /// `Service<T>`s (`true`).
    pub(crate) params: Vec<(bool, Type)>,
}

/// A function under `#[workflow]`.
pub(crate) struct WorkflowFn {
    pub(crate) item: ItemFn,
    /// The binding of the `WorkflowContext` parameter.
    pub(crate) ctx: Option<Ident>,
    pub(crate) input: Type,
    /// `O` of `Result<O, WorkflowError>`.
    pub(crate) output: Type,
}

impl StepFn {
    /// Reads a step's signature.
    pub(crate) fn from_syn(item: ItemFn, errors: &mut Errors) -> Option<Self> {
        let mut expandable = check_shape(&item, "step", errors);
        let mut params = Vec::new();
        for arg in typed_args(&item) {
            match step_param(arg, &params, errors) {
                Some(param) => params.push(param),
                None => expandable = false,
            }
        }
        let output = types::result_ok(&item.sig.output).cloned();
        if output.is_none() {
            errors.spanned(
                return_span(&item),
                "a step returns `Result<Output, E>`: the engine stores `Output` and \
                 retries on `Err`; `E` is `StepError`, a `std::error::Error + Send + Sync`, \
                 `anyhow::Error`, `String` or `&str`; change the return type",
            );
        }
        Some(StepFn {
            params,
            output: output?,
            item,
        })
        .filter(|_| expandable)
    }

    /// The parameters the caller passes.
    pub(crate) fn inputs(&self) -> impl Iterator<Item = &Param> {
        self.params.iter().filter(|p| p.kind == ParamKind::Input)
    }

    /// The `Service<T>` parameters.
    pub(crate) fn services(&self) -> impl Iterator<Item = &Param> {
        self.params.iter().filter(|p| p.kind == ParamKind::Service)
    }

    /// The parameter of the given kind, if the step takes one.
    pub(crate) fn injected(&self, kind: ParamKind) -> Option<&Param> {
        self.params.iter().find(|p| p.kind == kind)
    }
}

/// Whether a step parameter of type `ty` is supplied by the engine (taken
/// by value or, wrongly, by reference), so callers do not pass it.
pub(crate) fn is_injected(ty: &Type) -> bool {
    let ty = match ty {
        Type::Reference(reference) => &*reference.elem,
        other => other,
    };
    [IDEMPOTENCY_KEY, STEP_CONTEXT, SERVICE]
        .into_iter()
        .any(|name| types::is_named(ty, name))
}

/// Reads one step parameter; `None` (with the error recorded) when the
/// expansion cannot use it.
fn step_param(arg: &PatType, earlier: &[Param], errors: &mut Errors) -> Option<Param> {
    // key: &IdempotencyKey
    if let Type::Reference(reference) = &*arg.ty {
        let injected = [IDEMPOTENCY_KEY, STEP_CONTEXT, SERVICE]
            .into_iter()
            .find(|name| types::is_named(&reference.elem, name));
        if let Some(injected) = injected {
            let pat = arg.pat.to_token_stream();
            let message = if injected == SERVICE {
                format!(
                    "take the service by value (`{pat}: Service<T>`): the engine gives each \
                     attempt a clone of the shared handle"
                )
            } else {
                format!(
                    "take the `{injected}` by value (`{pat}: {injected}`): the engine gives \
                     each attempt its own"
                )
            };
            errors.spanned(&arg.ty, message);
            return None;
        }
    }
    let kind = if types::is_named(&arg.ty, IDEMPOTENCY_KEY) {
        ParamKind::Key
    } else if types::is_named(&arg.ty, STEP_CONTEXT) {
        ParamKind::StepContext
    } else if types::is_named(&arg.ty, SERVICE) {
        ParamKind::Service
    } else {
        ParamKind::Input
    };
    // key: IdempotencyKey, .., other: IdempotencyKey
    if matches!(kind, ParamKind::Key | ParamKind::StepContext)
        && earlier.iter().any(|param| param.kind == kind)
    {
        errors.spanned(
            arg,
            "this step already takes this parameter: the engine supplies one key and one \
             step context per attempt; remove the second",
        );
        return None;
    }
    // name: &str
    if kind == ParamKind::Input && types::is_borrowed(&arg.ty) {
        errors.spanned(
            &arg.ty,
            "step inputs must be owned values: the engine keeps them for retries and for the \
             rollback handler after the call returns; take an owned type (e.g. `String` \
             instead of `&str`) and clone at the call site; for a shared client or pool, \
             take `Service<T>` and give it to `Engine::builder().provide(..)`",
        );
        return None;
    }
    Some(Param {
        kind,
        ty: (*arg.ty).clone(),
        binding: binding(&arg.pat),
        span: arg.span(),
    })
}

impl RollbackFn {
    /// The step inputs it takes (the parameters after the context that are
    /// not services).
    pub(crate) fn inputs(&self) -> Vec<&Type> {
        self.params
            .iter()
            .filter(|(service, _)| !service)
            .map(|(_, ty)| ty)
            .collect()
    }

    /// The `Service<T>` types it takes.
    pub(crate) fn services(&self) -> Vec<&Type> {
        self.params
            .iter()
            .filter(|(service, _)| *service)
            .map(|(_, ty)| ty)
            .collect()
    }

    /// Reads a rollback handler's signature.
    pub(crate) fn from_syn(item: ItemFn, errors: &mut Errors) -> Option<Self> {
        let expandable = check_shape(&item, "rollback", errors);
        let args = typed_args(&item);
        let context = args.first().and_then(|first| {
            let output = types::type_args(&first.ty).first().copied().cloned();
            output
                .filter(|_| types::is_named(&first.ty, ROLLBACK_CONTEXT))
                .map(|output| (binding(&first.pat), output))
        });
        if context.is_none() {
            let span = args
                .first()
                .map_or_else(|| item.sig.ident.span(), |arg| arg.span());
            errors.push(syn::Error::new(
                span,
                "the first parameter of a rollback handler is its context: write \
                 `ctx: RollbackContext<'_, Output>`, where `Output` is the output type of the \
                 step it compensates, then the step's inputs",
            ));
        }
        let returns_unit = types::result_ok(&item.sig.output).is_some_and(types::is_unit);
        if !returns_unit {
            errors.spanned(
                return_span(&item),
                "a rollback handler returns `Result<(), E>`, where `E` is `StepError`, a \
                 `std::error::Error + Send + Sync`, `anyhow::Error`, `String` or `&str`: change \
                 the return type",
            );
        }
        let params = args
            .iter()
            .skip(1)
            .map(|arg| (types::is_named(&arg.ty, SERVICE), (*arg.ty).clone()))
            .collect();
        let (ctx, step_output) = context?;
        Some(RollbackFn {
            item,
            ctx,
            step_output,
            params,
        })
        .filter(|_| expandable && returns_unit)
    }
}

impl WorkflowFn {
    /// Reads a workflow's signature.
    pub(crate) fn from_syn(item: ItemFn, errors: &mut Errors) -> Option<Self> {
        let expandable = check_shape(&item, "workflow", errors);
        let args = typed_args(&item);
        let [ctx, input] = args.as_slice() else {
            errors.spanned(
                &item.sig.inputs,
                "a workflow takes two parameters: `(ctx: WorkflowContext, input: Input)`; use \
                 a struct (or a tuple) to pass several values, `()` to pass none",
            );
            return None;
        };
        if !types::is_named(&ctx.ty, WORKFLOW_CONTEXT) {
            errors.spanned(
                &ctx.ty,
                "the first parameter of a workflow is its context: `ctx: WorkflowContext`",
            );
            return None;
        }
        let Some(output) = types::result_ok(&item.sig.output).cloned() else {
            errors.spanned(
                return_span(&item),
                "a workflow returns `Result<Output, E>`, where `E` is `WorkflowError`, your \
                 own error type (`Serialize + DeserializeOwned + Display`: the caller gets it \
                 back with `failure.downcast::<E>()`), a `std::error::Error + Send + Sync`, \
                 `anyhow::Error`, `String` or `&str`; change the return type",
            );
            return None;
        };
        Some(WorkflowFn {
            ctx: binding(&ctx.pat),
            input: (*input.ty).clone(),
            output,
            item,
        })
        .filter(|_| expandable)
    }
}

/// Checks what every annotated function shares: `async`, no generics, no
/// `self`. Records the problems; returns whether the function can still be
/// expanded (a missing `async` can: the expansion adds it).
fn check_shape(item: &ItemFn, kind: &str, errors: &mut Errors) -> bool {
    let sig = &item.sig;
    if sig.asyncness.is_none() {
        errors.spanned(
            sig.fn_token,
            format!(
                "#[{kind}] goes on an `async fn`: write `async fn {}`",
                sig.ident
            ),
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.spanned(
            &sig.generics,
            format!(
                "a {kind} function cannot be generic: the engine stores and restores its \
                 values, which needs one concrete type for each; replace the type parameters \
                 with concrete types"
            ),
        );
        return false;
    }
    if let Some(receiver) = sig.receiver() {
        errors.spanned(
            receiver,
            format!("#[{kind}] goes on a free function, not a method: move it out of the `impl`"),
        );
        return false;
    }
    if let Some(variadic) = &sig.variadic {
        errors.spanned(variadic, format!("a {kind} function cannot be variadic"));
        return false;
    }
    true
}

/// The `pat: Type` parameters (a receiver is reported by `check_shape`).
fn typed_args(item: &ItemFn) -> Vec<&PatType> {
    item.sig
        .inputs
        .iter()
        .filter_map(|arg| match arg {
            FnArg::Typed(typed) => Some(typed),
            FnArg::Receiver(_) => None,
        })
        .collect()
}

/// The identifier a parameter pattern binds: `key` in `key` or `mut key`.
fn binding(pat: &Pat) -> Option<Ident> {
    match pat {
        Pat::Ident(ident) if ident.subpat.is_none() => Some(ident.ident.clone()),
        _ => None,
    }
}

/// Where to point at a wrong return type: the type, or the name if none.
fn return_span(item: &ItemFn) -> TokenStream {
    match &item.sig.output {
        syn::ReturnType::Type(_, ty) => ty.to_token_stream(),
        syn::ReturnType::Default => item.sig.ident.to_token_stream(),
    }
}
