//! Stage 1: the attribute arguments, `#[step(name = "..", retries = 3, ..)]`.
//!
//! One parser serves the three macros (`syn::meta::parser`). A bad value, an
//! unknown key or a duplicate key is recorded and parsing goes on, so every
//! mistake in one attribute is reported in one build.

use proc_macro2::TokenStream;
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::{Expr, Lit, LitStr, Path, Token};

use crate::duration;
use crate::errors::Errors;
use crate::name;

const NAME: &str = "name";
const RENAMED_FROM: &str = "renamed_from";
const ROLLBACK: &str = "rollback";
const RETRIES: &str = "retries";
const DELAY: &str = "delay";
const BACKOFF: &str = "backoff";
const TIMEOUT: &str = "timeout";
const READ_ONLY: &str = "read_only";
const HANDLER: &str = "handler";
const REDACT: &str = "redact";
const UPDATES: &str = "updates";
const VALIDATOR: &str = "validator";

const STEP_KEYS: &[&str] = &[
    NAME,
    RENAMED_FROM,
    ROLLBACK,
    RETRIES,
    DELAY,
    BACKOFF,
    TIMEOUT,
    READ_ONLY,
    REDACT,
];
const ROLLBACK_KEYS: &[&str] = &[RETRIES, DELAY, BACKOFF, TIMEOUT];
/// `rollback(handler = .., ..)` on a step: the handler and settings that
/// override its own for this step.
const STEP_ROLLBACK_KEYS: &[&str] = &[HANDLER, RETRIES, DELAY, BACKOFF, TIMEOUT];
const WORKFLOW_KEYS: &[&str] = &[NAME, ROLLBACK, UPDATES, VALIDATOR];

/// A value of each key, for messages.
const EXAMPLES: &[(&str, &str)] = &[
    (NAME, "\"charge-card\""),
    (RENAMED_FROM, "\"old-name\""),
    (ROLLBACK, "refund_card"),
    (HANDLER, "refund_card"),
    (RETRIES, "5"),
    (DELAY, "\"10 seconds\""),
    (BACKOFF, "\"exponential\""),
    (TIMEOUT, "\"10 minutes\""),
    (REDACT, "[\"card\"]"),
    (UPDATES, "[\"approve\"]"),
    (VALIDATOR, "check_update"),
];

/// The most retries a step or rollback handler may have (the runtime's
/// `MAX_RETRIES`).
const MAX_RETRIES: u32 = 10_000;

/// The `backoff` values, spelled as users write them.
const BACKOFFS: &[(&str, Backoff)] = &[
    ("constant", Backoff::Constant),
    ("linear", Backoff::Linear),
    ("exponential", Backoff::Exponential),
];

/// How the delay between attempts grows (mirrors `saga_runtime::Backoff`).
#[derive(Clone, Copy)]
pub(crate) enum Backoff {
    Constant,
    Linear,
    Exponential,
}

/// Retry settings of a step or a rollback handler; `None` keeps the default.
#[derive(Default)]
pub(crate) struct RetryConfig {
    pub(crate) retries: Option<u32>,
    pub(crate) delay_millis: Option<u64>,
    pub(crate) backoff: Option<Backoff>,
    pub(crate) timeout_millis: Option<u64>,
}

/// `#[step(..)]`.
#[derive(Default)]
pub(crate) struct StepArgs {
    /// `None` when missing or invalid (the error is already recorded).
    pub(crate) name: Option<LitStr>,
    /// The name earlier releases used; `None` when absent or invalid.
    pub(crate) renamed_from: Option<LitStr>,
    pub(crate) rollback: Option<Path>,
    /// Settings of `rollback(handler = .., retries = ..)` that override the
    /// handler's own for this step.
    pub(crate) rollback_config: RetryConfig,
    pub(crate) read_only: bool,
    pub(crate) config: RetryConfig,
    /// The inputs `saga show` hides, by parameter name (checked against
    /// the signature in `check`).
    pub(crate) redact: Vec<LitStr>,
}

/// `#[rollback(..)]`.
#[derive(Default)]
pub(crate) struct RollbackArgs {
    pub(crate) config: RetryConfig,
}

/// `#[workflow(..)]`.
#[derive(Default)]
pub(crate) struct WorkflowArgs {
    /// `None` when missing or invalid (the error is already recorded).
    pub(crate) name: Option<LitStr>,
    /// `rollback = "concurrent"`: compensations in reverse happens-before
    /// order (the default, `"sequential"`, is reverse start order).
    pub(crate) concurrent_rollback: bool,
    /// `updates = ["approve"]`: the names `ctx.take_update` takes, each
    /// valid and once.
    pub(crate) updates: Vec<LitStr>,
    /// `validator = check_update`: a `fn(&str, &serde_json::Value) ->
    /// Result<(), String>` that rejects a request before anything is
    /// recorded.
    pub(crate) validator: Option<Path>,
}

