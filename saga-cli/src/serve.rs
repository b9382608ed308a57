//! The admin endpoint: the `saga` commands over HTTP, on a running
//! service's own engine, so `saga --url` reaches a sled store that the
//! service holds.
//!
//! One route runs a command as the command line would:
//!
//! - `GET /`: the web dashboard (`dashboard`).
//! - `GET /metrics`: Prometheus text, with [`Admin::with_prometheus`].
//! - `POST /v1/command` with `{"args": ["show", "transfer-43", "--json"]}`
//!   answers `{"code": 0, "output": "..."}` (the command's output, as the
//!   binary prints it) or `{"code": 1, "error": "..."}`; the HTTP status is
//!   200, 409 (the command was refused or failed), 400 (wrong usage) or 202
//!   (posted to another worker, not answered yet).
//!
//! `watch` runs forever and is refused here. Every command runs on the
//! engine's cancel-safe calls, so a client that disconnects (axum then
//! drops the handler) leaves nothing half done.
//!
//! # Security
//!
//! - [`Admin::bind`] refuses an address that is not loopback unless
//!   [`Admin::allow_remote`] says so.
//! - Control commands (`send-event`, `pause`, `resume`, `terminate`,
//!   `restart`, `retry-rollback`, `schedules pause|resume|trigger`) need
//!   `Authorization: Bearer <token>`,
//!   the token given to [`Admin::token`] or, by default, `$SAGA_ADMIN_TOKEN`.
//!   Without a token configured they are refused. Reads need it too with
//!   [`Admin::reads_need_token`], and always when the engine has a payload
//!   codec (its values are sealed at rest; the endpoint shows them opened).
//! - A request without a valid token gets 401 and changes nothing. Tokens
//!   are compared in constant time. Bodies are limited to 64 KiB.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Parser;
use saga_runtime::Engine;
use serde_json::json;

use crate::args::Command;
use crate::{CliError, Colors, Embedded, dispatch};

/// The variable that holds the token by default.
pub const TOKEN_VAR: &str = "SAGA_ADMIN_TOKEN";

/// The largest request body taken, in bytes.
const BODY_LIMIT: usize = 64 * 1024;

/// The admin endpoint of an engine, to configure and [`bind`](Admin::bind).
///
/// ```no_run
/// # async fn demo(engine: saga_runtime::Engine) -> Result<(), saga_cli::ServeError> {
/// let admin = saga_cli::Admin::new(&engine)
///     .token("s3cret")
///     .bind("127.0.0.1:7070".parse().unwrap())
///     .await?;
/// println!("admin endpoint on http://{}", admin.local_addr());
/// # Ok(()) }
/// ```
#[must_use = "nothing is served until `bind` is awaited"]
pub struct Admin {
    engine: Engine,
    token: Option<String>,
    reads_need_token: bool,
    remote: bool,
    metrics: Option<Metrics>,
    store_counts: bool,
}

/// What renders `/metrics`.
type Metrics = Arc<dyn Fn() -> String + Send + Sync>;

/// Why the endpoint could not start.
#[derive(Debug)]
pub struct ServeError(String);

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServeError {}

/// A running endpoint; it stops when this is dropped or
/// [`shutdown`](AdminServer::shutdown) is awaited.
pub struct AdminServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl AdminServer {
    /// The address it listens on (the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops taking requests, lets those under way finish, and returns
    /// once it stopped.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Serves the admin endpoint of `engine` on `addr` (loopback), with the
/// token of `$SAGA_ADMIN_TOKEN`: the one line an application adds. Keep
/// the answer: the endpoint stops when it is dropped.
pub async fn serve(engine: &Engine, addr: SocketAddr) -> Result<AdminServer, ServeError> {
    Admin::new(engine).bind(addr).await
}

impl Admin {
    /// The endpoint of `engine`, with the token of `$SAGA_ADMIN_TOKEN` if
    /// it is set.
    pub fn new(engine: &Engine) -> Admin {
        Admin {
            engine: engine.clone(),
            token: std::env::var(TOKEN_VAR).ok().filter(|t| !t.is_empty()),
            reads_need_token: false,
            remote: false,
            metrics: None,
            store_counts: false,
        }
    }

    /// Serves `GET /metrics` with what `render` answers (Prometheus text
    /// from the application's own recorder, for one). It is a read: it
    /// needs the token when reads do.
    pub fn metrics(mut self, render: impl Fn() -> String + Send + Sync + 'static) -> Admin {
        self.metrics = Some(Arc::new(render));
        self
    }

