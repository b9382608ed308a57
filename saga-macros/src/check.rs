//! Stage 3: the rules that need more than one piece of the input: a step's
//! key against its `read_only` flag, a rollback handler's use of its key, a
//! workflow body's calls.

use syn::visit::Visit;
use syn::visit_mut::VisitMut;

use crate::ast::{Param, ParamKind, RollbackFn, StepFn, WorkflowFn};
use crate::attr::StepArgs;
use crate::body::{BodySummary, WorkflowChecker};
use crate::calls::CallSites;
use crate::errors::Errors;
use crate::usage;

/// The rules of a step's signature against its attribute.
pub(crate) fn step(args: &StepArgs, step: &StepFn, errors: &mut Errors) {
    redacted_inputs(args, step, errors);
    idempotency_key(args, step, errors);
}

/// `redact = [..]` names inputs of the step, each once.
fn redacted_inputs(args: &StepArgs, step: &StepFn, errors: &mut Errors) {
    let inputs: Vec<String> = step
        .inputs()
        .filter_map(|param| param.binding.as_ref().map(ToString::to_string))
        .collect();
    let mut seen: Vec<String> = Vec::new();
    for name in &args.redact {
        let value = name.value();
        if seen.contains(&value) {
            errors.spanned(
                name,
                format!("`redact` names {value:?} twice: remove one of the two"),
            );
            continue;
        }
        seen.push(value.clone());
        if inputs.contains(&value) {
            continue;
        }
        let known = match inputs.as_slice() {
            [] => "this step takes no inputs".to_owned(),
            names => format!(
                "its inputs are {}",
                names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        errors.spanned(
            name,
            format!(
                "`redact` names {value:?}, which is not an input of this step ({known}); \
                 name the parameters whose values `saga show` must hide"
            ),
        );
    }
}

/// A step with side effects takes an idempotency key and uses it.
fn idempotency_key(args: &StepArgs, step: &StepFn, errors: &mut Errors) {
    // How the body uses a parameter (nothing, if it binds no variable).
    let usage = |param: &Param| {
        let block = &step.item.block;
        param
            .binding
            .as_ref()
            .map(|var| usage::usage(var, |v| v.visit_block(block)))
            .unwrap_or_default()
    };
    if let Some(key) = step.injected(ParamKind::Key) {
        if !usage(key).any() {
            errors.push(syn::Error::new(
                key.span,
                "this step never uses its idempotency key: pass it to the call with side \
                 effects (e.g. `key.as_str()` as the request's idempotency key) so a retried \
                 attempt is applied once; if the step changes nothing, remove the parameter \
                 and mark the step `read_only` (a leading `_` does not silence this)",
            ));
        }
        return;
    }
    if args.read_only {
        return;
    }
    match step.injected(ParamKind::StepContext) {
        Some(context) => {
            if !usage(context).may_use_key() {
                errors.push(syn::Error::new(
                    context.span,
                    "this step never uses its idempotency key: pass `step.key().as_str()` to \
                     the call with side effects so a retried attempt is applied once, or take \
                     `key: IdempotencyKey` as well; if the step changes nothing, mark it \
                     `read_only`",
                ));
            }
        }
        None => errors.spanned(
            &step.item.sig.ident,
            format!(
                "the step `{}` has no idempotency key: add a `key: IdempotencyKey` parameter \
                 and pass `key.as_str()` to the call with side effects, so a retried attempt \
                 is applied once; if the step changes nothing, mark it read-only: \
                 #[step(name = \"..\", read_only)]",
                step.item.sig.ident
            ),
        ),
    }
}

/// A rollback handler uses `ctx.key()`.
pub(crate) fn rollback(handler: &RollbackFn, errors: &mut Errors) {
    let block = &handler.item.block;
    let used = handler
        .ctx
        .as_ref()
        .is_some_and(|var| usage::usage(var, |v| v.visit_block(block)).may_use_key());
    if !used {
        let first = handler.item.sig.inputs.first();
        let message = "this rollback handler never uses its idempotency key: pass \
                       `ctx.key().as_str()` to the compensating call (refund, release, \
                       delete, ...) so a retried rollback is applied once";
        match first {
            Some(first) => errors.spanned(first, message),
            None => errors.spanned(&handler.item.sig.ident, message),
        }
    }
}

/// A workflow body is deterministic and names each durable call once.
/// Names that are not literals are replaced (see `WorkflowChecker`).
/// Returns the names and call sites, for the checks the generated code
/// makes (`steps`) and for `saga.lock`.
pub(crate) fn workflow(workflow: &mut WorkflowFn, errors: &mut Errors) -> BodySummary {
    let params = workflow.item.sig.inputs.iter().filter_map(|arg| match arg {
        syn::FnArg::Typed(typed) => match &*typed.pat {
            syn::Pat::Ident(ident) => Some(ident.ident.to_string()),
            _ => None,
        },
        syn::FnArg::Receiver(_) => None,
    });
    let calls = CallSites::new(&workflow.item.block, params);
    let mut checker = WorkflowChecker::new(workflow.ctx.clone(), calls, errors);
    checker.visit_block_mut(&mut workflow.item.block);
    checker.into_summary()
}
