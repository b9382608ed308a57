//! The `saga` command: see, control and watch the instances of a saga
//! store, from the `saga` binary or embedded in an application.
//!
//! A sled store is held by the one process that opened it, so while an
//! application's engine runs, the standalone `saga` binary cannot open its
//! store. The same commands run inside the application, on its engine:
//! wire [`run`] to an admin subcommand or route.
//!
//! ```no_run
//! use saga_runtime::Engine;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), saga_runtime::Error> {
//! let engine = Engine::open("./saga-data")?;
//! // engine.register(bank_transfer)?; ...
//!
//! // `myapp saga show transfer-43`: hand the words after `saga` over.
//! let args = std::env::args_os().skip(2); // ["show", "transfer-43"]
//! let mut out = std::io::stdout();
//! if let Err(e) = saga_cli::run(&engine, args, &mut out).await {
//!     eprintln!("saga: {e}");
//!     std::process::exit(e.exit_code().into());
//! }
//! // Or, from an `async fn main() -> ExitCode`:
//! // return saga_cli::main(&engine, std::env::args_os().skip(2)).await;
//! # Ok(())
//! # }
//! ```
//!
//! # Commands
//!
//! | command | what it does |
//! |---|---|
//! | `list [--status S] [--workflow W] [--limit N] [--json]` | a table of instances, by start time then id (`--order id`: by id) |
//! | `show ID [--json] [--key-file F]` | one instance as a timeline, with its rollback (a child's inside its parent's) |
//! | `history ID [--run N] [--json]` | one instance's history: every event, in order (`--run`: an earlier run of one that continued as new) |
//! | `send-event ID TYPE --json PAYLOAD` | sends an event |
//! | `update ID NAME JSON [--id UPDATE_ID] [--timeout SECONDS]` | sends an update and prints the workflow's reply (through `--url`: in the process that runs the workflow) |
//! | `pause ID`, `resume ID` | pauses at the next step boundary, resumes |
//! | `terminate [--rollback] ID` | ends it, with or without compensation |
//! | `restart [--from STEP] ID` | runs it again as a new generation |
//! | `retry-rollback ID` | runs again the compensations of a rollback that gave up |
//! | `watch [ID] [--count N] [--json]` | lifecycle events as they become durable |
//! | `check --lock saga.lock [--json]` | in-flight instances the lock no longer fits |
//! | `check --replay [--from DIR] [--json]` | in-flight instances (or the histories in `DIR`) the registered code would block, replayed with no side effects |
//! | `export ID`, `export --all [--status S].. [--workflow W] DIR` | histories as JSON (`saga_runtime::testing::History`): printed, or one `ID.json` each |
//! | `schedules [--json]` | the stored schedules: timing, workflow, next tick, paused, last tick |
//! | `schedules pause NAME`, `schedules resume NAME` | pauses a schedule for every worker, resumes it |
//! | `schedules trigger NAME` | starts an extra tick now (on an engine that declares the schedule) |
//! | `queues [--json]` | each queue's waiting and started instances, and its limits |
//!
//! Control commands write their intent into the instance's journal; the
//! engine that drives the instance (this one, or the application's when
//! it opens the store and registers the workflow) acts on it. On an engine
//! that only reads (PostgreSQL, `connect_read_only`), they post it to the
//! worker that drives the instance, and say so.
//!
//! # Output
//!
//! Times are in local time (`2030-01-01 09:00:07 JST`: `$TZ`, else the
//! system's zone, else UTC; an unreadable `$TZ` is UTC), durations and sizes are rounded for
//! reading. Colors follow `--color auto|always|never`: [`run`] writes
//! none unless `--color always`; [`execute`] with
//! [`Colors::when_terminal`] colors a terminal (not with `NO_COLOR` set).
//! Text the instances stored (ids, names, errors, payloads) is printed
//! with its control characters, bidi overrides and line breaks escaped
//! (`\u{1b}`, `\n`), so it cannot act on the terminal; `--json` has it as
//! stored.
//!
//! With `--json`, read commands print one JSON document (`watch`: one per
//! line) whose `"schema"` field is `1`. A later schema changes that number;
//! fields may be added within a schema. Times are RFC 3339 strings in UTC
//! (`"2030-01-01T00:00:07.250Z"`), durations are milliseconds, payloads are
//! `{"bytes": N, "value": ...}`, or `{"bytes": N, "unavailable": "why"}`
//! for a payload that is not JSON (written by the first release), or
//! `{"bytes": N, "unavailable": "<encrypted: key K>", "encrypted_with": "K"}`
//! for one sealed with a key neither the engine's codec nor `--key-file`
//! (nor the codec given to [`run_with_codec`]) holds. A step input marked
//! `#[step(redact = [..])]` is the string `"<redacted>"` in its step's
//! `"input"` array, in both outputs; its value is never printed.
//!
//! - `list`: `{"schema": 1, "instances": [{"id", "workflow", "status",
//!   "created_at", "updated_at", "finished_at", "workflow_registered",
//!   "at", "error", "rollback_error", "tags", "parent",
//!   "failed_compensation", "owner"}], "unreadable": [{"id", "error"}],
//!   "next"}`; `at` is the step, sleep, wait or compensation it is at
//!   (`{"kind", "name"}`), or `null`; `tags` an object of key to value;
//!   `owner` the worker that drives an unfinished instance and since when
//!   (`{"worker", "since"}`), or `null`; `next` the cursor of the next page
//!   (`--after`), or `null`; `unreadable` the instances of a page whose
//!   index entry does not read.
//! - `show`: `{"schema": 1, "instance": {"id", "workflow", "status",
//!   "generation", "run", "created_at", "updated_at", "finished_at",
//!   "input", "output", "error", "error_value" (the workflow's own error as
//!   stored, a payload like "output"), "rollback_cause", "rollback_error", "slots",
//!   "compensations", "pending_events", "rejected_events", "published",
//!   "event_ids", "tags", "parent", "failed_compensation", "owner"}}`. Each of
//!   `"published"` is the latest value of a name the workflow published
//!   (`ctx.publish`): `"name"`, `"value"` (a payload like "output"),
//!   `"version"`, `"published_at"`. Each of `"event_ids"` is an event id
//!   the instance remembers (a send with it again is a duplicate):
//!   `"id"`, `"event_type"`, `"sent_at"`. Each slot has `"kind"`
//!   (`"step"`, `"sleep"`, `"wait"` or `"child"`), `"name"`, `"occurrence"`,
//!   `"generation"`, `"started_at"`, `"ended_at"`, `"duration_ms"`; a step
//!   adds `"key"`, `"state"` (`running`, `completed`, `failed`, `cancelled`),
//!   `"attempts"`, `"error"`, `"retry_at"`, `"input"`, `"output"`; a sleep
//!   `"wake_at"`, `"done"`; a wait `"event_type"`, `"deadline"`, `"state"`
//!   (`waiting`, `received`, `timed_out`), `"payload"`; a child `"child"`
//!   (its instance id), `"workflow"`, `"rollback"`, `"state"` (`running`,
//!   or how it ended), `"output"`, `"error"`. Compensations, in the order
//!   they ran: `"step"`, `"occurrence"`, `"key"` (`null` for a child's),
//!   `"child"` (the child it undoes, or `null`), `"state"` (`running`,
//!   `completed`, `failed`), `"attempts"` (made so far, the last
//!   included), `"error"`, `"started_at"`, `"ended_at"`.
//! - `history`: per event, one line as `watch --json` prints it.
//! - `watch`: per event `{"schema": 1, "instance", "seq", "at", "event",
//!   "text"}`: `event` is the [`EventKind`](saga_runtime::inspect::EventKind) variant's name
//!   (`"StepCompleted"`), `text` the sentence it reads as.
//! - `check`: `{"schema": 1, "lock", "stale": [{"id", "workflow", "status",
//!   "missing": [{"kind", "name"}]}], "unreadable": [{"id", "error"}]}`;
//!   `kind` is `workflow`, `step`, `sleep` or `wait`; an unreadable index
//!   entry is not checked. With `--replay` (alone, or besides `--lock`, in
//!   the same document): `"replayed"` (how many were), `"blocked": [{"id",
//!   "workflow", "status", "recorded", "called", "error"}]` (`recorded` and
//!   `called` name the two calls of a non-determinism, `step
//!   "charge-card"`, else `null`), `"not_registered": [{"id", "workflow"}]`
//!   (not replayed, not a failure), `"not_replayed": [{"id", "error"}]`.
//! - `export`: not a schema-1 document but a history file, `"format": 1`
//!   (see `saga_runtime::testing::History`).
//! - `schedules`: `{"schema": 1, "schedules": [{"name", "workflow",
//!   "timing", "paused", "next_ticks", "last_tick", "last_outcome",
//!   "catch_up", "overlap", "jitter_ms", "kept_tick", "declared_here",
//!   "run_time"}]}`, by name; `timing` reads as `every 900 s` or
//!   `cron "0 2 * * *" in Europe/Paris`; `next_ticks` the next three
//!   times it fires (none while paused); `last_tick` the last tick it
//!   fired (manual runs aside), or `null`; `last_outcome` the status of
//!   that tick's instance (`running`, `complete`, `compensated`, ...), or
//!   `null` (no tick yet, or its instance is gone); `catch_up` `{"policy", "at_most"}`
//!   (`skip`, `latest`, or `all` with its `at_most`); `overlap` `allow`,
//!   `skip` or `queue-one`; `jitter_ms` the most a tick fires late on
//!   purpose, or `null`; `kept_tick` the tick `queue-one` keeps, or
//!   `null`; `declared_here` whether the engine the command ran on declares
//!   it (and so fires it); `run_time` whether it was created at run time
//!   (`engine.schedules().create`: any engine that registers its workflow
//!   fires it).
//! - `queues`: `{"schema": 1, "queues": [{"queue", "waiting", "started", "oldest_waiting",
//!   "limits"}], "unreadable_count"}`, by name: every queue an instance names, and
//!   those the engine declares; `waiting` the instances `Queued` for a
//!   slot, `started` those that left the wait and have not ended,
//!   `oldest_waiting` when the longest-waiting one was created (or
//!   `null`); `limits` what the engine declares, `{"concurrency",
//!   "per_key", "per_worker", "rate": {"starts", "per_ms"},
//!   "release_while_waiting"}` (`null` where it sets none), or `null` when
//!   the engine does not declare the queue (the binary declares none);
//!   `unreadable_count` the index entries that did not read, not counted.
//!
//! # Exit codes
//!
//! 0: done. 1: the command was refused or failed (an unknown instance or
//! schedule, a status that does not allow it), or `check` found stale
//! instances (or, with `--replay`, instances the code would block, or
//! that could not be replayed). 2: wrong usage (an unknown status, bad JSON), or the store
//! cannot be used from here (`schedules trigger` on an engine that does
//! not declare the schedule).
#![deny(clippy::too_many_lines)]
// On docs.rs, each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod args;
mod check;
mod control;
mod dashboard;
mod export;
mod history;
mod json;
mod list;
mod output;
mod queues;
mod replay;
mod schedules;
mod serve;
mod show;
mod watch;

