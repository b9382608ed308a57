//! `saga`: see, control and watch the instances of a saga store.
//!
//! ```text
//! saga list [--status S] [--workflow W] [--limit N] [--json]
//! saga show ID [--json] [--key-file FILE]
//! saga send-event ID TYPE --json '{"approved": true}'
//! saga pause|resume ID
//! saga terminate [--rollback] ID
//! saga restart [--from STEP] ID
//! saga watch [ID]             (sled: embedded only; PostgreSQL: any process)
//! saga check --lock saga.lock
//! saga schedules [--json]
//! saga schedules pause|resume|trigger NAME
//! saga queues [--json]
//! ```
//!
//! On `--db DIR` (sled, default `./saga-data`) or `--database-url URL`
//! (`$SAGA_DATABASE_URL`) with `--schema NAME` (`$SAGA_DATABASE_SCHEMA`,
//! default `saga`); `--color auto|always|never` (auto honours `NO_COLOR`).
//!
//! With `--url http://127.0.0.1:7070` (`$SAGA_ADMIN_URL`) the command runs
//! on a running service's admin endpoint instead (`saga_cli::serve`), which
//! reaches a sled store the service holds; every command sends
//! `$SAGA_ADMIN_TOKEN`, which the endpoint needs.
//!
//! Otherwise it opens the store with no workflow registered: control commands write
//! their intent into the instance's journal, and the application's engine
//! acts on it when it opens the store. A sled store is held by one process
//! at a time; while the application runs, use its admin endpoint
//! (`--url`), or the same commands embedded in it (`saga_cli::run`).

mod remote;
mod store;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use saga_cli::{self as cli, CliError, Colors};

use crate::store::Backend;

#[derive(Parser)]
#[command(
    name = "saga",
    version,
    about = "See, control and watch the instances of a saga store"
)]
struct SagaArgs {
    /// The directory of a sled store [default: ./saga-data].
    #[arg(long, global = true, value_name = "DIR")]
    db: Option<PathBuf>,
    /// A PostgreSQL store, read while its workers run; --db wins over
    /// $SAGA_DATABASE_URL.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "SAGA_DATABASE_URL",
        hide_env_values = true
    )]
    database_url: Option<String>,
    /// The PostgreSQL schema that holds the store's tables, as the
    /// workers' `postgres_schema` [default: saga].
    #[arg(long, global = true, value_name = "NAME", env = "SAGA_DATABASE_SCHEMA")]
    schema: Option<String>,
    /// A running service's admin endpoint (`saga_cli::serve`), instead of a
    /// store: the command runs there, with the token of $SAGA_ADMIN_TOKEN.
    #[arg(long, global = true, value_name = "URL", env = "SAGA_ADMIN_URL")]
    url: Option<String>,
    #[command(flatten)]
    commands: cli::Args,
}

fn main() -> ExitCode {
    let mut stdout = std::io::stdout();
    let outcome = match SagaArgs::try_parse() {
        Ok(args) => run(args, &mut stdout),
        Err(error) => cli::parse_failure(error, &mut stdout),
    };
    let _ = stdout.flush();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("saga: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

fn run(args: SagaArgs, out: &mut std::io::Stdout) -> Result<(), CliError> {
    if let Some(url) = &args.url {
        return remote::run(url, &command_line(), out);
    }
    let backend = Backend::choose(args.db, args.database_url, args.schema);
    if args.commands.is_watch() && !backend.watches_from_another_process() {
        return Err(CliError::usage(format!(
            "watch needs the process that holds the store ({}): run saga_cli::run(&engine, [\"watch\"], ..) inside the application",
            backend
        )));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| CliError::usage(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        let engine = backend.open().await?;
        let colors = Colors::when_terminal(&std::io::stdout());
        let result = cli::execute(&engine, &args.commands, out, colors).await;
        // Flushes, and releases the store before the process exits.
        engine.close().await;
        result
    })
}

/// This process's command line without the program name and the options
/// that choose a store or an endpoint: what the endpoint runs.
fn command_line() -> Vec<String> {
    const OWN: [&str; 4] = ["--url", "--db", "--database-url", "--schema"];
    let mut kept = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if OWN.contains(&arg.as_str()) {
            args.next();
            continue;
        }
        if OWN.iter().any(|own| arg.starts_with(&format!("{own}="))) {
            continue;
        }
        kept.push(arg);
    }
    kept
}