impl StepArgs {
    /// Parses `#[step(..)]`'s arguments.
    pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> Self {
        let mut parsed = StepArgs::default();
        let mut name_seen = false;
        parse_keys(args, STEP_KEYS, errors, |key, meta, errors| {
            match key {
                // name = "debit-account"
                NAME => {
                    name_seen = true;
                    let value = expr_value(meta)?;
                    parsed.name = errors.ok(checked_name(&value, "step name"));
                }
                // renamed_from = "qa-check"
                RENAMED_FROM => {
                    let value = expr_value(meta)?;
                    parsed.renamed_from = errors.ok(checked_name(&value, "old step name"));
                }
                // rollback = refund_account
                // rollback(handler = refund_account, retries = 10, delay = "1 minute")
                ROLLBACK => {
                    parsed.rollback = rollback_value(meta, errors, &mut parsed.rollback_config)?;
                }
                // read_only
                READ_ONLY => parsed.read_only = flag(meta, errors)?,
                // redact = ["card", "cvv"]
                REDACT => parsed.redact = redact_value(&expr_value(meta)?, errors),
                _ => parsed.config.parse_key(key, meta, errors)?,
            }
            Ok(())
        });
        if !name_seen {
            errors.push(syn::Error::new(
                proc_macro2::Span::call_site(),
                "this step has no name: add `name = \"...\"`, e.g. \
                 #[step(name = \"charge-card\")]; the name identifies the step's results in \
                 stored history, so it must stay the same across releases",
            ));
        }
        if let (Some(name), Some(old)) = (&parsed.name, &parsed.renamed_from)
            && name.value() == old.value()
        {
            errors.spanned(
                old,
                format!(
                    "`renamed_from` names the step's current name {:?}: give the name the step \
                     had before, or remove `renamed_from`",
                    old.value()
                ),
            );
            parsed.renamed_from = None;
        }
        parsed
    }
}

impl RollbackArgs {
    /// Parses `#[rollback(..)]`'s arguments (none is fine).
    pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> Self {
        let mut parsed = RollbackArgs::default();
        parse_keys(args, ROLLBACK_KEYS, errors, |key, meta, errors| {
            parsed.config.parse_key(key, meta, errors)
        });
        parsed
    }
}

impl WorkflowArgs {
    /// Parses `#[workflow(..)]`'s arguments.
    pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> Self {
        let mut parsed = WorkflowArgs::default();
        let mut name_seen = false;
        parse_keys(args, WORKFLOW_KEYS, errors, |key, meta, errors| {
            let value = expr_value(meta)?;
            match key {
                // rollback = "concurrent"
                ROLLBACK => {
                    parsed.concurrent_rollback =
                        errors.ok(rollback_order(&value)).unwrap_or_default();
                }
                // updates = ["approve", "cancel"]
                UPDATES => parsed.updates = updates_value(&value, errors),
                // validator = check_update
                VALIDATOR => parsed.validator = validator_path(value, errors),
                // name = "bank-transfer"
                _ => {
                    name_seen = true;
                    parsed.name = errors.ok(checked_name(&value, "workflow name"));
                }
            }
            Ok(())
        });
        if !name_seen {
            errors.push(syn::Error::new(
                proc_macro2::Span::call_site(),
                "this workflow has no name: add `name = \"...\"`, e.g. \
                 #[workflow(name = \"bank-transfer\")]; stored instances find their workflow \
                 by this name, so it must stay the same across releases",
            ));
        }
        parsed
    }
}

/// `rollback = "sequential"` (`false`) or `"concurrent"` (`true`) of a
/// workflow.
fn rollback_order(value: &Expr) -> syn::Result<bool> {
    let problem = || {
        syn::Error::new_spanned(
            value,
            "a workflow's `rollback` is \"sequential\" (the default: compensations in reverse \
             start order, one at a time) or \"concurrent\" (reverse happens-before order: \
             compensations of steps that overlapped run at once), e.g. \
             #[workflow(name = \"trip\", rollback = \"concurrent\")]",
        )
    };
    match value {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(order),
            ..
        }) => match order.value().as_str() {
            "sequential" => Ok(false),
            "concurrent" => Ok(true),
            _ => Err(problem()),
        },
        _ => Err(problem()),
    }
}

