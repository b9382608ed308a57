//! What a workflow body calls: the determinism and name checks, and the
//! call sites it records for the step checks (`calls`) and the child calls
//! it records for `Workflow::children` (`children`).
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
    Block, Expr, ExprCall, ExprClosure, ExprIf, ExprMatch, ExprMethodCall, ExprPath, LitStr, Local,
    Macro, Pat, PatIdent, Token,
};

use crate::calls::CallSites;
use crate::children::{self, ChildUse};
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

/// A durable operation a workflow body calls on its context: the method,
/// what its first argument names, its kind in `saga.lock`, and which
/// argument (if any) is a duration.
type ContextCall = (&'static str, name::Kind, &'static str, Option<usize>);

/// The durable operations a workflow body calls on its context.
const CONTEXT_CALLS: &[ContextCall] = &[
    ("step", "step name", "step", None),
    ("step_with_context", "step name", "step", None),
    ("sleep", "sleep name", "sleep", Some(1)),
    ("sleep_until", "sleep name", "sleep", None),
    ("wait_for_event", "event wait name", "event", Some(2)),
    // The name is the update's too: the workflow declares it.
    ("take_update", "update name", "update", Some(1)),
    (children::CHILD, "child name", "child", None),
];

/// What the literal of `.renamed_from("old")` on a child call names.
const OLD_CHILD_NAME: name::Kind = "old child name";

/// `ctx.patched("name")`: not a durable call (it takes no slot), but its
/// name is recorded as a patch, and the branch it guards is patched.
const PATCHED: &str = "patched";

/// What the literal of `ctx.patched("name")` names.
const PATCH_NAME: name::Kind = "patch name";

/// `ctx.publish("name", &value)`: not a durable call (it takes no slot),
/// but readers outside find the value by its name.
const PUBLISH: &str = "publish";

/// What the literal of `ctx.publish("name", ..)` names.
const PUBLISHED_NAME: name::Kind = "published name";

/// A name literal given to `ctx.step`, `ctx.sleep`, `ctx.wait_for_event`,
/// `ctx.child`.
pub(crate) struct LiteralName {
    /// `step`, `sleep`, `event` or `child`: its kind in `saga.lock`.
    pub(crate) kind: &'static str,
    /// The method called, for messages: `ctx.sleep`.
    pub(crate) method: &'static str,
    pub(crate) literal: LitStr,
    /// The name earlier releases gave the call: `.renamed_from("old")` on
    /// a child call.
    pub(crate) renamed_from: Option<LitStr>,
    /// Whether the call sits in a patched branch (see `calls`).
    pub(crate) patched: bool,
}

impl LiteralName {
    /// Whether the call is known by `value`, as its name or its old name.
    pub(crate) fn answers_to(&self, value: &str) -> bool {
        self.literal.value() == value
            || self
                .renamed_from
                .as_ref()
                .is_some_and(|old| old.value() == value)
    }
}

/// What a workflow body uses: its literal names, the functions it calls
/// with `&ctx` and the child workflows it calls.
pub(crate) struct BodySummary {
    pub(crate) names: Vec<LiteralName>,
    /// The names given to `ctx.patched(..)`, each once.
    pub(crate) patches: Vec<LitStr>,
    pub(crate) calls: CallSites,
    pub(crate) children: Vec<ChildUse>,
}

/// Checks a workflow body: determinism, names, and call sites.
pub(crate) struct WorkflowChecker<'e> {
    /// The workflow's context variable, if it binds one.
    ctx: Option<Ident>,
    errors: &'e mut Errors,
    /// Names given to `ctx.step(..)`, `ctx.sleep(..)`, `ctx.wait_for_event(..)`,
    /// `ctx.child(..)`.
    names: Vec<LiteralName>,
    /// Names given to `ctx.patched(..)`, each once.
    patches: Vec<LitStr>,
    /// The functions called with `&ctx` first, and where.
    calls: CallSites,
    /// The `ctx.child(..)` calls with a literal name.
    children: Vec<ChildUse>,
    /// How many invalid names were replaced.
    replaced: usize,
    /// The local names bound so far in the blocks being walked, innermost
    /// last: `true` for a patch held in a variable, `let p =
    /// ctx.patched("x");`, which `if p { .. }` then reads as the call.
    /// Any other binding of the name shadows it.
    bindings: Vec<(Ident, bool)>,
}

