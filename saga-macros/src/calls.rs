//! The functions a workflow body calls as `f(&ctx, ..)`, where, and whether
//! two of its call sites can both run.
//!
//! A macro sees one item at a time, so the workflow cannot tell a `#[step]`
//! function from an ordinary helper that takes `&WorkflowContext`. This
//! module only records the call sites; the workflow's generated code then
//! asks the compiler which callees are steps (see `steps.rs`).
//!
//! Exclusive branches: every call site carries the branches it sits in, as
//! `(branch point, arm)` pairs from the outside in. Two sites are exclusive
//! when, where their paths first differ, they sit in different arms of the
//! same `if`/`else` or `match`: at most one of them runs. A site in a branch
//! and one after it, or two sites in one arm, can both run. Loops do not
//! count: a call inside a loop is one call site, its runs are numbered
//! occurrences. A `match` guard runs before its arm is chosen, so it
//! belongs to the level of the `match`.
//!
//! Patched branches: a site also says whether it sits (at any depth) in
//! the branch of a patch, `if ctx.patched("name") { here }` or
//! `if !ctx.patched("name") { .. } else { here }`: only instances that
//! reach the patch with nothing recorded past it run that branch, so a new
//! step there needs no `saga.lock` line (see `lock.rs`).

use proc_macro2::Span;
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::visit::{self, Visit};
use syn::{Block, ExprPath, PatIdent, PathArguments};

/// One arm of one branch point: `(branch point, arm)`.
type Arm = (usize, usize);

/// Where a call sits: its branches, outside in, and the callee's span.
pub(crate) struct Site {
    arms: Vec<Arm>,
    pub(crate) span: Span,
    /// Whether it sits in a patched branch.
    pub(crate) patched: bool,
}

/// A function called as `f(&ctx, ..)`, at one or more sites.
pub(crate) struct Callee {
    /// The path as written (`steps::charge`).
    pub(crate) path: syn::Path,
    /// The path as text, for messages and to recognise the callee.
    pub(crate) text: String,
    pub(crate) sites: Vec<Site>,
}

impl Callee {
    /// The first site that can run together with an earlier one, if any.
    pub(crate) fn second_site(&self) -> Option<&Site> {
        self.sites.iter().enumerate().find_map(|(at, site)| {
            self.sites[..at]
                .iter()
                .any(|earlier| !exclusive(&earlier.arms, &site.arms))
                .then_some(site)
        })
    }

    /// The first site outside every patched branch, if any.
    pub(crate) fn unpatched_site(&self) -> Option<&Site> {
        self.sites.iter().find(|site| !site.patched)
    }

    /// The function's own name: `charge` in `steps::charge`.
    pub(crate) fn ident(&self) -> String {
        self.path
            .segments
            .last()
            .map(|segment| segment.ident.to_string())
            .unwrap_or_default()
    }
}

/// Whether at most one of two sites can run (see the module docs).
fn exclusive(a: &[Arm], b: &[Arm]) -> bool {
    a.iter()
        .zip(b)
        .find(|(x, y)| x != y)
        .is_some_and(|((point_a, _), (point_b, _))| point_a == point_b)
}

/// The call sites of a workflow body, filled while the body is walked.
#[derive(Default)]
pub(crate) struct CallSites {
    /// The branch arms the walk is in, outside in.
    arms: Vec<Arm>,
    branch_points: usize,
    /// How many patched branches the walk is in.
    patched: usize,
    /// Variables bound in the body: calling one is not calling a function.
    locals: Vec<String>,
    pub(crate) callees: Vec<Callee>,
}

impl CallSites {
    /// Call sites of a body whose local bindings are those of `block` and
    /// `params`.
    pub(crate) fn new(block: &Block, params: impl IntoIterator<Item = String>) -> Self {
        let mut locals = Locals(params.into_iter().collect());
        locals.visit_block(block);
        CallSites {
            locals: locals.0,
            ..CallSites::default()
        }
    }