use std::ffi::OsString;
use std::fmt;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

pub use self::args::Args;
use self::args::Command;
pub use self::output::Colors;
pub use self::serve::{Admin, AdminServer, ServeError, TOKEN_VAR, serve};
use saga_runtime::{Codec, Engine};

/// Parses `args`, the words of a command without a program name
/// (`["show", "transfer-43"]`, as in `std::env::args_os().skip(n)` past
/// your own program's words), and runs the command on `engine`, writing
/// to `out` without colors (unless `--color always`). `--help` writes the
/// help to `out`. [`main`] does the same on stdout and gives back the
/// process's [`ExitCode`].
pub async fn run<I, T>(engine: &Engine, args: I, out: &mut impl Write) -> Result<(), CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    parse_and_dispatch(engine, None, args, out).await
}

/// [`run`], opening encrypted values with `codec` too (`saga show`): for
/// an application whose engine reads the store without the keys, or a
/// tool that holds other keys than the engine.
pub async fn run_with_codec<I, T>(
    engine: &Engine,
    codec: &dyn Codec,
    args: I,
    out: &mut impl Write,
) -> Result<(), CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    parse_and_dispatch(engine, Some(codec), args, out).await
}

/// Runs the command in `args` (the words after the program name, as for
/// [`run`]) on `engine`, printing to stdout, and any error as one line on
/// stderr (`saga: ...`), and returns the process exit code (see
/// [Exit codes](crate#exit-codes)): what an application's `main` returns
/// for its `saga` subcommand.
///
/// ```no_run
/// use std::process::ExitCode;
///
/// #[tokio::main]
/// async fn main() -> ExitCode {
///     let engine = saga_runtime::Engine::open("./saga-data").unwrap();
///     // engine.register(bank_transfer)?; ...
///     let mut words = std::env::args_os().skip(1);
///     if words.next().is_some_and(|w| w == "saga") {
///         // myapp saga show transfer-43
///         return saga_cli::main(&engine, words).await;
///     }
///     // ... the application itself
///     ExitCode::SUCCESS
/// }
/// ```
pub async fn main<I, T>(engine: &Engine, args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut out = std::io::stdout();
    match run(engine, args, &mut out).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("saga: {error}");
            ExitCode::from(&error)
        }
    }
}

