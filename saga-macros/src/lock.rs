//! `saga.lock`: the durable names of a crate's workflows, checked at
//! compile time so that a release cannot silently rename, drop, add or
//! retype a step under instances in flight.
//!
//! # The file
//!
//! `saga.lock` at the root of the crate being compiled (`CARGO_MANIFEST_DIR`),
//! or the file named by `SAGA_LOCK_PATH` (absolute, or relative to
//! `CARGO_MANIFEST_DIR`). One line per fact, fields separated by a space,
//! sorted, `#` comments ignored:
//!
//! ```text
//! call bank-transfer debit_bank_a                 # fn called as f(&ctx, ..) (step or helper)
//! child bank-transfer notify-customer             # ctx.child name
//! event bank-transfer wait-approval               # ctx.wait_for_event name
//! patch bank-transfer fraud-check                 # ctx.patched name
//! sleep bank-transfer settle                      # ctx.sleep / ctx.sleep_until name
//! step bank-transfer double                       # inline ctx.step name
//! update bank-transfer approve                    # ctx.take_update name (declared in updates = [..])
//! step * debit-bank-a 5f0c8a1e9d3b7a24 debit_bank_a   # a #[step] fn: name, output hash, fn
//! workflow bank-transfer
//! ```
//!
//! # Who writes what
//!
//! A proc macro sees one item at a time, so each macro writes and checks
//! the lines it knows, and the compiler joins them:
//!
//! - `#[step]` owns `step * <name> <hash> <fn>`: its name, the hash of its
//!   output type and its function's name. It checks its own line: a name
//!   renamed (the same function locked under another name), a changed
//!   output hash, a `renamed_from` the lock does not know. With
//!   `renamed_from = "old"`, the old line satisfies the new name. A step
//!   new to the lock (neither its name nor its function is there) is not
//!   an error of its own: whether adding it is safe depends on where the
//!   workflows call it (see Patches), which they check.
//! - `#[workflow]` owns every line whose second field is its name: the
//!   `workflow` line, its literal `ctx.step`/`ctx.sleep`/`ctx.wait_for_event`/
//!   `ctx.child` names, its `ctx.patched` names, and a `call` line per
//!   function it calls as
//!   `f(&ctx, ..)`: it cannot know which of them are steps, or their names
//!   (those are resolved by the compiler). It checks its literal names both
//!   ways, and that each locked `call` of a function the lock knows as a
//!   step is still made. Whether a called function *is* a step is asked of
//!   the compiler (`steps.rs`): the generated code asserts that a function
//!   the lock does not list as called by this workflow is not a step. With
//!   `ctx.child("new", ..).renamed_from("old")`, the old `child` line
//!   satisfies the new name (and an update replaces it).
//!
//! So a renamed step name is reported by the step, a step dropped from or
//! added to a workflow by the workflow. Renaming a step *function* (not its
//! name) changes the `call` lines: harmless, but it needs an update.
//!
//! # Patches
//!
//! The lines are sorted and carry no order, so the lock cannot say where a
//! new call sits among the old ones. The rule is lexical instead: in a
//! locked workflow, a step call (or a literal step, sleep, event wait or
//! child name) the lock does not list is an error unless it sits in a
//! patched branch, `if ctx.patched("name") { here }` or
//! `if !ctx.patched("name") { .. } else { here }` (also under `&&` /
//! `||` with other conditions, where the branch still runs only when the
//! patch holds). An instance that went past the patch's place replays
//! without that branch, so a call there meets no history. The error
//! outside one suggests the patch, named after the step. An update
//! records each `ctx.patched` name as `patch <workflow> <name>`, and the
//! branch's calls as any others. A locked `patch` line whose
//! `ctx.patched` call is gone is an error: dropping the `if` retires the
//! patch, the second release of the two, safe only once no instance from
//! before the patch is in flight; the message says so, and an update
//! records it. Patch names are literals, spelled as step names.
//!
//! # Writing
//!
//! Only `SAGA_LOCK=update cargo build` writes, and skips the checks. Each
//! expansion locks the file (`File::lock`; the lib, tests, examples and
//! doctests build as parallel rustc processes), replaces the lines it owns
//! and keeps every other line: a workflow this build does not see
//! (`cfg(test)`, another target) keeps its lines. Without a lock file
//! there are no checks; a project opts in by running the update once.
//! Any other value of `SAGA_LOCK` is ignored.
//!
//! # Rebuilds
//!
//! The generated code includes the lock file (`include_bytes!`), so editing
//! it rebuilds the crate, and reads `option_env!("SAGA_LOCK")` and
//! `option_env!("SAGA_LOCK_PATH")`, so cargo rebuilds when they change;
//! it reads them in a crate without a lock file too, so the first
//! `SAGA_LOCK=update cargo build` writes the file even when cargo has the
//! crate cached.
//!
//! # What the output hash covers
//!
//! The tokens of the output type as written (`T` of `Result<T, StepError>`),
//! spaces removed: a change of spelling is flagged, even a harmless one
//! (`Foo` → `crate::Foo`, a type alias), and a change inside the type (a
//! field added, removed or retyped in `struct Foo`) is NOT seen. Inline
//! `ctx.step` outputs are not hashed (the macro does not see their type).
//!
//! # Limits
//!
//! - A workflow deleted entirely cannot be seen by the macros (nothing
//!   expands); `saga check` will compare the lock with the registered
//!   workflows before a deploy.
//! - Steps of another crate are locked by that crate's own `saga.lock`; a
//!   workflow that stops calling one is not reported (its `call` line
//!   cannot be told from a helper's).
//! - Two `#[step]` functions with the same function name in one crate share
//!   their `call` identity: give them distinct function names.
//! - Sleeps and event waits take no `renamed_from` (yet): keep their names
//!   while instances may wait in them. Child calls do:
//!   `ctx.child("new", ..).renamed_from("old")`.
//! - A `child` line names the call, not the child's workflow: a call that
//!   starts another workflow under the same name is not flagged (that
//!   workflow's own lines are its own).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, quote};
use syn::{Ident, LitStr, Type};