    /// A new branch point (an `if` or a `match`); its arms are entered
    /// with `enter`.
    pub(crate) fn branch_point(&mut self) -> usize {
        self.branch_points += 1;
        self.branch_points
    }

    /// Enters arm `arm` of `point`; `leave` goes back out.
    pub(crate) fn enter(&mut self, point: usize, arm: usize) {
        self.arms.push((point, arm));
    }

    pub(crate) fn leave(&mut self) {
        self.arms.pop();
    }

    /// Enters a patched branch; `leave_patch` goes back out.
    pub(crate) fn enter_patch(&mut self) {
        self.patched += 1;
    }

    pub(crate) fn leave_patch(&mut self) {
        self.patched = self.patched.saturating_sub(1);
    }

    /// Whether the walk is in a patched branch.
    pub(crate) fn in_patch(&self) -> bool {
        self.patched > 0
    }

    /// Records a call of `callee` with `&ctx` first. Callees that cannot be
    /// `#[step]` functions are left out: local variables, associated
    /// functions (`Type::f`, `Self::f`), paths with generic arguments (a
    /// step is not generic) and names starting with a capital letter
    /// (constructors).
    pub(crate) fn record(&mut self, callee: &ExprPath) {
        if !self.may_be_step(callee) {
            return;
        }
        let text = path_string(&callee.path);
        let site = Site {
            arms: self.arms.clone(),
            span: callee.span(),
            patched: self.in_patch(),
        };
        match self.callees.iter_mut().find(|known| known.text == text) {
            Some(known) => known.sites.push(site),
            None => self.callees.push(Callee {
                path: callee.path.clone(),
                text,
                sites: vec![site],
            }),
        }
    }

    /// Whether `path` is a variable bound in the body (or a parameter).
    pub(crate) fn binds(&self, path: &syn::Path) -> bool {
        path.leading_colon.is_none()
            && path.segments.len() == 1
            && self.locals.contains(&path.segments[0].ident.to_string())
    }

    fn may_be_step(&self, callee: &ExprPath) -> bool {
        let segments = &callee.path.segments;
        let capitalised = segments.iter().any(|segment| {
            let ident = segment.ident.to_string();
            ident.starts_with(|c: char| c.is_ascii_uppercase())
        });
        callee.qself.is_none()
            && !capitalised
            && !self.binds(&callee.path)
            && segments
                .iter()
                .all(|segment| matches!(segment.arguments, PathArguments::None))
    }
}

/// The path as written, without spaces: `crate::steps::charge`.
pub(crate) fn path_string(path: &syn::Path) -> String {
    path.to_token_stream()
        .to_string()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

/// Collects the identifiers that patterns bind (`let f = ..`, `|f| ..`).
struct Locals(Vec<String>);

impl Visit<'_> for Locals {
    fn visit_pat_ident(&mut self, pat: &PatIdent) {
        self.0.push(pat.ident.to_string());
        visit::visit_pat_ident(self, pat);
    }
}

#[cfg(test)]
mod tests {
    use super::exclusive;

    #[test]
    fn sites_in_different_arms_of_one_branch_point_are_exclusive() {
        assert!(exclusive(&[(1, 0)], &[(1, 1)]));
        assert!(exclusive(&[(1, 1), (2, 0)], &[(1, 0)]));
        assert!(exclusive(&[(1, 0), (2, 0)], &[(1, 0), (2, 1)]));
    }

    #[test]
    fn sites_in_one_arm_or_in_and_after_a_branch_are_not() {
        assert!(!exclusive(&[(1, 0)], &[(1, 0)]));
        assert!(!exclusive(&[(1, 0)], &[]));
        assert!(!exclusive(&[], &[]));
        assert!(!exclusive(&[(1, 0)], &[(2, 1)]));
        assert!(!exclusive(&[(1, 0), (2, 0)], &[(1, 0)]));
    }
}
