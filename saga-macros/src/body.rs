//! What a workflow body calls: the determinism and name checks, and the
//! call sites it records for the step checks (`calls`).
//!
//! Macro arguments are looked into too: they are parsed as expressions when
//! they are (`tokio::join!(a(&ctx, x), b(&ctx, y))`), otherwise their tokens
//! are scanned for forbidden paths.

use proc_macro2::{Ident, TokenStream, TokenTree};
use quote::ToTokens;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::visit_mut::{self, VisitMut};
use syn::{
    Expr, ExprCall, ExprClosure, ExprIf, ExprMatch, ExprMethodCall, ExprPath, LitStr, Macro, Pat,
    Token,
};

use crate::calls::CallSites;
use crate::duration;
use crate::errors::Errors;
use crate::forbidden::forbidden;
use crate::name;
use crate::usage::{is_var, usage};

/// Whether `expr` is `&var`.
fn is_ref_to(expr: &Expr, var: &Ident) -> bool {
    match expr {
        Expr::Reference(reference) => {
            reference.mutability.is_none() && is_var(&reference.expr, var)
        }
        Expr::Paren(paren) => is_ref_to(&paren.expr, var),
        Expr::Group(group) => is_ref_to(&group.expr, var),
        _ => false,
    }
}

/// The durable operations a workflow body calls on its context: the method,
/// what its first argument names, its kind in `saga.lock`, and which
/// argument (if any) is a duration.
const CONTEXT_CALLS: &[(&str, name::Kind, &str, Option<usize>)] = &[
    ("step", "step name", "step", None),
    ("step_with_context", "step name", "step", None),
    ("sleep", "sleep name", "sleep", Some(1)),
    ("sleep_until", "sleep name", "sleep", None),
    ("wait_for_event", "event wait name", "event", Some(2)),
];

/// A name literal given to `ctx.step`, `ctx.sleep`, `ctx.wait_for_event`.
pub(crate) struct LiteralName {
    /// `step`, `sleep` or `event`: its kind in `saga.lock`.
    pub(crate) kind: &'static str,
    /// The method called, for messages: `ctx.sleep`.
    pub(crate) method: &'static str,
    pub(crate) literal: LitStr,
}

/// What a workflow body uses: its literal names and the functions it calls
/// with `&ctx`.
pub(crate) struct BodySummary {
    pub(crate) names: Vec<LiteralName>,
    pub(crate) calls: CallSites,
}

/// Checks a workflow body: determinism, names, and call sites.
pub(crate) struct WorkflowChecker<'e> {
    /// The workflow's context variable, if it binds one.
    ctx: Option<Ident>,
    errors: &'e mut Errors,
    /// Names given to `ctx.step(..)`, `ctx.sleep(..)`, `ctx.wait_for_event(..)`.
    names: Vec<LiteralName>,
    /// The functions called with `&ctx` first, and where.
    calls: CallSites,
    /// How many invalid names were replaced.
    replaced: usize,
}

impl<'e> WorkflowChecker<'e> {
    /// A checker for a body whose context variable is `ctx`, and whose
    /// call sites are recorded in `calls`.
    pub(crate) fn new(ctx: Option<Ident>, calls: CallSites, errors: &'e mut Errors) -> Self {
        WorkflowChecker {
            ctx,
            errors,
            names: Vec::new(),
            calls,
            replaced: 0,
        }
    }

    /// What the walk found.
    pub(crate) fn into_summary(self) -> BodySummary {
        BodySummary {
            names: self.names,
            calls: self.calls,
        }
    }

