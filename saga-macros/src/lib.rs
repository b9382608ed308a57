//! Attribute macros for `saga-runtime`: `#[workflow]`, `#[step]` and
//! `#[rollback]`. Use them through `saga_runtime::prelude`; the generated code
//! refers to `::saga_runtime::__private`, so this crate is not useful alone.
//!
//! Each macro runs the same pipeline: parse the attribute arguments
//! (`attr`), parse the function into our own AST (`ast`), validate it
//! (`check`) and generate code (`expand`). Every error is collected
//! (`errors`) and reported in one build, next to a best-effort expansion, so
//! a mistake never hides behind follow-on errors: an item that fails its
//! checks still expands to its declared shape (`fallback`). The items both
//! put beside a function (hidden types, the workflow value) are in `items`.
//!
//! Some rules need more than one item. `#[step]` gives each step a hidden
//! type carrying its names, and a workflow's generated code asks the
//! compiler which of the functions it calls are steps (`steps`, `calls`);
//! `saga.lock` joins what each macro knows through the lock file and those
//! compile-time checks (`lock`, whose docs describe the file). Child
//! workflow calls (`ctx.child`) are read with their builder calls and
//! listed in `Workflow::children` (`children`).
#![deny(clippy::too_many_lines)]

mod ast;
mod attr;
mod body;
mod calls;
mod check;
mod children;
mod duration;
mod errors;
mod expand;
mod fallback;
mod forbidden;
mod items;
mod lock;
mod name;
mod steps;
mod types;
mod updates;
mod usage;

use proc_macro::TokenStream;

/// Turns an `async fn(ctx: WorkflowContext, input: I) -> Result<O, WorkflowError>`
/// into a value of the same name that implements `saga_runtime::Workflow`,
/// for `engine.register(name)` and `engine.start(name, id, input)`.
///
/// ```ignore
/// #[workflow(name = "bank-transfer")]
/// async fn bank_transfer(ctx: WorkflowContext, t: Transfer) -> Result<Receipt, WorkflowError> {
///     let debit = debit_bank_a(&ctx, t.clone()).await?;
///     ctx.sleep("settle", "7 days").await?;
///     Ok(Receipt { debit })
/// }
/// ```
///
/// The error type `E` of `Result<O, E>` may be `WorkflowError`, the
/// workflow's own type (`Serialize + Deserialize + Display`: stored as
/// JSON, given back by `failure.downcast::<E>()` and to rollback handlers
/// by `ctx.cause().downcast::<E>()`), any `std::error::Error`,
/// `anyhow::Error`, `String` or `&str`. The value also implements
/// `Workflow::services` with the services of the steps it calls, and
/// `Workflow::children` with the child workflows it calls
/// (`ctx.child("book-flight", book_flight, input)`), which `register`
/// checks are registered too. Only a child whose workflow argument is a
/// path (`book_flight`, `flights::book_flight`) naming an item outside the
/// body is listed; one given another way (`flights.pick()`, a variable)
/// is not, and if its workflow is not registered the parent is parked
/// `Blocked` when it calls it.
///
/// `name` (required) is stored with every instance: a string literal of
/// `[a-z0-9][a-z0-9-]*`, at most 64 characters, without dates or timestamps.
/// `rollback = "concurrent"` (optional) compensates in reverse
/// happens-before order instead of reverse start order: steps and children
/// whose lifetimes overlapped (a `join!`) are compensated at once, and a
/// step that ended before another began is compensated after it
/// (`Workflow::rollback_order`); `"sequential"` is the default.
/// The body is checked at compile time:
///
/// - the names given to `ctx.step`, `ctx.step_with_context`, `ctx.sleep`,
///   `ctx.sleep_until`, `ctx.wait_for_event` and `ctx.child` follow the
///   same rules, and no name is used at two call sites; literal durations
///   parse; the old name of `ctx.child(..).renamed_from("old")` is a
///   literal following the rules too, used by no other call;
/// - a `#[step]` function (a call `f(&ctx, ..)`) is called from one place
///   only (a loop is one place), or from exclusive branches (`if`/`else`
///   arms, `match` arms); ordinary helpers that take `&WorkflowContext` may
///   be called anywhere. This is checked by the generated code, which asks
///   the compiler which callees are steps, so the errors read "evaluation
///   panicked: ..." at the call;
/// - no two step functions of the workflow (or a step function and a
///   literal name) share a name; the error names both;
/// - with a `saga.lock` (see `#[step]`), the workflow, its literal names,
///   its `ctx.patched` names and the steps it calls match the lock; a
///   renamed child call is accepted under its old name with
///   `.renamed_from("old")`, and a new call inside a patched branch
///   (`if ctx.patched("x") { .. }`) needs no line;
/// - `ctx.patched` names are string literals, spelled as step names;
/// - no call reads the clock (`SystemTime::now`, `Instant::now`), draws
///   random numbers (`rand::…`), spawns tasks (`tokio::spawn`), sleeps
///   (`tokio::time::sleep`, `std::thread::sleep`) or does file or network
///   I/O: replay would not see the same values. Use `ctx.now()`,
///   `ctx.random()`, `ctx.sleep(..)` or a step instead.
#[proc_macro_attribute]
pub fn workflow(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::workflow(args.into(), item.into()).into()
}

