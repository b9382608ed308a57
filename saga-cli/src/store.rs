//! Which store the command opens. A new backend is a variant here: how
//! it is chosen from the arguments, how it opens, whether `watch` works
//! from another process.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use saga_cli::CliError;
use saga_runtime::{Engine, Error};

pub(crate) enum Backend {
    /// A sled store in a directory, held by one process at a time.
    Sled(PathBuf),
    /// A PostgreSQL store, read beside its running workers: its URL, and
    /// its schema when not the runtime's default.
    Postgres { url: String, schema: Option<String> },
}

impl Backend {
    /// `--db DIR` when given, else `--database-url` / `$SAGA_DATABASE_URL`
    /// (in `--schema` / `$SAGA_DATABASE_SCHEMA`, default `saga`), else
    /// `./saga-data`.
    pub(crate) fn choose(
        db: Option<PathBuf>,
        database_url: Option<String>,
        schema: Option<String>,
    ) -> Backend {
        match (db, database_url) {
            (Some(dir), _) => Backend::Sled(dir),
            (None, Some(url)) => Backend::Postgres { url, schema },
            (None, None) => Backend::Sled(PathBuf::from("./saga-data")),
        }
    }

    /// Whether `watch` sees the events of instances another process runs.
    pub(crate) fn watches_from_another_process(&self) -> bool {
        match self {
            // Only the process that holds the store sees its events.
            Backend::Sled(_) => false,
            // Any process follows the journals in the database.
            Backend::Postgres { .. } => true,
        }
    }

    /// Opens the store with no workflow registered.
    pub(crate) async fn open(&self) -> Result<Engine, CliError> {
        match self {
            Backend::Sled(dir) => open_sled(dir),
            Backend::Postgres { url, schema } => open_postgres(url, schema.as_deref()).await,
        }
    }
}

fn open_sled(dir: &std::path::Path) -> Result<Engine, CliError> {
    // Engine::open creates a store where there is none: refuse, so a
    // mistyped path does not leave an empty store behind.
    if !dir.join("db").is_file() {
        return Err(CliError::usage(format!(
            "no saga store in {}: pass the directory an application opened with Engine::open, as --db DIR",
            dir.display()
        )));
    }
    // Retention is the application's to decide: this process never
    // removes a finished instance.
    let engine = Engine::builder().retention(Duration::MAX).open(dir);
    engine.map_err(|error| match error {
        Error::StoreLocked { path } => CliError::usage(format!(
            "the store in {} is held by a running application: run this command on its admin endpoint, saga --url http://ADDRESS (the address it serves with saga_cli::serve); if it serves none, embed the commands in it (saga_cli::run)",
            path.display()
        )),
        error => CliError::usage(format!("cannot open the store in {}: {error}", dir.display())),
    })
}

/// A read-only connection: it takes no lease, so it works while workers
/// run. Control commands are posted to the worker that owns the instance.
async fn open_postgres(url: &str, schema: Option<&str>) -> Result<Engine, CliError> {
    let builder = Engine::builder()
        .retention(Duration::MAX)
        .store_timeout(Duration::from_secs(10));
    let builder = match schema {
        Some(schema) => builder.postgres_schema(schema),
        None => builder,
    };
    builder
        .connect_read_only(url)
        .await
        .map_err(|error| CliError::usage(format!("cannot open the PostgreSQL store: {error}")))
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Sled(dir) => write!(f, "sled store in {}", dir.display()),
            Backend::Postgres { .. } => f.write_str("PostgreSQL store"),
        }
    }
}