    /// Checks the name argument of a context call and remembers it. A name
    /// that is not a literal is replaced by one (still evaluating the
    /// original), so its type does not cause a second error.
    fn check_name(
        &mut self,
        arg: &mut Expr,
        kind: name::Kind,
        lock_kind: &'static str,
        method: &'static str,
    ) {
        let literal = match name::literal(arg, kind) {
            Ok(literal) => literal,
            Err(error) => {
                self.errors.push(error);
                let span = arg.span();
                *arg = syn::parse_quote_spanned!(span=> {
                    let _ = &#arg;
                    "invalid-name"
                });
                self.replaced += 1;
                return;
            }
        };
        if let Err(error) = name::check(&literal, kind) {
            return self.errors.push(error);
        }
        self.remember_name(LiteralName {
            kind: lock_kind,
            method,
            literal,
        });
    }

    fn remember_name(&mut self, name: LiteralName) {
        let value = name.literal.value();
        if self
            .names
            .iter()
            .any(|known| known.literal.value() == value)
        {
            self.errors.push(syn::Error::new(
                name.literal.span(),
                format!(
                    "the name {value:?} is already used by another step, sleep or event wait \
                     of this workflow: each call site needs its own name, or replay would \
                     mix up their results; rename one of them (a call inside a loop is fine: \
                     its runs are counted as occurrences 0, 1, 2, ...)"
                ),
            ));
        } else {
            self.names.push(name);
        }
    }

    /// `ctx.step("name", config, |key| async move { .. })`: the body of an
    /// inline step may do I/O, but must use its key.
    fn check_inline_step(&mut self, call: &ExprMethodCall) {
        let Some(Expr::Closure(closure)) = call.args.iter().nth(2) else {
            return;
        };
        if let Err(error) = check_closure_key(closure, call.method == "step_with_context") {
            self.errors.push(error);
        }
    }

    /// Records a call `f(&ctx, ..)`: whether `f` is a step, and so whether
    /// two call sites are a mistake, is checked by the generated code.
    fn record_call(&mut self, call: &ExprCall) {
        let (Some(ctx), Expr::Path(callee)) = (&self.ctx, &*call.func) else {
            return;
        };
        if call.args.first().is_some_and(|first| is_ref_to(first, ctx)) {
            self.calls.record(callee);
        }
    }

    fn check_path(&mut self, path: &syn::Path, tokens: &dyn ToTokens) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(advice) = forbidden(&segments) {
            self.errors.spanned(tokens, advice);
        }
    }

    /// Scans tokens that do not parse as expressions for forbidden paths.
    fn scan(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut at = 0;
        while at < trees.len() {
            match &trees[at] {
                TokenTree::Group(group) => {
                    self.scan(group.stream());
                    at += 1;
                }
                TokenTree::Ident(_) => {
                    let (path, next) = path_at(&trees, at);
                    if let Ok(parsed) = syn::parse2::<syn::Path>(path.clone()) {
                        self.check_path(&parsed, &path);
                    }
                    at = next;
                }
                _ => at += 1,
            }
        }
    }
}

/// The tokens of the path starting at `trees[at]` (`a::b::c`) and the index
/// after it.
fn path_at(trees: &[TokenTree], mut at: usize) -> (TokenStream, usize) {
    let mut path = TokenStream::new();
    while let Some(TokenTree::Ident(ident)) = trees.get(at) {
        path.extend([TokenTree::Ident(ident.clone())]);
        at += 1;
        match (trees.get(at), trees.get(at + 1)) {
            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                if a.as_char() == ':' && b.as_char() == ':' =>
            {
                path.extend([trees[at].clone(), trees[at + 1].clone()]);
                at += 2;
            }
            _ => break,
        }
    }
    (path, at)
}