    /// Installs a Prometheus recorder as the process's `metrics` recorder
    /// and serves its text at `GET /metrics`: every metric of the README's
    /// table, for a scraper.
    ///
    /// # Errors
    ///
    /// Another recorder is installed already: give its output with
    /// [`Admin::metrics`] instead.
    #[cfg(feature = "prometheus")]
    pub fn with_prometheus(self) -> Result<Admin, ServeError> {
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .map_err(|e| {
                ServeError(format!(
                    "cannot install the Prometheus recorder ({e}): the process has a metrics recorder already; serve its output with Admin::metrics"
                ))
            })?;
        Ok(self.metrics(move || handle.render()))
    }

    /// Before each `GET /metrics`, counts the store's instances by status
    /// and each queue's depth ([`Engine::instance_counts`], every worker's
    /// on PostgreSQL) into the gauges `saga_instances`,
    /// `saga_queue_waiting` and `saga_queue_started`. A scrape then reads
    /// the whole index, a page at a time: off by default.
    pub fn with_store_counts(mut self) -> Admin {
        self.store_counts = true;
        self
    }

    /// The bearer token control commands (and reads, when they need it)
    /// must present, instead of `$SAGA_ADMIN_TOKEN`.
    pub fn token(mut self, token: impl Into<String>) -> Admin {
        self.token = Some(token.into());
        self
    }

    /// Reads (`list`, `show`, `history`, `check`, `schedules`, `queues`)
    /// need the token too. They always do when the engine has a payload
    /// codec.
    pub fn reads_need_token(mut self) -> Admin {
        self.reads_need_token = true;
        self
    }

    /// Lets [`bind`](Admin::bind) take an address that is not loopback:
    /// put the endpoint behind TLS and a token.
    pub fn allow_remote(mut self) -> Admin {
        self.remote = true;
        self
    }