impl RetryConfig {
    /// Parses one of `retries`, `delay`, `backoff`, `timeout`.
    fn parse_key(
        &mut self,
        key: &str,
        meta: &ParseNestedMeta<'_>,
        errors: &mut Errors,
    ) -> syn::Result<()> {
        let value = expr_value(meta)?;
        match key {
            // retries = 10
            RETRIES => self.retries = errors.ok(retries(&value)),
            // delay = "1 second"
            DELAY => self.delay_millis = errors.ok(duration_value(&value)),
            // timeout = "30 seconds"
            TIMEOUT => self.timeout_millis = errors.ok(duration_value(&value)),
            // backoff = "exponential"
            _ => self.backoff = errors.ok(backoff(&value)),
        }
        Ok(())
    }
}

/// Runs `on_key` for every known key once; records unknown and duplicate
/// keys (skipping their values) and syntax errors.
fn parse_keys(
    args: TokenStream,
    known: &'static [&'static str],
    errors: &mut Errors,
    mut on_key: impl FnMut(&'static str, &ParseNestedMeta<'_>, &mut Errors) -> syn::Result<()>,
) {
    let mut seen: Vec<&'static str> = Vec::new();
    let parser = syn::meta::parser(|meta| {
        let key = meta
            .path
            .get_ident()
            .and_then(|ident| known.iter().copied().find(|known| ident == known));
        match key {
            None => {
                errors.push(unknown_key(&meta, known));
                skip_value(&meta)
            }
            Some(key) if seen.contains(&key) => {
                errors.spanned(
                    &meta.path,
                    format!(
                        "duplicate key `{key}`: it is already set above; remove one of the two"
                    ),
                );
                skip_value(&meta)
            }
            Some(key) => {
                seen.push(key);
                on_key(key, &meta, errors)
            }
        }
    });
    if let Err(error) = parser.parse2(args) {
        errors.push(error);
    }
}

fn unknown_key(meta: &ParseNestedMeta<'_>, known: &[&str]) -> syn::Error {
    let path = quote::ToTokens::to_token_stream(&meta.path).to_string();
    let known = known
        .iter()
        .map(|key| format!("`{key}`"))
        .collect::<Vec<_>>()
        .join(", ");
    syn::Error::new_spanned(
        &meta.path,
        format!("unknown key `{path}`: the known keys are {known}"),
    )
}

/// Consumes `= value` or `(..)` after a key that is being ignored.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.parse_nested_meta(|nested| skip_value(&nested))?;
    }
    Ok(())
}

/// The expression after `key =`.
fn expr_value(meta: &ParseNestedMeta<'_>) -> syn::Result<Expr> {
    if !meta.input.peek(Token![=]) {
        let key = meta
            .path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        let example = EXAMPLES
            .iter()
            .find(|(known, _)| *known == key)
            .map_or("...", |(_, example)| example);
        return Err(meta.error(format!("`{key}` needs a value: write `{key} = {example}`")));
    }
    meta.value()?.parse()
}

/// A name literal that follows the naming rules.
fn checked_name(value: &Expr, kind: name::Kind) -> syn::Result<LitStr> {
    let literal = name::literal(value, kind)?;
    name::check(&literal, kind)?;
    Ok(literal)
}

/// `rollback = path::to::handler`, or `rollback(handler = path, retries =
/// 10, ..)` whose settings (into `overrides`) replace the handler's own for
/// this step.
fn rollback_value(
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
    overrides: &mut RetryConfig,
) -> syn::Result<Option<Path>> {
    if !meta.input.peek(syn::token::Paren) {
        let value = expr_value(meta)?;
        return Ok(handler_path(value, errors));
    }
    let content;
    syn::parenthesized!(content in meta.input);
    let nested: TokenStream = content.parse()?;
    let mut handler = None;
    let mut handler_seen = false;
    parse_keys(nested, STEP_ROLLBACK_KEYS, errors, |key, inner, errors| {
        match key {
            // handler = refund_account
            HANDLER => {
                handler_seen = true;
                handler = handler_path(expr_value(inner)?, errors);
            }
            _ => overrides.parse_key(key, inner, errors)?,
        }
        Ok(())
    });
    if !handler_seen {
        errors.spanned(
            &meta.path,
            "this rollback names no handler: write `rollback(handler = refund_account, retries = 10, ..)`, \
             where the handler is an `async fn` marked #[rollback]",
        );
    }
    Ok(handler)
}

/// The handler's path, or an error saying what a handler is.
fn handler_path(value: Expr, errors: &mut Errors) -> Option<Path> {
    match value {
        Expr::Path(path) if path.qself.is_none() => Some(path.path),
        other => {
            errors.spanned(
                other,
                "expected the path of the rollback handler, e.g. `rollback = refund_account`; \
                 the handler is an `async fn` marked #[rollback]",
            );
            None
        }
    }
}