async fn parse_and_dispatch<I, T>(
    engine: &Engine,
    codec: Option<&dyn Codec>,
    args: I,
    out: &mut impl Write,
) -> Result<(), CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let parsed = match parse_embedded(args, out) {
        Ok(parsed) => parsed,
        Err(outcome) => return outcome,
    };
    dispatch(engine, &parsed.args, out, Colors::Off, codec).await
}

/// Parses the words of a command, without a program name, for [`run`]:
/// `Err` holds what `run` returns without running anything (`--help`
/// printed, or a usage error).
fn parse_embedded<I, T>(args: I, out: &mut impl Write) -> Result<Embedded, Result<(), CliError>>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut args = args.into_iter().map(Into::into).peekable();
    if args.peek().is_some_and(|first: &OsString| first == "saga") {
        return Err(Err(CliError::usage(
            "saga_cli::run takes the words after the program name: drop the leading \"saga\" \
             (run(&engine, [\"show\", \"transfer-43\"], ..))",
        )));
    }
    let argv = std::iter::once(OsString::from("saga")).chain(args);
    Embedded::try_parse_from(argv).map_err(|error| parse_failure(error, out))
}

/// Runs a parsed command on `engine`, for an application that puts
/// [`Args`] in its own `clap` parser (`#[command(flatten)]`). `colors` is
/// what `--color auto` (the default) stands for, such as
/// `Colors::when_terminal(&std::io::stdout())`; `--color always` and
/// `--color never` override it.
pub async fn execute(
    engine: &Engine,
    args: &Args,
    out: &mut impl Write,
    colors: Colors,
) -> Result<(), CliError> {
    dispatch(engine, args, out, colors, None).await
}

