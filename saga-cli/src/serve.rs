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
//! A web page in a browser on the same machine can send requests to
//! loopback, and a local user can too; the endpoint trusts neither.
//!
//! - [`Admin::bind`] refuses an address that is not loopback unless
//!   [`Admin::allow_remote`] says so.
//! - Every request names this endpoint in its `Host` header: the bound
//!   address (`127.0.0.1:7070`, `[::1]:7070`, with or without the port),
//!   `localhost` (with or without the port), or a name given to
//!   [`Admin::allow_host`]. Any other Host gets 403, and an HTTP/1.1
//!   request without one gets 400: a page whose name an attacker rebound to
//!   127.0.0.1 (DNS rebinding) reads nothing, not even the dashboard.
//! - Every command needs `Authorization: Bearer <token>` (the scheme in any
//!   case), the token given to [`Admin::token`] or, by default,
//!   `$SAGA_ADMIN_TOKEN`; so does `GET /metrics`. Without a token
//!   configured, the endpoint starts, says so on stderr, and answers 401
//!   to every command with how to set one. [`Admin::reads_without_token`]
//!   opens the reads (`list`, `show`, `history`, `check`, `export`,
//!   `schedules`, `queues`, `/metrics`) to any caller that reaches the
//!   endpoint, on purpose; never when the engine has a payload codec (its
//!   values are sealed at rest; the endpoint shows them opened).
//! - A request without a valid token gets 401 and changes nothing; the
//!   error tells a missing token from a wrong one, and names no token.
//!   Tokens are compared in constant time.
//! - Commands are `Content-Type: application/json` only (415 otherwise),
//!   so an HTML form or a `fetch` without a CORS preflight cannot send one.
//!   Bodies are limited to 64 KiB.
//! - The endpoint runs an allow-list of commands and flags (`admitted`,
//!   which names every flag): no argument that names a path on the server is
//!   served (`show --key-file`, `check --lock`, `check --replay --from`,
//!   `export --all`), whether or not the file exists; nor `watch`.
//! - Every error, whatever refused the request (the Host, the token, the
//!   content type, the body's size, a route that does not exist), is the
//!   JSON `{"schema": 1, "code", "error"}`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, StatusCode, Version, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Parser;
use saga_runtime::Engine;
use serde_json::json;

use crate::args::{
    CheckArgs, Command, ExportArgs, HistoryArgs, IdArg, ListArgs, QueueAction, QueueSet,
    QueuesArgs, RestartArgs, SchedulesArgs, SendEventArgs, ShowArgs, TerminateArgs, UpdateArgs,
};
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
    reads_open: bool,
    remote: bool,
    hosts: Vec<String>,
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
/// [`shutdown`](AdminServer::shutdown) is awaited: keep it for as long as
/// the endpoint should serve (`let _ = serve(..)` drops it at once).
#[must_use = "the endpoint stops when this is dropped: keep it (`let admin = ...`) for as long as it should serve"]
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
            reads_open: false,
            remote: false,
            hosts: Vec::new(),
            metrics: None,
            store_counts: false,
        }
    }

    /// Serves `GET /metrics` with what `render` answers (Prometheus text
    /// from the application's own recorder, for one). It is a read: it
    /// needs the token unless [`Admin::reads_without_token`].
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

    /// The bearer token every request must present, instead of
    /// `$SAGA_ADMIN_TOKEN`.
    pub fn token(mut self, token: impl Into<String>) -> Admin {
        self.token = Some(token.into());
        self
    }

    /// Serves reads (`list`, `show`, `history`, `check`, `export`,
    /// `schedules`, `queues`, `GET /metrics`) without the token; control
    /// commands still need it.
    ///
    /// The risk: anything that reaches the endpoint reads every instance's
    /// inputs, outputs and errors: every local user and process, and, for
    /// an endpoint [`allow_remote`](Admin::allow_remote), the network. The
    /// Host check keeps web pages out, not programs. Ignored when the
    /// engine has a payload codec: the endpoint shows values opened, so
    /// they always need the token.
    pub fn reads_without_token(mut self) -> Admin {
        self.reads_open = true;
        self
    }

    /// Takes requests whose `Host` header is `host` (besides the bound
    /// address and `localhost`): the name a proxy or a client reaches the
    /// endpoint by, such as `"admin.internal"` (any port) or
    /// `"admin.internal:8443"` (that port only). Compared without case.
    /// An endpoint bound to `0.0.0.0` ([`allow_remote`](Admin::allow_remote))
    /// needs here every name and address its clients use.
    pub fn allow_host(mut self, host: impl Into<String>) -> Admin {
        self.hosts.push(host.into().to_ascii_lowercase());
        self
    }

    /// Lets [`bind`](Admin::bind) take an address that is not loopback:
    /// put the endpoint behind TLS and a token.
    pub fn allow_remote(mut self) -> Admin {
        self.remote = true;
        self
    }

    /// Starts serving on `addr`, in a task of the current Tokio runtime.
    /// Without a token it still starts, answers 401 to every command
    /// (unless [`Admin::reads_without_token`]), and says so on stderr.
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
        if self.token.is_none() {
            eprintln!(
                "saga admin endpoint on {addr}: no token is configured, so it answers 401 to every command; set {TOKEN_VAR} (or Admin::token) where it runs"
            );
        }
        let reads_need_token = !self.reads_open || self.engine.has_codec();
        let hosts = Arc::new(Hosts {
            addr,
            names: self.hosts,
        });
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
            .fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .layer(DefaultBodyLimit::max(BODY_LIMIT))
            // Outermost: a request for another host reaches nothing.
            .layer(middleware::from_fn_with_state(hosts, check_host))
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