/// The path of an update validator, `validator = check_update`.
fn validator_path(value: Expr, errors: &mut Errors) -> Option<Path> {
    match value {
        Expr::Path(path) if path.qself.is_none() => Some(path.path),
        other => {
            errors.spanned(
                other,
                "expected the path of the update validator, e.g. `validator = check_update`, \
                 a `fn(update: &str, request: &serde_json::Value) -> Result<(), String>`",
            );
            None
        }
    }
}

/// `["card", "cvv"]`: string literals of parameter names.
fn redact_value(value: &Expr, errors: &mut Errors) -> Vec<LitStr> {
    let message = "`redact` takes an array of the names of the step's inputs, \
                   e.g. `redact = [\"card\"]`";
    let Expr::Array(array) = value else {
        errors.spanned(value, message);
        return Vec::new();
    };
    let mut names = Vec::new();
    for element in &array.elems {
        match element {
            Expr::Lit(syn::ExprLit {
                lit: Lit::Str(name),
                ..
            }) => names.push(name.clone()),
            other => errors.spanned(other, message),
        }
    }
    names
}

/// `["approve", "cancel"]`: update names, spelled as step names, each
/// once.
fn updates_value(value: &Expr, errors: &mut Errors) -> Vec<LitStr> {
    let message = "`updates` takes an array of the update names the workflow takes with \
                   `ctx.take_update`, e.g. `updates = [\"approve\"]`";
    let Expr::Array(array) = value else {
        errors.spanned(value, message);
        return Vec::new();
    };
    let mut names: Vec<LitStr> = Vec::new();
    for element in &array.elems {
        let Some(name) = errors.ok(checked_name(element, "update name")) else {
            continue;
        };
        if names.iter().any(|seen| seen.value() == name.value()) {
            errors.spanned(
                &name,
                format!(
                    "the update {:?} is listed twice: list it once",
                    name.value()
                ),
            );
            continue;
        }
        names.push(name);
    }
    names
}

/// A flag without value: `read_only`. Set even when a value is given by
/// mistake: that is what the user meant.
fn flag(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<bool> {
    if meta.input.peek(Token![=]) || meta.input.peek(syn::token::Paren) {
        let key = meta
            .path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        skip_value(meta)?;
        errors.push(meta.error(format!("`{key}` takes no value: write just `{key}`")));
    }
    Ok(true)
}

fn retries(value: &Expr) -> syn::Result<u32> {
    let message = || {
        format!(
            "`retries` must be an integer literal from 0 to {MAX_RETRIES} (the number of \
             attempts after the first), e.g. `retries = 5`"
        )
    };
    let Expr::Lit(syn::ExprLit {
        lit: Lit::Int(count),
        ..
    }) = value
    else {
        return Err(syn::Error::new_spanned(value, message()));
    };
    match count.base10_parse::<u64>() {
        Ok(count) if count <= u64::from(MAX_RETRIES) => {
            Ok(u32::try_from(count).unwrap_or(MAX_RETRIES))
        }
        Ok(too_many) => Err(syn::Error::new_spanned(
            value,
            format!(
                "`retries = {too_many}` is more than the limit of {MAX_RETRIES}: lower it, or \
                 handle a long outage with `ctx.sleep(..)` between steps"
            ),
        )),
        Err(_) => Err(syn::Error::new_spanned(value, message())),
    }
}

fn duration_value(value: &Expr) -> syn::Result<u64> {
    match value {
        Expr::Lit(lit) => duration::from_lit(&lit.lit),
        other => Err(syn::Error::new_spanned(
            other,
            format!(
                "the duration must be a literal, so that it is checked when the program is \
                 built; {}",
                duration::EXAMPLES
            ),
        )),
    }
}

fn backoff(value: &Expr) -> syn::Result<Backoff> {
    let known = || {
        BACKOFFS
            .iter()
            .map(|(spelling, _)| format!("\"{spelling}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Expr::Lit(syn::ExprLit {
        lit: Lit::Str(text),
        ..
    }) = value
    else {
        return Err(syn::Error::new_spanned(
            value,
            format!("`backoff` must be one of {}", known()),
        ));
    };
    BACKOFFS
        .iter()
        .find(|(spelling, _)| *spelling == text.value())
        .map(|(_, backoff)| *backoff)
        .ok_or_else(|| {
            syn::Error::new(
                text.span(),
                format!("unknown backoff {:?}: use one of {}", text.value(), known()),
            )
        })
}