/// [`execute`], opening encrypted values with `codec` too, as
/// [`run_with_codec`] does.
pub async fn execute_with_codec(
    engine: &Engine,
    codec: &dyn Codec,
    args: &Args,
    out: &mut impl Write,
    colors: Colors,
) -> Result<(), CliError> {
    dispatch(engine, args, out, colors, Some(codec)).await
}

pub(crate) async fn dispatch(
    engine: &Engine,
    args: &Args,
    out: &mut impl Write,
    colors: Colors,
    codec: Option<&dyn Codec>,
) -> Result<(), CliError> {
    let style = output::Style::new(args.color.colors(colors));
    match &args.command {
        Command::List(a) => list::run(engine, a, out, &style).await,
        Command::Show(a) => show::run(engine, a, codec, out, &style).await,
        Command::History(a) => history::run(engine, a, out).await,
        Command::SendEvent(a) => control::send_event(engine, a, out).await,
        Command::Update(a) => control::update(engine, a, out).await,
        Command::Pause(a) => control::pause(engine, a, out).await,
        Command::Resume(a) => control::resume(engine, a, out).await,
        Command::Terminate(a) => control::terminate(engine, a, out).await,
        Command::Restart(a) => control::restart(engine, a, out).await,
        Command::RetryRollback(a) => control::retry_rollback(engine, a, out).await,
        Command::Watch(a) => watch::run(engine, a, out).await,
        Command::Check(a) => check::run(engine, a, out, &style).await,
        Command::Export(a) => export::run(engine, a, out).await,
        Command::Schedules(a) => schedules::run(engine, a, out, &style).await,
        Command::Queues(a) => queues::run(engine, a, out, &style).await,
    }
}