async fn command(
    State(served): State<Arc<Served>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if !is_json(&headers) {
        return refused(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            2,
            "commands are JSON: send them with `Content-Type: application/json`",
        );
    }
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                2,
                "the body is over the 64 KiB limit: a command's arguments are short",
            );
        }
        Err(rejection) => return refused(rejection.status(), 2, &rejection.body_text()),
    };
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
    let control = match admitted(&parsed.args.command) {
        Ok(access) => access == Access::Control,
        Err(why) => return refused(StatusCode::BAD_REQUEST, 2, &why),
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

/// Whether a command reads or controls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    Read,
    Control,
}

/// The allow-list of what the endpoint runs: every command, and every
/// flag by name (no `..`), so a flag added to `args.rs` does not build
/// until it is judged here. Refused: an argument that names a path on
/// the server (the endpoint opens no file a request names, and tells
/// nothing of one), and `watch`, which never ends.
fn admitted(command: &Command) -> Result<Access, String> {
    use Access::{Control, Read};
    let path = |what: &str| -> Result<Access, String> {
        Err(format!(
            "{what} names a path on the server: it is not served over this endpoint, which opens no file a request names (run it with saga --db or embedded, where the file is)"
        ))
    };
    match command {
        Command::List(ListArgs {
            status: _,
            workflow: _,
            tags: _,
            started_after: _,
            started_before: _,
            ended_after: _,
            ended_before: _,
            parent: _,
            rollback_failed: _,
            failed_compensation: _,
            id_prefix: _,
            limit: _,
            after: _,
            order: _,
            json: _,
        }) => Ok(Read),
        Command::Show(ShowArgs {
            id: _,
            key_file,
            json: _,
        }) => match key_file {
            Some(_) => path("show --key-file"),
            None => Ok(Read),
        },
        Command::History(HistoryArgs {
            id: _,
            run: _,
            json: _,
        }) => Ok(Read),
        Command::Check(CheckArgs {
            lock,
            replay: _,
            from,
            json: _,
        }) => match (lock, from) {
            (Some(_), _) => path("check --lock"),
            (None, Some(_)) => path("check --replay --from"),
            (None, None) => Ok(Read),
        },
        Command::Export(ExportArgs {
            all,
            status: _,
            workflow: _,
            target: _,
        }) => match all {
            true => path("export --all (its directory)"),
            false => Ok(Read),
        },
        // `schedules` lists; `schedules pause|resume|trigger NAME` controls.
        Command::Schedules(SchedulesArgs { action, json: _ }) => match action {
            Some(_) => Ok(Control),
            None => Ok(Read),
        },
        // `queues` lists; `queues set` changes limits (no path: a name
        // and numbers).
        Command::Queues(QueuesArgs { action, json: _ }) => match action {
            Some(QueueAction::Set(QueueSet {
                name: _,
                concurrency: _,
                per_key: _,
                rate: _,
                per: _,
            })) => Ok(Control),
            None => Ok(Read),
        },
        Command::SendEvent(SendEventArgs {
            id: _,
            event_type: _,
            payload: _,
        })
        | Command::Update(UpdateArgs {
            id: _,
            name: _,
            request: _,
            update_id: _,
            timeout: _,
        })
        | Command::Terminate(TerminateArgs { rollback: _, id: _ })
        | Command::Restart(RestartArgs { from: _, id: _ }) => Ok(Control),
        Command::Pause(IdArg { id: _ })
        | Command::Resume(IdArg { id: _ })
        | Command::RetryRollback(IdArg { id: _ }) => Ok(Control),
        Command::Watch(_) => {
            Err("watch runs until interrupted: it is not served over this endpoint".to_owned())
        }
    }
}

/// Whether the body is declared JSON: `application/json`, with any
/// parameters, in any case. A page can send `text/plain` or a form to
/// another origin without asking it first; JSON it cannot.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// The names a request may give in its `Host` header.
struct Hosts {
    /// The address bound: its IP, with its port or none.
    addr: SocketAddr,
    /// Those of [`Admin::allow_host`], lower case: a name alone takes any
    /// port, `name:port` that port.
    names: Vec<String>,
}