use crate::body::{BodySummary, LiteralName};
use crate::errors::Errors;
use crate::errors::{STEP_NAME, StepCallError};

/// The lock file's default name, in `CARGO_MANIFEST_DIR`.
const FILE_NAME: &str = "saga.lock";
/// Overrides the lock file's path.
const PATH_VAR: &str = "SAGA_LOCK_PATH";
/// `SAGA_LOCK=update` writes the lock.
const MODE_VAR: &str = "SAGA_LOCK";
const UPDATE_MODE: &str = "update";

const WORKFLOW: &str = "workflow";
const CALL: &str = "call";
const STEP: &str = "step";
const SLEEP: &str = "sleep";
const EVENT: &str = "event";
const CHILD: &str = "child";
const PATCH: &str = "patch";
const UPDATE: &str = "update";
/// The workflow field of a `#[step]` function's line: any workflow.
const ANY: &str = "*";

const HEADER: &str = "# saga.lock: the durable names of this crate's workflows, checked when it \
    is built.\n# Commit it. Update on purpose with `SAGA_LOCK=update cargo build`.\n";

const HOW_TO_UPDATE: &str = "run `SAGA_LOCK=update cargo build` to record it on purpose";

/// One line: its fields.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Line(Vec<String>);

impl Line {
    fn new(fields: &[&str]) -> Self {
        Line(fields.iter().map(|field| (*field).to_owned()).collect())
    }

    fn field(&self, at: usize) -> &str {
        self.0.get(at).map_or("", String::as_str)
    }

    fn is(&self, kind: &str, workflow: &str) -> bool {
        self.field(0) == kind && self.field(1) == workflow
    }

    /// A `#[step]` function's line: `step * name hash fn`.
    fn is_step_fn(&self) -> bool {
        self.is(STEP, ANY)
    }

    /// Whether the line has the fields its kind needs.
    fn is_valid(&self) -> bool {
        let count = match self.field(0) {
            WORKFLOW => 2,
            STEP if self.field(1) == ANY => 5,
            CALL | STEP | SLEEP | EVENT | CHILD | PATCH | UPDATE => 3,
            _ => return false,
        };
        self.0.len() == count
    }
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join(" "))
    }
}

/// The lines of a lock file's text.
fn parse(text: &str) -> Result<Vec<Line>, String> {
    let mut lines = Vec::new();
    for (number, raw) in text.lines().enumerate() {
        let content = raw.split('#').next().unwrap_or_default().trim();
        if content.is_empty() {
            continue;
        }
        let line = Line(content.split_whitespace().map(str::to_owned).collect());
        if !line.is_valid() {
            return Err(format!(
                "line {} of saga.lock is not understood: {raw:?}; fix it by hand or delete it \
                 and {HOW_TO_UPDATE}",
                number + 1
            ));
        }
        lines.push(line);
    }
    Ok(lines)
}