    /// Starts serving on `addr`, in a task of the current Tokio runtime.
    ///
    /// # Errors
    ///
    /// An address that is not loopback without [`Admin::allow_remote`], a
    /// token that is empty, or an address that cannot be bound.
    pub async fn bind(self, addr: SocketAddr) -> Result<AdminServer, ServeError> {
        if !addr.ip().is_loopback() && !self.remote {
            return Err(ServeError(format!(
                "{addr} is not a loopback address: the admin endpoint binds 127.0.0.1 or ::1 unless told otherwise (Admin::allow_remote, with a token)"
            )));
        }
        if self.token.as_deref() == Some("") {
            return Err(ServeError(
                "the admin token is empty: give one of at least 1 character, or none".into(),
            ));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| ServeError(format!("cannot listen on {addr}: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| ServeError(format!("cannot read the address bound: {e}")))?;
        let reads_need_token = self.reads_need_token || self.engine.has_codec();
        let state = Arc::new(Served {
            engine: self.engine,
            token: self.token,
            reads_need_token,
            metrics: self.metrics,
            store_counts: self.store_counts,
        });
        let app = Router::new()
            .route("/v1/command", post(command))
            .route("/metrics", get(metrics))
            .route("/", get(crate::dashboard::index))
            .route("/dashboard/app.js", get(crate::dashboard::script))
            .route("/dashboard/app.css", get(crate::dashboard::style))
            .layer(DefaultBodyLimit::max(BODY_LIMIT))
            .with_state(state);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(e) = served.await {
                eprintln!("saga admin endpoint stopped: {e}");
            }
        });
        Ok(AdminServer {
            addr,
            stop: Some(stop),
            task: Some(task),
        })
    }
}

/// What every request shares.
struct Served {
    engine: Engine,
    token: Option<String>,
    reads_need_token: bool,
    metrics: Option<Metrics>,
    store_counts: bool,
}

async fn metrics(State(served): State<Arc<Served>>, headers: HeaderMap) -> Response {
    if served.reads_need_token
        && let Err(why) = authorized(served.token.as_deref(), &headers)
    {
        return refused(StatusCode::UNAUTHORIZED, 1, why);
    }
    match &served.metrics {
        Some(render) => {
            // A failed count still serves the rest, and says why in a
            // comment line (the gauges keep their last values).
            let mut failed = String::new();
            if served.store_counts
                && let Err(e) = served.engine.instance_counts().await
            {
                failed = format!(
                    "# saga: the store's instances could not be counted: {}\n",
                    e.to_string().replace('\n', " ")
                );
            }
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                failed + &render(),
            )
                .into_response()
        }
        None => refused(
            StatusCode::NOT_FOUND,
            1,
            "this endpoint serves no metrics: Admin::with_prometheus (or Admin::metrics) turns them on",
        ),
    }
}

async fn command(State(served): State<Arc<Served>>, headers: HeaderMap, body: Bytes) -> Response {
    let args: Vec<String> = match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(serde_json::Value::Object(map)) => match map.get("args") {
            Some(serde_json::Value::Array(args)) => {
                let strings: Option<Vec<String>> =
                    args.iter().map(|a| a.as_str().map(str::to_owned)).collect();
                match strings {
                    Some(strings) => strings,
                    None => {
                        return refused(
                            StatusCode::BAD_REQUEST,
                            2,
                            "`args` must hold strings only",
                        );
                    }
                }
            }
            _ => {
                return refused(
                    StatusCode::BAD_REQUEST,
                    2,
                    "the body needs `args`: an array of strings, e.g. {\"args\": [\"list\", \"--json\"]}",
                );
            }
        },
        _ => {
            return refused(
                StatusCode::BAD_REQUEST,
                2,
                "the body must be a JSON object: {\"args\": [\"list\", \"--json\"]}",
            );
        }
    };
    let parsed = match Embedded::try_parse_from(std::iter::once("saga".to_owned()).chain(args)) {
        Ok(parsed) => parsed,
        Err(error) => {
            let mut help = Vec::new();
            return match crate::parse_failure(error, &mut help) {
                Ok(()) => answered(
                    StatusCode::OK,
                    0,
                    String::from_utf8_lossy(&help).into_owned(),
                ),
                Err(e) => refused(StatusCode::BAD_REQUEST, e.exit_code(), &e.to_string()),
            };
        }
    };
    let control = match &parsed.args.command {
        Command::Watch(_) => {
            return refused(
                StatusCode::BAD_REQUEST,
                2,
                "watch runs until interrupted: it is not served over this endpoint",
            );
        }
        Command::Export(a) if a.all => {
            return refused(
                StatusCode::BAD_REQUEST,
                2,
                "export --all writes files where it runs: it is not served over this endpoint (export one ID at a time)",
            );
        }
        Command::List(_)
        | Command::Export(_)
        | Command::Show(_)
        | Command::History(_)
        | Command::Check(_) => false,
        // `queues` lists; `queues set` changes limits.
        Command::Queues(a) => a.action.is_some(),
        // `schedules` lists; `schedules pause|resume|trigger` controls.
        Command::Schedules(a) => a.action.is_some(),
        _ => true,
    };
    if (control || served.reads_need_token)
        && let Err(why) = authorized(served.token.as_deref(), &headers)
    {
        return refused(StatusCode::UNAUTHORIZED, 1, why);
    }
    let mut out = Vec::new();
    let result = dispatch(&served.engine, &parsed.args, &mut out, Colors::Off, None).await;
    let output = String::from_utf8_lossy(&out).into_owned();
    match result {
        Ok(()) => answered(StatusCode::OK, 0, output),
        Err(error) => failed(&error, output),
    }
}

/// Whether `headers` carry the token.
fn authorized(token: Option<&str>, headers: &HeaderMap) -> Result<(), &'static str> {
    let Some(token) = token else {
        return Err(
            "this endpoint has no token: set SAGA_ADMIN_TOKEN (or Admin::token) where it runs, and send it as `Authorization: Bearer <token>`",
        );
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(given) if same(given.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err("the token is not this endpoint's"),
        None => Err(
            "this command needs the admin token: send `Authorization: Bearer <token>` (saga --url reads SAGA_ADMIN_TOKEN)",
        ),
    }
}

/// Whether `a` and `b` are equal, in time that depends on their lengths
/// only, not on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

fn answered(status: StatusCode, code: u8, output: String) -> Response {
    let body = json!({"schema": 1, "code": code, "output": output});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn refused(status: StatusCode, code: u8, error: &str) -> Response {
    let body = json!({"schema": 1, "code": code, "error": error});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn failed(error: &CliError, output: String) -> Response {
    let status = match error.exit_code() {
        2 => StatusCode::BAD_REQUEST,
        3 => StatusCode::ACCEPTED,
        _ => StatusCode::CONFLICT,
    };
    let body = json!({
        "schema": 1,
        "code": error.exit_code(),
        "error": error.to_string(),
        "output": output,
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"s3cret", b"s3cret"));
        assert!(!same(b"s3cret", b"s3creT"));
        assert!(!same(b"s3cret", b"s3cre"));
        assert!(!same(b"", b"x"));
    }
}