impl<'e> WorkflowChecker<'e> {
    /// A checker for a body whose context variable is `ctx`, and whose
    /// call sites are recorded in `calls`.
    pub(crate) fn new(ctx: Option<Ident>, calls: CallSites, errors: &'e mut Errors) -> Self {
        WorkflowChecker {
            ctx,
            errors,
            names: Vec::new(),
            patches: Vec::new(),
            calls,
            children: Vec::new(),
            replaced: 0,
            bindings: Vec::new(),
        }
    }

    /// What the walk found.
    pub(crate) fn into_summary(self) -> BodySummary {
        BodySummary {
            names: self.names,
            patches: self.patches,
            calls: self.calls,
            children: self.children,
        }
    }

    /// Checks the name argument of a context call and remembers it; returns
    /// it when it is a valid literal.
    fn check_name(
        &mut self,
        arg: &mut Expr,
        kind: name::Kind,
        lock_kind: &'static str,
        method: &'static str,
    ) -> Option<LitStr> {
        let literal = self.checked_literal(arg, kind)?;
        self.remember_name(LiteralName {
            kind: lock_kind,
            method,
            literal: literal.clone(),
            renamed_from: None,
            patched: self.calls.in_patch(),
        })
        .then_some(literal)
    }

    /// The literal of a name argument, if it is one and is spelled right.
    /// A name that is not a literal is replaced by one (still evaluating
    /// the original), so its type does not cause a second error.
    fn checked_literal(&mut self, arg: &mut Expr, kind: name::Kind) -> Option<LitStr> {
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
                return None;
            }
        };
        self.errors.ok(name::check(&literal, kind))?;
        Some(literal)
    }

    /// Remembers a name, unless another call of the workflow already
    /// answers to it (the error is then reported). Returns whether it was
    /// remembered.
    fn remember_name(&mut self, name: LiteralName) -> bool {
        let value = name.literal.value();
        if !self.names.iter().any(|known| known.answers_to(&value)) {
            self.names.push(name);
            return true;
        }
        self.errors.push(syn::Error::new(
            name.literal.span(),
            format!(
                "the name {value:?} is already used by another step, sleep, event wait or \
                 child of this workflow: each call site needs its own name, or replay would \
                 mix up their results; rename one of them (a call inside a loop is fine: \
                 its runs are counted as occurrences 0, 1, 2, ...)"
            ),
        ));
        false
    }

    /// `.renamed_from("old")` on the child call remembered as `names[at]`:
    /// checks the old name and records it.
    fn check_old_child_name(&mut self, arg: &mut Expr, at: usize) {
        let Some(old) = self.checked_literal(arg, OLD_CHILD_NAME) else {
            return;
        };
        let value = old.value();
        let current = &self.names[at];
        let problem = if current.renamed_from.is_some() {
            Some(
                "this child call already has a `.renamed_from(..)`: a call has one old name; \
                  remove one of them"
                    .to_owned(),
            )
        } else if current.literal.value() == value {
            Some(format!(
                "`.renamed_from({value:?})` names the child's current name: give the name the \
                 call had before, or remove `.renamed_from(..)`"
            ))
        } else if self.names.iter().any(|known| known.answers_to(&value)) {
            Some(format!(
                "the old child name {value:?} is used by another step, sleep, event wait or \
                 child of this workflow: replay would find that call's results under it; \
                 give the name this call had before, or rename the other call"
            ))
        } else {
            None
        };
        match problem {
            Some(message) => self.errors.push(syn::Error::new(old.span(), message)),
            None => self.names[at].renamed_from = Some(old),
        }
    }

    /// Whether `call` is `ctx.patched(..)`.
    fn is_patched_call(&self, call: &ExprMethodCall) -> bool {
        self.is_call_on_ctx(call, PATCHED)
    }

    /// Whether `call` is `ctx.<method>(..)`.
    fn is_call_on_ctx(&self, call: &ExprMethodCall, method: &str) -> bool {
        call.method == method
            && self
                .ctx
                .as_ref()
                .is_some_and(|ctx| is_var(&call.receiver, ctx))
    }

    /// `ctx.publish("name", &value)`: the name is a literal spelled as
    /// step names are (readers outside ask for it by that name). It is
    /// not a call site's name: a step may share it.
    fn check_publish(&mut self, call: &mut ExprMethodCall) {
        if let Some(arg) = call.args.first_mut() {
            self.checked_literal(arg, PUBLISHED_NAME);
        }
        for arg in call.args.iter_mut() {
            self.visit_expr_mut(arg);
        }
    }

    /// `ctx.patched("name")`: the name is a literal spelled as step names
    /// are (it is stored, and `saga.lock` records it); remembered once.
    fn check_patch(&mut self, call: &mut ExprMethodCall) {
        if let Some(arg) = call.args.first_mut()
            && let Some(literal) = self.checked_literal(arg, PATCH_NAME)
            && !self
                .patches
                .iter()
                .any(|known| known.value() == literal.value())
        {
            self.patches.push(literal);
        }
        for arg in call.args.iter_mut() {
            self.visit_expr_mut(arg);
        }
    }

    /// Whether `path` is a variable that holds `ctx.patched(..)`: bound
    /// with `let` (not `mut`, so nothing assigns it later) to the call
    /// itself, and not shadowed since.
    fn holds_a_patch(&self, path: &ExprPath) -> bool {
        let Some(name) = path.path.get_ident() else {
            return false;
        };
        path.qself.is_none()
            && self
                .bindings
                .iter()
                .rev()
                .find(|(bound, _)| bound == name)
                .is_some_and(|(_, patch)| *patch)
    }

    /// The variable of `let p = ctx.patched("x");` (or `let p: bool =
    /// ..`), bound once and immutably.
    fn patch_binding(&self, local: &Local) -> Option<Ident> {
        let pat = match &local.pat {
            Pat::Type(typed) => &*typed.pat,
            pat => pat,
        };
        let Pat::Ident(PatIdent {
            by_ref: None,
            mutability: None,
            subpat: None,
            ident,
            ..
        }) = pat
        else {
            return None;
        };
        let init = local.init.as_ref().filter(|init| init.diverge.is_none())?;
        match &*init.expr {
            Expr::MethodCall(call) if self.is_patched_call(call) => Some(ident.clone()),
            _ => None,
        }
    }

    /// Which branch of `if cond { .. } else { .. }` a patch guards:
    /// `Some(true)`, the first, for `ctx.patched("x")` (or `ctx.patched("x")
    /// && more`); `Some(false)`, the `else`, for `!ctx.patched("x")` (or
    /// `!ctx.patched("x") || more`); `None` for any other condition.
    fn patched_branch(&self, cond: &Expr) -> Option<bool> {
        match cond {
            Expr::Paren(paren) => self.patched_branch(&paren.expr),
            Expr::Group(group) => self.patched_branch(&group.expr),
            Expr::Unary(unary) if matches!(unary.op, syn::UnOp::Not(_)) => {
                self.patched_branch(&unary.expr).map(|branch| !branch)
            }
            Expr::MethodCall(call) if self.is_patched_call(call) => Some(true),
            Expr::Path(path) if self.holds_a_patch(path) => Some(true),
            Expr::Binary(binary) => {
                let sides = [
                    self.patched_branch(&binary.left),
                    self.patched_branch(&binary.right),
                ];
                match binary.op {
                    // The first branch runs only when both hold.
                    syn::BinOp::And(_) if sides.contains(&Some(true)) => Some(true),
                    // The `else` runs only when neither holds.
                    syn::BinOp::Or(_) if sides.contains(&Some(false)) => Some(false),
                    _ => None,
                }
            }
            _ => None,
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

    /// The entry of `CONTEXT_CALLS` that `call` makes, if it is a call on
    /// the context.
    fn context_call(&self, call: &ExprMethodCall) -> Option<&'static ContextCall> {
        let on_ctx = self
            .ctx
            .as_ref()
            .is_some_and(|ctx| is_var(&call.receiver, ctx));
        CONTEXT_CALLS
            .iter()
            .find(|(method, ..)| call.method == method)
            .filter(|_| on_ctx)
    }

    /// Checks a durable context call: its name, its duration, its
    /// arguments. Returns where its name was remembered in `names`.
    fn check_context_call(
        &mut self,
        call: &mut ExprMethodCall,
        (method, kind, lock_kind, duration_at): &'static ContextCall,
    ) -> Option<usize> {
        let name = call
            .args
            .first_mut()
            .and_then(|name| self.check_name(name, kind, lock_kind, method));
        let remembered = name.as_ref().map(|_| self.names.len() - 1);
        if let Some(duration) = duration_at.and_then(|at| call.args.iter().nth(at))
            && let Err(error) = duration::check_literal(duration)
        {
            self.errors.push(error);
        }
        if let (Some(name), true) = (name, *method == children::CHILD) {
            self.record_child(call, name);
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
        remembered
    }

    /// `ctx.child("name", workflow, input).no_rollback().renamed_from("old")`:
    /// the builder calls on a child call, checked with it; the old name is
    /// recorded with the call's name. Returns where that name was
    /// remembered in `names`.
    fn check_child_chain(&mut self, call: &mut ExprMethodCall) -> Option<usize> {
        let at = match &mut *call.receiver {
            Expr::MethodCall(receiver) => match self.context_call(receiver) {
                Some(known) => self.check_context_call(receiver, known),
                None => self.check_child_chain(receiver),
            },
            _ => None,
        };
        if call.method == children::RENAMED_FROM
            && let Some(old) = call.args.first_mut()
        {
            match at {
                Some(at) => self.check_old_child_name(old, at),
                None => {
                    self.checked_literal(old, OLD_CHILD_NAME);
                }
            }
        }
        at
    }

    /// Records the child call `call` named `name`, for `children()`: its
    /// workflow, when it is a path that is not a variable of the body.
    fn record_child(&mut self, call: &ExprMethodCall, name: LitStr) {
        let workflow = call
            .args
            .iter()
            .nth(1)
            .and_then(children::workflow_path)
            .filter(|path| !self.calls.binds(path))
            .cloned();
        self.children.push(ChildUse { name, workflow });
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
        let is_child_call = |call: &ExprMethodCall| {
            call.method == children::CHILD && self.context_call(call).is_some()
        };
        if children::is_builder_on_child(call, &is_child_call) {
            self.check_child_chain(call);
            return;
        }
        if self.is_patched_call(call) {
            self.check_patch(call);
            return;
        }
        if self.is_call_on_ctx(call, PUBLISH) {
            self.check_publish(call);
            return;
        }
        match self.context_call(call) {
            Some(known) => {
                self.check_context_call(call, known);
            }
            None => visit_mut::visit_expr_method_call_mut(self, call),
        }
    }

    fn visit_expr_call_mut(&mut self, call: &mut ExprCall) {
        self.record_call(call);
        visit_mut::visit_expr_call_mut(self, call);
    }

    // if cond { then } else { other }: the condition runs before the
    // branch. A patch (`ctx.patched("x")`) makes one branch patched.
    fn visit_expr_if_mut(&mut self, expr: &mut ExprIf) {
        let patched = self.patched_branch(&expr.cond);
        self.visit_expr_mut(&mut expr.cond);
        let point = self.calls.branch_point();
        self.calls.enter(point, 0);
        if patched == Some(true) {
            self.calls.enter_patch();
        }
        self.visit_block_mut(&mut expr.then_branch);
        if patched == Some(true) {
            self.calls.leave_patch();
        }
        self.calls.leave();
        if let Some((_, other)) = &mut expr.else_branch {
            self.calls.enter(point, 1);
            if patched == Some(false) {
                self.calls.enter_patch();
            }
            self.visit_expr_mut(other);
            if patched == Some(false) {
                self.calls.leave_patch();
            }
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

    // The names a block binds go out of scope with it.
    fn visit_block_mut(&mut self, block: &mut Block) {
        let outer = self.bindings.len();
        visit_mut::visit_block_mut(self, block);
        self.bindings.truncate(outer);
    }

    // `let p = ctx.patched("x");` holds a patch; any other binding of a
    // name (a `let`, a closure's or a match arm's pattern) shadows it.
    fn visit_local_mut(&mut self, local: &mut Local) {
        let patch = self.patch_binding(local);
        visit_mut::visit_local_mut(self, local);
        if let Some(name) = patch {
            self.bindings.push((name, true));
        }
    }

    fn visit_pat_ident_mut(&mut self, pat: &mut PatIdent) {
        self.bindings.push((pat.ident.clone(), false));
        visit_mut::visit_pat_ident_mut(self, pat);
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

#[cfg(test)]
mod tests {
    use syn::visit_mut::VisitMut;

    use super::{BodySummary, WorkflowChecker};
    use crate::calls::CallSites;
    use crate::errors::Errors;

    /// The summary of a workflow body whose context is `ctx`, and whether
    /// it had errors.
    fn summary(body: &str) -> (BodySummary, bool) {
        let mut block: syn::Block = syn::parse_str(body).unwrap_or_else(|e| panic!("{e}"));
        let mut errors = Errors::default();
        let calls = CallSites::new(&block, ["ctx".to_owned(), "input".to_owned()]);
        let ctx = syn::parse_str("ctx").ok();
        let mut checker = WorkflowChecker::new(ctx, calls, &mut errors);
        checker.visit_block_mut(&mut block);
        let summary = checker.into_summary();
        (summary, !errors.is_empty())
    }

    #[test]
    fn a_child_call_is_a_name_and_a_child() {
        let (body, failed) = summary(
            r#"{
                ctx.child("book-flight", book_flight, input).await?;
                ctx.child("book-hotel", hotels::book, input).no_rollback().await?;
            }"#,
        );
        assert!(!failed);
        let names: Vec<_> = body
            .names
            .iter()
            .map(|n| (n.kind, n.literal.value()))
            .collect();
        assert_eq!(
            names,
            [
                ("child", "book-flight".to_owned()),
                ("child", "book-hotel".to_owned())
            ]
        );
        let paths: Vec<_> = body
            .children
            .iter()
            .map(|c| c.workflow.as_ref().map(crate::calls::path_string))
            .collect();
        assert_eq!(
            paths,
            [
                Some("book_flight".to_owned()),
                Some("hotels::book".to_owned())
            ]
        );
    }

    #[test]
    fn renamed_from_is_read_anywhere_in_the_chain() {
        for chain in [
            r#"{ ctx.child("book-flight", w, input).renamed_from("flight").await?; }"#,
            r#"{ ctx.child("book-flight", w, input).no_rollback().renamed_from("flight").await?; }"#,
            r#"{ ctx.child("book-flight", w, input).renamed_from("flight").no_rollback().await?; }"#,
        ] {
            let (body, failed) = summary(chain);
            assert!(!failed, "{chain}");
            let old = body.names[0].renamed_from.as_ref().map(syn::LitStr::value);
            assert_eq!(old.as_deref(), Some("flight"), "{chain}");
        }
    }

    #[test]
    fn a_workflow_held_in_a_variable_is_not_listed() {
        let (body, failed) = summary(
            r#"{
                let w = book_flight;
                ctx.child("by-variable", w, input).await?;
                ctx.child("by-method", flights.pick(), input).await?;
            }"#,
        );
        assert!(!failed);
        assert_eq!(body.children.len(), 2);
        assert!(body.children.iter().all(|c| c.workflow.is_none()));
    }

    #[test]
    fn a_patch_held_in_a_variable_guards_its_branch_until_shadowed() {
        let (body, failed) = summary(
            r#"{
                let fraud = ctx.patched("fraud-check");
                if fraud {
                    fraud_check(&ctx).await?;
                }
                let wrap: bool = ctx.patched("no-gift-wrap");
                if !wrap { gift_wrap(&ctx).await?; } else { ctx.sleep("unwrapped", "1 hour").await?; }
                {
                    let fraud = input > 3;
                    if fraud { shadowed(&ctx).await?; }
                }
                if fraud && input > 3 { again(&ctx).await?; }
                let mut late = ctx.patched("late");
                if late { mutable(&ctx).await?; }
                late = false;
                let fraud = 1;
                if fraud == 1 { after(&ctx).await?; }
                items.iter().map(|wrap| wrap).count();
                if wrap { closure_shadowed(&ctx).await?; }
            }"#,
        );
        assert!(!failed);
        let patched: Vec<_> = body
            .calls
            .callees
            .iter()
            .map(|c| (c.text.clone(), c.unpatched_site().is_none()))
            .collect();
        assert_eq!(
            patched,
            [
                ("fraud_check".to_owned(), true),
                ("gift_wrap".to_owned(), false),
                ("shadowed".to_owned(), false),
                ("again".to_owned(), true),
                ("mutable".to_owned(), false),
                ("after".to_owned(), false),
                ("closure_shadowed".to_owned(), false),
            ]
        );
        let names: Vec<_> = body
            .names
            .iter()
            .map(|n| (n.literal.value(), n.patched))
            .collect();
        assert_eq!(names, [("unwrapped".to_owned(), true)]);
        let patches: Vec<_> = body.patches.iter().map(syn::LitStr::value).collect();
        assert_eq!(patches, ["fraud-check", "no-gift-wrap", "late"]);
    }

    #[test]
    fn calls_in_a_patched_branch_are_marked() {
        let (body, failed) = summary(
            r#"{
                reserve(&ctx).await?;
                if ctx.patched("fraud-check") {
                    fraud_check(&ctx).await?;
                    ctx.sleep("cool-down", "1 hour").await?;
                }
                if !ctx.patched("no-gift-wrap") {
                    gift_wrap(&ctx).await?;
                } else {
                    ctx.sleep("unwrapped", "1 hour").await?;
                }
                if ctx.patched("late") && input > 3 {
                    late(&ctx).await?;
                }
                if ctx.patched("fraud-check") || input > 3 {
                    maybe(&ctx).await?;
                }
            }"#,
        );
        assert!(!failed);
        let patched: Vec<_> = body
            .calls
            .callees
            .iter()
            .map(|c| (c.text.clone(), c.unpatched_site().is_none()))
            .collect();
        assert_eq!(
            patched,
            [
                ("reserve".to_owned(), false),
                ("fraud_check".to_owned(), true),
                ("gift_wrap".to_owned(), false),
                ("late".to_owned(), true),
                ("maybe".to_owned(), false),
            ]
        );
        let names: Vec<_> = body
            .names
            .iter()
            .map(|n| (n.literal.value(), n.patched))
            .collect();
        assert_eq!(
            names,
            [
                ("cool-down".to_owned(), true),
                ("unwrapped".to_owned(), true)
            ]
        );
        let patches: Vec<_> = body.patches.iter().map(syn::LitStr::value).collect();
        assert_eq!(patches, ["fraud-check", "no-gift-wrap", "late"]);
    }

    #[test]
    fn a_patch_name_must_be_a_literal() {
        let (body, failed) = summary(r#"{ if ctx.patched(input) { step(&ctx).await?; } }"#);
        assert!(failed);
        assert!(body.patches.is_empty());
        let (_, failed) = summary(r#"{ if ctx.patched("Fraud Check") { } }"#);
        assert!(failed);
    }

    #[test]
    fn an_old_child_name_must_be_free() {
        let (_, failed) = summary(
            r#"{
                ctx.sleep("flight", "1 day").await?;
                ctx.child("book-flight", w, input).renamed_from("flight").await?;
            }"#,
        );
        assert!(failed);
        let (_, failed) = summary(
            r#"{ ctx.child("book-flight", w, input).renamed_from("book-flight").await?; }"#,
        );
        assert!(failed);
    }
}