/// Turns an `async fn(key: IdempotencyKey, inputs..) -> Result<T, StepError>`
/// into a durable step: a function `fn(&WorkflowContext, inputs..)` that
/// starts the step when it is called and returns the future of its result.
///
/// ```ignore
/// #[step(name = "debit-bank-a", rollback = refund_bank_a, retries = 10,
///        delay = "1 second", backoff = "exponential", timeout = "30 seconds")]
/// async fn debit_bank_a(key: IdempotencyKey, t: Transfer) -> Result<DebitId, StepError> {
///     bank_a().debit(&t.from, t.amount, key.as_str()).await.map_err(StepError::retryable)
/// }
/// ```
///
/// Keys: `name` (required, same rules as a workflow name), `rollback` (the
/// path of an `async fn` marked `#[rollback]`, or `rollback(handler = path,
/// retries = .., delay = .., backoff = .., timeout = ..)` to override the
/// handler's own settings for this step), `retries` (0 to 10,000),
/// `delay` and `timeout` (`"30 seconds"`, `"2 minutes"`, `"7 days"`, or
/// integer milliseconds), `backoff` (`"constant"`, `"linear"` or
/// `"exponential"`), `read_only`, `renamed_from` (the name earlier
/// releases gave the step: replay finds results stored under it, and
/// `saga.lock` accepts its old line), `redact` (`redact = ["card"]`: the
/// inputs, by parameter name, that `Instance::inspect` and `saga show`
/// print as `<redacted>`; they are still stored, for the rollback, so
/// give the engine an encrypting codec too if they must not be stored in
/// the clear).
///
/// The engine supplies an `IdempotencyKey` parameter, a `StepContext`
/// parameter (attempt number, instance id, ...) and `Service<T>`
/// parameters (shared services given to `Engine::builder().provide(..)`)
/// wherever they appear; the other parameters are the step's inputs, owned,
/// `Clone` (they are cloned for every attempt and for the rollback handler)
/// and `Serialize` (they are recorded as JSON in the step's start record
/// when it is called). A step that is not `read_only` must take the key
/// and use it.
///
/// The error type may be `StepError`, any `std::error::Error + Send + Sync
/// + 'static`, `anyhow::Error` (feature `anyhow`), `String` or `&str`: the
/// expansion converts it, retryable unless the type implements
/// `saga_runtime::Permanent` and says the error is permanent.
///
/// # `saga.lock`
///
/// When the crate has a `saga.lock` (or `SAGA_LOCK_PATH` names one), each
/// step and workflow is checked against it: a step renamed without
/// `renamed_from`, a changed output type (a hash of its tokens as written:
/// `Foo` → `crate::Foo` is flagged, a field added inside `Foo` is not), a
/// locked name (or patch) a workflow no longer uses, a step a workflow
/// calls outside a `ctx.patched` branch that the lock does not list for
/// it. Each error says the ways forward: put a new call behind
/// `if ctx.patched("name") { .. }`, declare `renamed_from = "old"`, or run
/// `SAGA_LOCK=update cargo build` on purpose (for a workflow with no
/// instance in flight), the only build that writes the file. A step new to
/// the lock is not an error by itself: its callers are checked. A workflow
/// deleted entirely is not seen by the macros.
#[proc_macro_attribute]
pub fn step(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::step(args.into(), item.into()).into()
}

/// Marks an `async fn(ctx: RollbackContext<'_, T>, inputs..) -> Result<(), StepError>`
/// as the compensation of a step whose output is `T` and whose inputs are
/// `inputs`, with its own retry settings.
///
/// ```ignore
/// #[rollback(retries = 10, delay = "30 seconds", backoff = "exponential", timeout = "2 minutes")]
/// async fn refund_bank_a(ctx: RollbackContext<'_, DebitId>, t: Transfer) -> Result<(), StepError> {
///     bank_a().credit(&t.from, t.amount, ctx.key().as_str()).await.map_err(StepError::retryable)
/// }
/// ```
///
/// A handler that needs none of the step's inputs may take only its
/// context; `Service<T>` parameters may appear anywhere after it. Its error
/// type is converted as a step's.
///
/// Keys: `retries`, `delay`, `backoff`, `timeout`, as on `#[step]`; a bare
/// `#[rollback]` keeps the defaults. A handler named by
/// `#[step(rollback = ..)]` must carry this attribute, which is how the step
/// finds its settings and checks its signature. The handler must use
/// `ctx.key()`, its own idempotency key.
#[proc_macro_attribute]
pub fn rollback(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::rollback(args.into(), item.into()).into()
}