/// The key check of an inline step's closure: `|key| ..` must use `key`
/// (`|step| ..` of `step_with_context` must use `step.key()`); `|_| ..`
/// declares a step without side effects.
fn check_closure_key(closure: &ExprClosure, with_context: bool) -> syn::Result<()> {
    let Some(param) = closure.inputs.first() else {
        return Ok(());
    };
    let pat = match param {
        Pat::Type(typed) => &*typed.pat,
        other => other,
    };
    let Pat::Ident(binding) = pat else {
        return Ok(());
    };
    let usage = usage(&binding.ident, |v| v.visit_expr(&closure.body));
    let used = if with_context {
        usage.may_use_key()
    } else {
        usage.any()
    };
    if used {
        return Ok(());
    }
    let how = if with_context {
        format!("`{}.key().as_str()`", binding.ident)
    } else {
        format!("`{}.as_str()`", binding.ident)
    };
    Err(syn::Error::new(
        binding.ident.span(),
        format!(
            "this inline step never uses its idempotency key `{}`: pass {how} to the call \
             with side effects so a retried attempt is applied once; if the step changes \
             nothing, write `|_|` instead",
            binding.ident
        ),
    ))
}

impl VisitMut for WorkflowChecker<'_> {
    fn visit_expr_method_call_mut(&mut self, call: &mut ExprMethodCall) {
        let on_ctx = self
            .ctx
            .as_ref()
            .is_some_and(|ctx| is_var(&call.receiver, ctx));
        let known = CONTEXT_CALLS
            .iter()
            .find(|(method, ..)| call.method == method)
            .filter(|_| on_ctx);
        let Some((method, kind, lock_kind, duration_at)) = known else {
            return visit_mut::visit_expr_method_call_mut(self, call);
        };
        if let Some(name) = call.args.first_mut() {
            self.check_name(name, kind, lock_kind, method);
        }
        if let Some(duration) = duration_at.and_then(|at| call.args.iter().nth(at))
            && let Err(error) = duration::check_literal(duration)
        {
            self.errors.push(error);
        }
        if method.starts_with("step") {
            // An inline step's body is step code: I/O is its purpose.
            self.check_inline_step(call);
            for arg in call.args.iter_mut().take(2) {
                self.visit_expr_mut(arg);
            }
        } else {
            for arg in call.args.iter_mut() {
                self.visit_expr_mut(arg);
            }
        }
    }

    fn visit_expr_call_mut(&mut self, call: &mut ExprCall) {
        self.record_call(call);
        visit_mut::visit_expr_call_mut(self, call);
    }

    // if cond { then } else { other }: the condition runs before the branch.
    fn visit_expr_if_mut(&mut self, expr: &mut ExprIf) {
        self.visit_expr_mut(&mut expr.cond);
        let point = self.calls.branch_point();
        self.calls.enter(point, 0);
        self.visit_block_mut(&mut expr.then_branch);
        self.calls.leave();
        if let Some((_, other)) = &mut expr.else_branch {
            self.calls.enter(point, 1);
            self.visit_expr_mut(other);
            self.calls.leave();
        }
    }

    // match scrutinee { pat if guard => body, .. }: guards run before an arm
    // is chosen.
    fn visit_expr_match_mut(&mut self, expr: &mut ExprMatch) {
        self.visit_expr_mut(&mut expr.expr);
        let point = self.calls.branch_point();
        for (index, arm) in expr.arms.iter_mut().enumerate() {
            // The guard is part of the pattern (`Pat::Guard`).
            self.visit_pat_mut(&mut arm.pat);
            self.calls.enter(point, index);
            self.visit_expr_mut(&mut arm.body);
            self.calls.leave();
        }
    }

    fn visit_expr_path_mut(&mut self, path: &mut ExprPath) {
        self.check_path(&path.path, path);
        visit_mut::visit_expr_path_mut(self, path);
    }

    fn visit_macro_mut(&mut self, mac: &mut Macro) {
        let args = Punctuated::<Expr, Token![,]>::parse_terminated.parse2(mac.tokens.clone());
        match args {
            Ok(mut args) => {
                let replaced = self.replaced;
                for arg in args.iter_mut() {
                    self.visit_expr_mut(arg);
                }
                if self.replaced != replaced {
                    mac.tokens = args.to_token_stream();
                }
            }
            Err(_) => self.scan(mac.tokens.clone()),
        }
    }
}