impl Hosts {
    fn allow(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let Some((name, port)) = split_host(&host) else {
            return false;
        };
        let own_port = port.is_none_or(|p| p == self.addr.port());
        let bound = match name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
            Some(v6) => v6.parse::<IpAddr>().ok() == Some(self.addr.ip()),
            None => name.parse::<IpAddr>().ok() == Some(self.addr.ip()),
        };
        if (bound || name == "localhost") && own_port {
            return true;
        }
        self.names.iter().any(|allowed| match split_host(allowed) {
            Some((allowed_name, None)) => allowed_name == name,
            Some((allowed_name, allowed_port)) => allowed_name == name && allowed_port == port,
            None => false,
        })
    }
}

/// `name` and its port, if any, of a Host header: `127.0.0.1:7070`,
/// `[::1]:7070`, `localhost`. `None` for a port that does not parse.
fn split_host(host: &str) -> Option<(&str, Option<u16>)> {
    let (name, port) = match host.rfind(':') {
        // The colon of an IPv6 address in brackets is not a port's.
        Some(at) if !host[at..].contains(']') => (&host[..at], Some(&host[at + 1..])),
        _ => (host, None),
    };
    let port = match port {
        Some(port) => Some(port.parse::<u16>().ok()?),
        None => None,
    };
    (!name.is_empty()).then_some((name, port))
}

/// Refuses a request whose Host (and absolute URI, if any) is not this
/// endpoint's, before any route sees it: DNS rebinding makes a page on
/// the attacker's name talk to loopback, but with the attacker's name as
/// its Host.
async fn check_host(State(hosts): State<Arc<Hosts>>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .map(|v| v.to_str().unwrap_or(""));
    let Some(host) = host else {
        // HTTP/1.0 has no Host; a browser always sends one.
        if request.version() == Version::HTTP_10 {
            return next.run(request).await;
        }
        return refused(
            StatusCode::BAD_REQUEST,
            2,
            "the request has no Host header: HTTP/1.1 needs one",
        );
    };
    let authority = request.uri().authority().map(|a| a.as_str());
    if !hosts.allow(host) || authority.is_some_and(|a| !hosts.allow(a)) {
        return refused(
            StatusCode::FORBIDDEN,
            1,
            &format!(
                "the Host {host:?} is not this endpoint's: it answers to {} and localhost, and to the names Admin::allow_host gives",
                hosts.addr
            ),
        );
    }
    next.run(request).await
}

/// Whether `headers` carry the token. The refusals tell a token missing
/// from one that is wrong, and name none.
fn authorized(token: Option<&str>, headers: &HeaderMap) -> Result<(), &'static str> {
    let Some(token) = token else {
        return Err(
            "this endpoint has no token: set SAGA_ADMIN_TOKEN (or Admin::token) where it runs, and send it as `Authorization: Bearer <token>`",
        );
    };
    let Some(given) = headers.get(header::AUTHORIZATION) else {
        return Err(
            "this command needs the admin token: send `Authorization: Bearer <token>` (saga --url reads SAGA_ADMIN_TOKEN)",
        );
    };
    // The scheme is case-insensitive (RFC 9110 §11.1).
    let given = given
        .to_str()
        .ok()
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    match given {
        Some(given) if same(given.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err("the token is not this endpoint's"),
        None => Err(
            "the Authorization header is not a bearer token: send `Authorization: Bearer <token>`",
        ),
    }
}

/// Any route that is not there.
async fn not_found() -> Response {
    refused(
        StatusCode::NOT_FOUND,
        2,
        "no such route: POST /v1/command runs a command; GET / is the dashboard, GET /metrics the metrics",
    )
}

/// A route that is there, with a method it does not take.
async fn method_not_allowed() -> Response {
    refused(
        StatusCode::METHOD_NOT_ALLOWED,
        2,
        "this route does not take that method: POST /v1/command runs a command; GET / is the dashboard, GET /metrics the metrics",
    )
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
    fn hosts_split_into_name_and_port() {
        use super::split_host;
        assert_eq!(
            split_host("127.0.0.1:7070"),
            Some(("127.0.0.1", Some(7070)))
        );
        assert_eq!(split_host("[::1]:7070"), Some(("[::1]", Some(7070))));
        assert_eq!(split_host("[::1]"), Some(("[::1]", None)));
        assert_eq!(split_host("localhost"), Some(("localhost", None)));
        assert_eq!(split_host("localhost:x"), None);
        assert_eq!(split_host(":7070"), None);
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"s3cret", b"s3cret"));
        assert!(!same(b"s3cret", b"s3creT"));
        assert!(!same(b"s3cret", b"s3cre"));
        assert!(!same(b"", b"x"));
    }
}