/// What to do with an error of `clap`'s `try_parse`: `--help` and
/// `--version` are written to `out`; anything else becomes a one-line
/// [`CliError`] (exit code 2).
pub fn parse_failure(error: clap::Error, out: &mut impl Write) -> Result<(), CliError> {
    use clap::error::ErrorKind;
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            write!(out, "{}", error.render()).map_err(CliError::output)
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            write!(out, "{}", error.render()).map_err(CliError::output)?;
            Err(CliError::usage("a command is missing"))
        }
        _ => {
            let rendered = error.render().to_string();
            let line = rendered
                .lines()
                .map(str::trim)
                .find(|line| !line.is_empty())
                .unwrap_or("invalid arguments");
            let line = line.strip_prefix("error: ").unwrap_or(line);
            Err(CliError::usage(format!("{line} (see --help)")))
        }
    }
}

/// The commands alone, for [`run`]: a fixed program name, then a command.
#[derive(Parser)]
#[command(name = "saga", about = "See, control and watch saga instances")]
pub(crate) struct Embedded {
    #[command(flatten)]
    pub(crate) args: Args,
}

/// Why a command did not succeed: one line to show, and the process exit
/// code it stands for (see the module docs).
#[derive(Debug)]
pub struct CliError {
    message: String,
    exit_code: u8,
}

impl CliError {
    /// A command that was refused or failed (exit code 1).
    pub(crate) fn failed(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            exit_code: 1,
        }
    }

    /// An error with the exit code an admin endpoint answered.
    pub fn with_code(message: impl Into<String>, exit_code: u8) -> Self {
        CliError {
            message: message.into(),
            exit_code,
        }
    }

    /// Wrong usage, or a store that cannot be used from here (exit code 2).
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            exit_code: 2,
        }
    }

    /// The output could not be written (a closed pipe).
    pub(crate) fn output(error: std::io::Error) -> Self {
        CliError::failed(format!("cannot write the output: {error}"))
    }

    /// The process exit code: 1 for a refused or failed command, 2 for
    /// wrong usage, 3 for a call posted to another worker that has not
    /// answered yet (it is kept, and acted on later).
    pub fn exit_code(&self) -> u8 {
        self.exit_code
    }
}

impl From<&CliError> for ExitCode {
    /// The process exit code of [`CliError::exit_code`].
    fn from(error: &CliError) -> Self {
        ExitCode::from(error.exit_code)
    }
}