/// The text of a lock with `lines`: sorted, one per line.
fn format(mut lines: Vec<Line>) -> String {
    lines.sort();
    lines.dedup();
    let mut text = HEADER.to_owned();
    for line in lines {
        text.push_str(&line.to_string());
        text.push('\n');
    }
    text
}

/// `lines` without those `owned` selects, plus `mine`.
fn merge(lines: Vec<Line>, owned: impl Fn(&Line) -> bool, mine: Vec<Line>) -> Vec<Line> {
    lines
        .into_iter()
        .filter(|line| !owned(line))
        .chain(mine)
        .collect()
}

/// The hash of a type's tokens as written (see the module docs): FNV-1a
/// over the tokens without spacing, as 16 hex digits.
pub(crate) fn type_hash(ty: &Type) -> String {
    let mut text = String::new();
    canonical(ty.to_token_stream(), &mut text);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Tokens as text, one space between tokens, groups with their delimiters.
fn canonical(tokens: TokenStream, out: &mut String) {
    for tree in tokens {
        match tree {
            TokenTree::Group(group) => {
                let (open, close) = match group.delimiter() {
                    proc_macro2::Delimiter::Parenthesis => ("(", ")"),
                    proc_macro2::Delimiter::Bracket => ("[", "]"),
                    proc_macro2::Delimiter::Brace => ("{", "}"),
                    proc_macro2::Delimiter::None => ("", ""),
                };
                out.push_str(open);
                canonical(group.stream(), out);
                out.push_str(close);
            }
            other => {
                out.push_str(&other.to_string());
                out.push(' ');
            }
        }
    }
}

/// The lock file of this build, if there is one to check or to update.
struct Lock {
    path: PathBuf,
    update: bool,
    /// The lines, when checking (an update reads them under the file lock).
    lines: Vec<Line>,
}

impl Lock {
    /// The lock of the crate being compiled: `None` when there is none and
    /// no update is asked for, or outside cargo.
    fn open(errors: &mut Errors) -> Option<Lock> {
        let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
        let path = match std::env::var_os(PATH_VAR) {
            Some(path) => Path::new(&manifest_dir).join(path),
            None => Path::new(&manifest_dir).join(FILE_NAME),
        };
        let update = std::env::var(MODE_VAR).is_ok_and(|mode| mode == UPDATE_MODE);
        if update {
            return Some(Lock {
                path,
                update,
                lines: Vec::new(),
            });
        }
        let text = std::fs::read_to_string(&path).ok()?;
        match parse(&text) {
            Ok(lines) => Some(Lock {
                path,
                update,
                lines,
            }),
            Err(message) => {
                errors.push(syn::Error::new(Span::call_site(), message));
                None
            }
        }
    }

    /// Replaces the lines `owned` selects with `mine`, under the file lock.
    fn write(&self, owned: impl Fn(&Line) -> bool, mine: Vec<Line>) -> Result<(), String> {
        let failed =
            |error: std::io::Error| format!("cannot update {}: {error}", self.path.display());
        let mut file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(failed)?;
        file.lock().map_err(failed)?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(failed)?;
        let updated = format(merge(parse(&text)?, owned, mine));
        if updated != text {
            file.set_len(0).map_err(failed)?;
            file.seek(SeekFrom::Start(0)).map_err(failed)?;
            file.write_all(updated.as_bytes()).map_err(failed)?;
        }
        Ok(())
    }

    /// Items that make cargo rebuild when the lock or its variables change.
    fn tracking(&self) -> TokenStream {
        let path = self.path.to_string_lossy().into_owned();
        let include = self.path.exists().then(|| {
            quote!(
                const _: &[u8] = ::core::include_bytes!(#path);
            )
        });
        let env = env_tracking();
        quote!(#env #include)
    }

    fn find(&self, matches: impl Fn(&Line) -> bool) -> Option<&Line> {
        self.lines.iter().find(|line| matches(line))
    }
}

/// Items that make cargo rebuild when `SAGA_LOCK` or `SAGA_LOCK_PATH`
/// change: read with `option_env!`, which cargo tracks. Emitted with or
/// without a lock file, so the first `SAGA_LOCK=update cargo build` of a
/// crate that has none rebuilds it even when cargo had it cached.
fn env_tracking() -> TokenStream {
    quote! {
        const _: [::core::option::Option<&str>; 2] = [
            ::core::option_env!("SAGA_LOCK"),
            ::core::option_env!("SAGA_LOCK_PATH"),
        ];
    }
}

/// `#[step]`'s lock: writes or checks its own line; returns the tracking
/// items (the variables alone without a lock).
pub(crate) fn step(
    name: &LitStr,
    renamed_from: Option<&LitStr>,
    ident: &Ident,
    output: &Type,
    errors: &mut Errors,
) -> TokenStream {
    let Some(lock) = Lock::open(errors) else {
        return env_tracking();
    };
    let (value, function) = (name.value(), ident.to_string());
    let old = renamed_from.map(LitStr::value);
    let hash = type_hash(output);
    if lock.update {
        let owned = |line: &Line| {
            line.is_step_fn()
                && (line.field(2) == value
                    || Some(line.field(2)) == old.as_deref()
                    || line.field(4) == function)
        };
        let mine = vec![Line::new(&[STEP, ANY, &value, &hash, &function])];
        if let Err(message) = lock.write(owned, mine) {
            errors.push(syn::Error::new(name.span(), message));
        }
        return lock.tracking();
    }
    let by_name = |wanted: &str| lock.find(|line| line.is_step_fn() && line.field(2) == wanted);
    let locked = by_name(&value).or_else(|| old.as_deref().and_then(by_name));
    match (locked, renamed_from) {
        (Some(line), _) if line.field(3) != hash => errors.spanned(
            output,
            format!(
                "the output type of the step {value:?} changed since saga.lock was written \
                 (hash {} of the type as written, now {hash}): instances in flight stored \
                 results of the old type, which may not decode as the new one; keep the old \
                 type (add fields with #[serde(default)] inside it), or, if stored results \
                 still decode, {HOW_TO_UPDATE}",
                line.field(3)
            ),
        ),
        (Some(_), _) => {}
        (None, Some(old_literal)) => errors.spanned(
            old_literal,
            format!(
                "`renamed_from = {:?}`, but saga.lock lists no step {:?}: give the name \
                 recorded there, or remove `renamed_from` and {HOW_TO_UPDATE}",
                old_literal.value(),
                old_literal.value()
            ),
        ),
        // A step new to the lock: its callers decide (see the module docs).
        (None, None) => {
            if let Some(line) = lock.find(|line| line.is_step_fn() && line.field(4) == function) {
                errors.spanned(
                    name,
                    format!(
                        "the step `{function}` was locked in saga.lock as {:?} and is now named \
                         {value:?}: instances in flight stored its results under the old name \
                         and would run it again; declare the rename with \
                         `#[step(name = {value:?}, renamed_from = {:?})]`, or, if no instance \
                         can be in flight, {HOW_TO_UPDATE}",
                        line.field(2),
                        line.field(2)
                    ),
                );
            }
        }
    }
    lock.tracking()
}

/// `#[workflow]`'s lock: writes or checks its lines. Returns the tracking
/// items and the assertions for called steps the lock does not list.
pub(crate) fn workflow(
    name: &LitStr,
    body: &BodySummary,
    errors: &mut Errors,
) -> (TokenStream, Vec<StepCallError>) {
    let Some(lock) = Lock::open(errors) else {
        return (env_tracking(), Vec::new());
    };
    let workflow = name.value();
    let callees = &body.calls.callees;
    if lock.update {
        let mut mine = vec![Line::new(&[WORKFLOW, &workflow])];
        for used in &body.names {
            mine.push(Line::new(&[used.kind, &workflow, &used.literal.value()]));
        }
        for patch in &body.patches {
            mine.push(Line::new(&[PATCH, &workflow, &patch.value()]));
        }
        for callee in callees {
            mine.push(Line::new(&[CALL, &workflow, &callee.ident()]));
        }
        if let Err(message) = lock.write(|line| line.field(1) == workflow, mine) {
            errors.push(syn::Error::new(name.span(), message));
        }
        return (lock.tracking(), Vec::new());
    }
    if lock.find(|line| line.is(WORKFLOW, &workflow)).is_none() {
        errors.spanned(
            name,
            format!(
                "the workflow {workflow:?} is not in saga.lock ({}): if it is new, \
                 {HOW_TO_UPDATE}; a workflow cannot be renamed while instances run, since \
                 stored instances find their code by this name",
                lock.path.display()
            ),
        );
        return (lock.tracking(), Vec::new());
    }
    check_literal_names(&lock, &workflow, name, body, errors);
    check_dropped_calls(&lock, &workflow, name, body, errors);
    check_retired_patches(&lock, &workflow, name, body, errors);
    // A call the lock does not list is fine in a patched branch.
    let unlisted = callees
        .iter()
        .enumerate()
        .filter_map(|(index, callee)| {
            let ident = callee.ident();
            let listed = lock
                .find(|line| line.is(CALL, &workflow) && line.field(2) == ident)
                .is_some();
            let site = callee.unpatched_site().filter(|_| !listed)?;
            Some(StepCallError {
                callee: index,
                span: site.span,
                message: format!(
                    "the workflow {workflow:?} calls the step `{text}` (\"{STEP_NAME}\"), which \
                     saga.lock does not list for it: an instance in flight that already went \
                     past this point would replay into a step its history never recorded, \
                     and park Blocked. To add the step safely, call it behind a patch: \
                     `if ctx.patched(\"{STEP_NAME}\") {{ {text}(&ctx, ..).await?; }}` (instances \
                     that went past it skip it, new ones run it). If no instance of \
                     {workflow:?} can be in flight, {HOW_TO_UPDATE}; if the step replaces a \
                     locked one, declare the old name with \
                     `#[step(renamed_from = \"old-name\")]`",
                    text = callee.text
                ),
            })
        })
        .collect();
    (lock.tracking(), unlisted)
}

/// Each locked `patch` of the workflow is still asked for: dropping the
/// `if ctx.patched(..)` retires the patch, which must be done on purpose.
fn check_retired_patches(
    lock: &Lock,
    workflow: &str,
    workflow_name: &LitStr,
    body: &BodySummary,
    errors: &mut Errors,
) {
    for line in lock.lines.iter().filter(|line| line.is(PATCH, workflow)) {
        let patch = line.field(2);
        if body.patches.iter().any(|used| used.value() == patch) {
            continue;
        }
        errors.spanned(
            workflow_name,
            format!(
                "the workflow {workflow:?} no longer asks `ctx.patched({patch:?})`, which \
                 saga.lock lists: dropping the `if` retires the patch, which is safe only once \
                 no instance that started before the patch was deployed is in flight (they \
                 replay without the patched calls, and would now meet them and park \
                 Blocked). Check with `saga list --status running` (and `waiting`, \
                 `paused`); then {HOW_TO_UPDATE}. Until then, keep \
                 `if ctx.patched({patch:?}) {{ .. }}` for another release"
            ),
        );
    }
}

/// The literal `ctx.step`/`ctx.sleep`/`ctx.wait_for_event`/`ctx.child`/
/// `ctx.take_update` names, both ways.
fn check_literal_names(
    lock: &Lock,
    workflow: &str,
    workflow_name: &LitStr,
    body: &BodySummary,
    errors: &mut Errors,
) {
    for used in &body.names {
        let locked = |line: &Line| line.is(used.kind, workflow) && used.answers_to(line.field(2));
        // A new name in a patched branch meets no history.
        if lock.find(locked).is_none() && (!used.patched || used.renamed_from.is_some()) {
            not_locked(workflow, used, errors);
        }
    }
    let literal_kinds = [STEP, SLEEP, EVENT, CHILD, UPDATE];
    for line in &lock.lines {
        let kind = line.field(0);
        let is_literal = literal_kinds.contains(&kind) && line.field(1) == workflow;
        let used = body
            .names
            .iter()
            .any(|used| used.kind == kind && used.answers_to(line.field(2)));
        if is_literal && !used {
            let old = line.field(2);
            let renamed = if kind == CHILD {
                format!(
                    "if the call was renamed, declare its old name: \
                     `ctx.child(\"new-name\", ..).renamed_from({old:?})`, or, "
                )
            } else {
                String::new()
            };
            errors.spanned(
                workflow_name,
                format!(
                    "the workflow {workflow:?} no longer uses the {kind} name {old:?} that \
                     saga.lock lists: instances in flight may have stored it, and their replay \
                     would not find it; restore it, or, {renamed}if no instance can be in \
                     flight, {HOW_TO_UPDATE}"
                ),
            );
        }
    }
}

/// The error of a literal name that no line of the lock satisfies.
fn not_locked(workflow: &str, used: &LiteralName, errors: &mut Errors) {
    let (kind, value) = (used.kind, used.literal.value());
    if let Some(old) = &used.renamed_from {
        return errors.spanned(
            old,
            format!(
                "`.renamed_from({:?})`, but saga.lock lists no {kind} name {:?} for the workflow \
                 {workflow:?}: give the name recorded there, or remove `.renamed_from(..)` \
                 and {HOW_TO_UPDATE}",
                old.value(),
                old.value()
            ),
        );
    }
    let renamed = if kind == CHILD {
        format!(
            "declare the old name on the call, \
             `ctx.child({value:?}, ..).renamed_from(\"old-name\")`, so instances in flight \
             find their child"
        )
    } else {
        "keep the old name while instances may be in flight (`renamed_from` is for #[step] \
         functions and child calls)"
            .to_owned()
    };
    errors.spanned(
        &used.literal,
        format!(
            "the {kind} name {value:?} of the workflow {workflow:?} is not in saga.lock: an \
             instance in flight that already went past this point would replay into a call its \
             history never recorded, and park Blocked. If it is new, add it behind a patch, \
             `if ctx.patched({value:?}) {{ .. }}` (instances that went past it skip it, new \
             ones run it), or, if no instance of {workflow:?} can be in flight, \
             {HOW_TO_UPDATE}; if it replaces a locked name, {renamed}"
        ),
    );
}

/// Each locked `call` of a function the lock knows as a `#[step]` is made.
fn check_dropped_calls(
    lock: &Lock,
    workflow: &str,
    workflow_name: &LitStr,
    body: &BodySummary,
    errors: &mut Errors,
) {
    for call in lock.lines.iter().filter(|line| line.is(CALL, workflow)) {
        let function = call.field(2);
        let still_called = body
            .calls
            .callees
            .iter()
            .any(|callee| callee.ident() == function);
        let step = lock.find(|line| line.is_step_fn() && line.field(4) == function);
        if let (false, Some(step)) = (still_called, step) {
            errors.spanned(
                workflow_name,
                format!(
                    "the workflow {workflow:?} no longer calls the step {:?} (`{function}`) \
                     that saga.lock lists for it: instances in flight may have run it, and \
                     their replay would not find it; call it again, or, if it was renamed, \
                     declare `renamed_from = {:?}` on the step that replaces it, or, if no \
                     instance can be in flight, {HOW_TO_UPDATE}",
                    step.field(2),
                    step.field(2)
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Line, format, merge, parse, type_hash};

    #[test]
    fn the_file_is_sorted_and_reads_back() {
        let lines = vec![
            Line::new(&["workflow", "pay"]),
            Line::new(&["step", "*", "charge", "00ff", "charge_card"]),
            Line::new(&["sleep", "pay", "settle"]),
        ];
        let text = format(lines.clone());
        let body: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            body,
            [
                "sleep pay settle",
                "step * charge 00ff charge_card",
                "workflow pay"
            ]
        );
        let mut sorted = lines;
        sorted.sort();
        assert_eq!(parse(&text), Ok(sorted));
    }

    #[test]
    fn a_child_line_names_its_workflow_and_call() {
        assert_eq!(
            parse("child pay notify-customer\n"),
            Ok(vec![Line::new(&["child", "pay", "notify-customer"])])
        );
        assert!(parse("child pay\n").is_err());
        assert!(parse("child pay notify-customer extra\n").is_err());
    }

    #[test]
    fn a_patch_line_names_its_workflow_and_patch() {
        assert_eq!(
            parse("patch pay fraud-check\n"),
            Ok(vec![Line::new(&["patch", "pay", "fraud-check"])])
        );
        assert!(parse("patch pay\n").is_err());
    }

    #[test]
    fn a_line_with_missing_fields_is_an_error() {
        assert!(parse("step * charge 00ff\n").is_err());
        assert!(parse("colour pay blue\n").is_err());
        assert_eq!(parse("# only a comment\n\n"), Ok(Vec::new()));
    }

    #[test]
    fn an_update_keeps_the_lines_it_does_not_own() {
        let lines = vec![
            Line::new(&["workflow", "pay"]),
            Line::new(&["sleep", "pay", "settle"]),
            Line::new(&["workflow", "tested-only"]),
        ];
        let merged = merge(
            lines,
            |line| line.field(1) == "pay",
            vec![Line::new(&["workflow", "pay"])],
        );
        assert_eq!(
            merged,
            [
                Line::new(&["workflow", "tested-only"]),
                Line::new(&["workflow", "pay"])
            ]
        );
    }

    #[test]
    fn the_hash_covers_the_tokens_as_written() {
        let hash =
            |text: &str| type_hash(&syn::parse_str(text).unwrap_or_else(|_| syn::parse_quote!(())));
        assert_eq!(hash("Vec<u8>"), hash("Vec < u8 >"));
        assert_ne!(hash("Foo"), hash("crate::Foo"));
        assert_ne!(hash("Vec<u8>"), hash("Vec<u16>"));
        assert_eq!(hash("Foo").len(), 16);
    }
}