impl From<CliError> for ExitCode {
    /// The process exit code of [`CliError::exit_code`].
    fn from(error: CliError) -> Self {
        ExitCode::from(&error)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

impl From<saga_runtime::Error> for CliError {
    fn from(error: saga_runtime::Error) -> Self {
        // Its message may quote stored text (a step name, an error).
        let message = output::escape(&error.to_string()).into_owned();
        let exit_code = match error {
            saga_runtime::Error::NotAnswered { .. } => 3,
            _ => 1,
        };
        CliError { message, exit_code }
    }
}

impl From<std::io::Error> for CliError {
    fn from(error: std::io::Error) -> Self {
        CliError::output(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commands_parse() {
        use clap::CommandFactory;
        Embedded::command().debug_assert();
    }

    #[tokio::test]
    async fn wrong_usage_is_one_line_with_exit_code_2() {
        let engine = Engine::temporary().unwrap();
        let mut out = Vec::new();
        for args in [
            &["frobnicate"][..],
            &["list", "--status", "sleepy"],
            &["show"],
            &["send-event", "x", "t", "--json", "{nope"],
            &["list", "--limit", "-3"],
            &["schedules", "pause"],
            &["schedules", "frobnicate", "nightly"],
            &["queues", "bank-api"],
        ] {
            let error = run(&engine, args, &mut out).await.unwrap_err();
            assert_eq!(error.exit_code(), 2, "{args:?}: {error}");
            assert!(!error.to_string().contains('\n'), "{args:?}: {error}");
        }
    }

    #[tokio::test]
    async fn help_goes_to_out() {
        let engine = Engine::temporary().unwrap();
        let mut out = Vec::new();
        run(&engine, ["--help"], &mut out).await.unwrap();
        let help = String::from_utf8(out).unwrap();
        assert!(help.contains("send-event"), "{help}");
    }

    /// `run` takes the words after the program name: a first word `saga`
    /// (the old calling convention, which took it for the program name) is
    /// refused, saying what to do, rather than read as something else.
    #[tokio::test]
    async fn a_leading_program_name_is_refused_with_the_fix() {
        let engine = Engine::temporary().unwrap();
        let mut out = Vec::new();
        let error = run(&engine, ["saga", "list"], &mut out).await.unwrap_err();
        assert_eq!(error.exit_code(), 2, "{error}");
        assert!(error.to_string().contains("drop the leading"), "{error}");
        assert!(out.is_empty());
        // The command alone runs, with no program name before it.
        run(&engine, ["list"], &mut out).await.unwrap();
        assert_eq!(ExitCode::from(&error), ExitCode::from(2));
    }
}

/// The README and the guide (`book/src`), compiled as doc tests: every
/// ```` ```rust ```` block in them builds under `cargo test --workspace`
/// (`cargo test -p saga-cli --doc`). Here, not in `saga-runtime`, because
/// the guide's blocks use both crates; the examples crate would check them
/// against its own `saga.lock`.
#[cfg(doctest)]
pub mod guide {
    #[doc = include_str!("../../README.md")]
    pub mod readme {}
    #[doc = include_str!("../../book/src/introduction.md")]
    pub mod introduction {}
    #[doc = include_str!("../../book/src/getting-started.md")]
    pub mod getting_started {}
    #[doc = include_str!("../../book/src/steps.md")]
    pub mod steps {}
    #[doc = include_str!("../../book/src/rollback.md")]
    pub mod rollback {}
    #[doc = include_str!("../../book/src/errors.md")]
    pub mod errors {}
    #[doc = include_str!("../../book/src/waits-and-children.md")]
    pub mod waits_and_children {}
    #[doc = include_str!("../../book/src/published-state.md")]
    pub mod published_state {}
    #[doc = include_str!("../../book/src/updates.md")]
    pub mod updates {}
    #[doc = include_str!("../../book/src/changing-workflows.md")]
    pub mod changing_workflows {}
    #[doc = include_str!("../../book/src/schedules.md")]
    pub mod schedules {}
    #[doc = include_str!("../../book/src/queues.md")]
    pub mod queues {}
    #[doc = include_str!("../../book/src/tags-and-search.md")]
    pub mod tags_and_search {}
    #[doc = include_str!("../../book/src/storage-sled.md")]
    pub mod storage_sled {}
    #[doc = include_str!("../../book/src/postgresql.md")]
    pub mod postgresql {}
    #[doc = include_str!("../../book/src/encryption.md")]
    pub mod encryption {}
    #[doc = include_str!("../../book/src/operations.md")]
    pub mod operations {}
    #[doc = include_str!("../../book/src/testing.md")]
    pub mod testing {}
    #[doc = include_str!("../../book/src/compile-time-checks.md")]
    pub mod compile_time_checks {}
}
