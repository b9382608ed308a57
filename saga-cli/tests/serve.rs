//! The admin endpoint (`saga_cli::serve`) on a running service that holds
//! its sled store: every read and control command through the real
//! binary's `saga --url`, a control command without the token (401,
//! nothing changed), the token compared whole, and the loopback rule; then
//! the requests a web page or a local caller could send, each refused.

mod support;

#[path = "../../saga-runtime/tests/support/postgres.rs"]
mod postgres;

use std::process::Command;
use std::time::Duration;

use saga_runtime::Engine;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;

use support::{Order, TempDir, fulfil, reminders, serve_with_token};

const TOKEN: &str = "t0ken-for-tests";

/// `saga --url <url> <args..>` with `token` as `$SAGA_ADMIN_TOKEN`, in UTC.
fn saga_url(url: &str, token: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_saga"));
    command
        .arg("--url")
        .arg(url)
        .args(args)
        .env("TZ", "UTC")
        .env_remove("SAGA_ADMIN_TOKEN")
        .env_remove("SAGA_DATABASE_URL");
    if let Some(token) = token {
        command.env("SAGA_ADMIN_TOKEN", token);
    }
    let output = command.output().expect("the binary runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs the binary off the runtime's threads, which serve the endpoint.
async fn saga(url: &str, token: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let (url, token) = (url.to_owned(), token.map(str::to_owned));
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        saga_url(&url, token.as_deref(), &args)
    })
    .await
    .unwrap()
}

async fn status(engine: &Engine, id: &str) -> Status {
    engine.instance(id).await.unwrap().status().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saga_url_reads_and_controls_a_running_services_sled_store() {
    let dir = TempDir::new("serve");
    let clock = TestClock::new();
    let engine = Engine::builder()
        .clock(clock.clone())
        .register(fulfil())
        .open(dir.path())
        .unwrap();
    let run = engine
        .start(
            fulfil(),
            "order-7",
            Order {
                item: "lamp".into(),
            },
        )
        .await
        .unwrap();
    clock.wait_for_sleepers(1).await;
    let admin = serve_with_token(&engine, TOKEN).await;
    let url = format!("http://{}", admin.local_addr());

    // Reads need the token too.
    let (code, _, error) = saga(&url, None, &["list"]).await;
    assert_eq!(code, 1);
    assert!(error.contains("needs the admin token"), "{error}");
    let token = Some(TOKEN);
    let (code, listed, _) = saga(&url, token, &["list"]).await;
    assert_eq!(code, 0);
    assert!(
        listed.contains("order-7") && listed.contains("waiting"),
        "{listed}"
    );
    let (code, shown, _) = saga(&url, token, &["show", "order-7", "--json"]).await;
    assert_eq!(code, 0);
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["instance"]["slots"][0]["name"], "reserve");
    let (code, history, _) = saga(&url, token, &["history", "order-7"]).await;
    assert_eq!(code, 0);
    assert!(history.contains("sleep \"cool-off\""), "{history}");

    // A control command without the token: 401, nothing changed.
    let (code, _, error) = saga(&url, None, &["pause", "order-7"]).await;
    assert_eq!(code, 1);
    assert!(error.contains("needs the admin token"), "{error}");
    let (code, _, error) = saga(&url, Some("t0ken-for-testz"), &["pause", "order-7"]).await;
    assert_eq!(code, 1);
    assert!(error.contains("not this endpoint's"), "{error}");
    assert_eq!(status(&engine, "order-7").await, Status::Waiting);

    // With it: pause, resume, an event, terminate with rollback, restart.
    assert_eq!(saga(&url, token, &["pause", "order-7"]).await.0, 0);
    assert_eq!(status(&engine, "order-7").await, Status::Paused);
    assert_eq!(saga(&url, token, &["resume", "order-7"]).await.0, 0);
    clock.advance(Duration::from_secs(3600));
    let (code, out, error) = saga(
        &url,
        token,
        &["send-event", "order-7", "payment", "--json", "42"],
    )
    .await;
    assert_eq!(code, 0, "{out}{error}");
    let output: String = tokio::time::timeout(Duration::from_secs(30), run.result())
        .await
        .unwrap()
        .unwrap();
    assert!(output.ends_with("paid 42"), "{output}");
    // A refused command answers as the binary would, exit code 1.
    let (code, _, error) = saga(&url, token, &["terminate", "order-7"]).await;
    assert_eq!(code, 1);
    assert!(error.contains("complete"), "{error}");
    assert_eq!(saga(&url, token, &["restart", "order-7"]).await.0, 0);
    clock.wait_for_sleepers(1).await;
    assert_eq!(
        saga(&url, token, &["terminate", "--rollback", "order-7"])
            .await
            .0,
        0
    );
    assert_eq!(status(&engine, "order-7").await, Status::Terminated);
    let (code, _, error) = saga(&url, token, &["retry-rollback", "order-7"]).await;
    assert_eq!(code, 1, "its rollback did not give up: {error}");
    // Wrong usage is exit code 2; watch is not served.
    assert_eq!(
        saga(&url, token, &["list", "--status", "sleepy"]).await.0,
        2
    );
    assert_eq!(saga(&url, token, &["watch"]).await.0, 2);
    // One history is a read; `export --all` writes files where it runs,
    // so it is not served.
    let (code, exported, _) = saga(&url, token, &["export", "order-7"]).await;
    assert_eq!(code, 0);
    assert!(exported.contains("\"format\": 1"), "{exported}");
    let (code, _, error) = saga(&url, token, &["export", "--all", "histories"]).await;
    assert_eq!(code, 2);
    assert!(error.contains("not served"), "{error}");
    admin.shutdown().await;
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_without_a_token_refuses_every_command_and_binds_loopback_only() {
    let engine = Engine::temporary().unwrap();
    let refused = saga_cli::Admin::new(&engine)
        .bind("0.0.0.0:0".parse().unwrap())
        .await
        .err()
        .expect("a non-loopback address is refused");
    assert!(refused.to_string().contains("loopback"), "{refused}");
    let admin = saga_cli::serve(&engine, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let url = format!("http://{}", admin.local_addr());
    let (code, _, error) = saga(&url, Some("anything"), &["pause", "nobody"]).await;
    assert_eq!(code, 1);
    assert!(error.contains("has no token"), "{error}");
    // Reads too, with the same message: how to set one.
    let (code, _, error) = saga(&url, None, &["list"]).await;
    assert_eq!(code, 1);
    assert!(
        error.contains("has no token") && error.contains("SAGA_ADMIN_TOKEN"),
        "{error}"
    );
    let answer = post(admin.local_addr(), &[], &["list"]).await;
    assert_eq!(answer.status, 401);
    assert!(answer.error().contains("has no token"));
    drop(admin);
    engine.close().await;
}

/// One HTTP exchange with the endpoint at `addr`: `head` is the request
/// line and headers (without the blank line), `body` is sent after them.
fn exchange(addr: std::net::SocketAddr, head: &str, body: &[u8]) -> Answer {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(b"\r\n\r\n").unwrap();
    // The endpoint may answer (413) before it read a body that is too
    // large, and close: what it answered is what counts.
    let _ = stream.write_all(body);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let content_type = head
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_default();
    Answer {
        status,
        content_type,
        body: body.to_owned(),
    }
}

/// What the endpoint answered.
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

impl Answer {
    /// The body as the endpoint's JSON: `{code, error}` for an error.
    fn json(&self) -> serde_json::Value {
        assert_eq!(self.content_type, "application/json", "{}", self.body);
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The `error` of a JSON error answer.
    fn error(&self) -> String {
        let json = self.json();
        assert!(json["code"].as_u64().is_some_and(|c| c > 0), "{json}");
        json["error"].as_str().expect("an error").to_owned()
    }
}

/// `POST /v1/command` of `args` at `addr`, with these extra headers (one
/// `Name: value` each) and the bound address as Host.
async fn post(addr: std::net::SocketAddr, headers: &[&str], args: &[&str]) -> Answer {
    let body = serde_json::json!({ "args": args }).to_string();
    let mut head = format!(
        "POST /v1/command HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close",
        body.len()
    );
    for header in headers {
        head.push_str("\r\n");
        head.push_str(header);
    }
    send(addr, head, body.into_bytes()).await
}

/// [`exchange`], off the runtime's threads, which serve the endpoint.
async fn send(addr: std::net::SocketAddr, head: String, body: Vec<u8>) -> Answer {
    tokio::task::spawn_blocking(move || exchange(addr, &head, &body))
        .await
        .unwrap()
}

async fn paused(engine: &Engine, name: &str) -> bool {
    let listed = engine.schedules().list().await.unwrap();
    listed.iter().find(|s| s.name == name).unwrap().paused
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saga_url_lists_schedules_and_queues_and_controls_a_schedule_with_the_token_only() {
    let dir = TempDir::new("serve-schedules");
    let engine = Engine::builder()
        .clock(TestClock::new())
        .schedule(reminders())
        .open(dir.path())
        .unwrap();
    let admin = serve_with_token(&engine, TOKEN).await;
    let url = format!("http://{}", admin.local_addr());

    // Listing schedules and queues are reads.
    let token = Some(TOKEN);
    let (code, listed, error) = saga(&url, token, &["schedules", "--json"]).await;
    assert_eq!(code, 0, "{error}");
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["schedules"][0]["name"], "reminders");
    assert_eq!(listed["schedules"][0]["declared_here"], true);
    let (code, queues, error) = saga(&url, token, &["queues"]).await;
    assert_eq!((code, queues.trim()), (0, "no queues"), "{error}");

    // Without the token: 401, and nothing changed.
    let addr = admin.local_addr();
    for action in ["pause", "resume", "trigger"] {
        let (code, _, error) = saga(&url, None, &["schedules", action, "reminders"]).await;
        assert_eq!(code, 1, "{action}");
        assert!(error.contains("needs the admin token"), "{action}: {error}");
        let answer = post(addr, &[], &["schedules", action, "reminders"]).await;
        assert_eq!(answer.status, 401, "{action}");
    }
    assert!(!paused(&engine, "reminders").await);
    let ticks = ListFilter::all().tag("schedule", "reminders");
    assert!(engine.list(&ticks).await.unwrap().is_empty());

    // With it: pause, trigger (this engine declares it), resume.
    let (code, out, error) = saga(&url, token, &["schedules", "pause", "reminders"]).await;
    assert_eq!(code, 0, "{out}{error}");
    assert!(paused(&engine, "reminders").await);
    let (code, out, error) = saga(&url, token, &["schedules", "trigger", "reminders"]).await;
    assert_eq!(code, 0, "{out}{error}");
    assert!(
        out.contains("started reminders.20300101T000000Z~m1"),
        "{out}"
    );
    engine
        .instance("reminders.20300101T000000Z~m1")
        .await
        .unwrap();
    let (code, out, error) = saga(&url, token, &["schedules", "resume", "reminders"]).await;
    assert_eq!(code, 0, "{out}{error}");
    assert!(!paused(&engine, "reminders").await);
    admin.shutdown().await;
    engine.close().await;
}

/// `GET /metrics` of the endpoint at `addr`, with the token.
fn get_metrics(addr: std::net::SocketAddr) -> Answer {
    let head = format!(
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close"
    );
    exchange(addr, &head, b"")
}

/// Whether `text` is Prometheus text: comments, or `name{labels} value`.
fn is_prometheus_text(text: &str) -> bool {
    text.lines().filter(|l| !l.is_empty()).all(|line| {
        if let Some(comment) = line.strip_prefix('#') {
            return comment.starts_with(" HELP ") || comment.starts_with(" TYPE ");
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            return false;
        };
        let name = series.split('{').next().unwrap_or("");
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        let labels_ok = !series.contains('{') || series.ends_with('}');
        name_ok && labels_ok && (value.parse::<f64>().is_ok() || value == "+Inf" || value == "NaN")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_as_prometheus_text() {
    let engine = Engine::builder()
        .clock(TestClock::auto_advancing_to_sleeps())
        .register(fulfil())
        .temporary()
        .unwrap();
    let admin = saga_cli::Admin::new(&engine)
        .token(TOKEN)
        .with_prometheus()
        .unwrap()
        .with_store_counts()
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let run = engine
        .start(
            fulfil(),
            "order-8",
            Order {
                item: "desk".into(),
            },
        )
        .await
        .unwrap();
    engine.send_event("order-8", "payment", &7).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), run.result())
        .await
        .unwrap()
        .unwrap();
    let addr = admin.local_addr();
    let Answer { status, body, .. } = tokio::task::spawn_blocking(move || get_metrics(addr))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(is_prometheus_text(&body), "{body}");
    assert!(
        body.contains("saga_steps_completed_total{workflow=\"fulfil\",step=\"reserve\"} 1"),
        "{body}"
    );
    assert!(body.contains("saga_workflows_ended_total"), "{body}");
    // Counted at the scrape: every status, the ended one included.
    assert!(
        body.contains("saga_instances{status=\"complete\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("saga_instances{status=\"running\"} 0"),
        "{body}"
    );
    assert!(
        body.contains("# TYPE saga_step_duration_seconds summary"),
        "{body}"
    );
    admin.shutdown().await;
    engine.close().await;
}

/// An order that takes one approval and replies with the new total.
#[workflow(name = "approved", updates = ["approve"])]
async fn approved(ctx: WorkflowContext, total: u64) -> Result<u64, WorkflowError> {
    let approval = ctx.take_update::<u64>("approve", "7 days").await?;
    let total = total.saturating_sub(approval.request);
    approval.reply(&total).await?;
    Ok(total)
}

/// `saga --url .. update ID NAME JSON` sends an update to the process that
/// runs the workflow and prints its reply; a retry with the same `--id`
/// prints it again, and an undeclared name is refused, exit code 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saga_url_update_prints_the_workflows_reply() {
    let engine = Engine::builder().register(approved).temporary().unwrap();
    let run = engine.start(approved, "order-9", 100).await.unwrap();
    let admin = serve_with_token(&engine, TOKEN).await;
    let url = format!("http://{}", admin.local_addr());
    let token = Some(TOKEN);
    let args = ["update", "order-9", "approve", "10", "--id", "approval-9"];
    let (code, out, error) = saga(&url, token, &args).await;
    assert_eq!((code, out.trim()), (0, "90"), "{error}");
    let (code, out, error) = saga(&url, token, &args).await;
    assert_eq!((code, out.trim()), (0, "90"), "{error}");
    assert_eq!(run.result().await.unwrap(), 90);
    let (code, _, error) = saga(&url, token, &["update", "order-9", "cancel", "1"]).await;
    assert_eq!(code, 1);
    assert!(error.contains("no update named \"cancel\""), "{error}");
    admin.shutdown().await;
    engine.close().await;
}

/// An order held in a sleep. It runs no step: the process's Prometheus
/// recorder (`metrics_are_served_as_prometheus_text`) counts `fulfil`'s.
#[workflow(name = "held")]
async fn held(ctx: WorkflowContext, order: Order) -> Result<String, WorkflowError> {
    ctx.sleep("cool-off", "1 hour").await?;
    Ok(order.item)
}

/// A service that holds `order-7` of [`held`], waiting in its sleep, and
/// its endpoint with [`TOKEN`], made by `admin` from `Admin::new`.
async fn service(
    admin: impl FnOnce(saga_cli::Admin) -> saga_cli::Admin,
) -> (Engine, saga_cli::AdminServer) {
    let clock = TestClock::new();
    let engine = Engine::builder()
        .clock(clock.clone())
        .register(held)
        .temporary()
        .unwrap();
    let order = Order {
        item: "lamp".into(),
    };
    engine.start(held, "order-7", order).await.unwrap();
    clock.wait_for_sleepers(1).await;
    let server = admin(saga_cli::Admin::new(&engine).token(TOKEN))
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    (engine, server)
}

const BEARER: &str = "Authorization: Bearer t0ken-for-tests";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_argument_that_names_a_path_on_the_server_is_served() {
    let (engine, admin) = service(|a| a).await;
    let addr = admin.local_addr();
    let missing = "/nonexistent/saga-key-file";
    for args in [
        &["show", "order-7", "--key-file", "/etc/shadow"][..],
        &["show", "order-7", "--key-file", missing],
        &["check", "--lock", "/etc/passwd"],
        &["check", "--lock", missing],
        &["check", "--replay", "--from", "/etc"],
        &["check", "--replay", "--from", missing],
        &["export", "--all", "/tmp"],
    ] {
        let answer = post(addr, &[BEARER], args).await;
        assert_eq!(answer.status, 400, "{args:?}: {}", answer.body);
        let error = answer.error();
        assert!(error.contains("names a path"), "{args:?}: {error}");
        // The answer is the same whether the file exists or not.
        assert!(!error.contains("No such file"), "{args:?}: {error}");
    }
    // The same commands without the path are served.
    assert_eq!(
        post(addr, &[BEARER], &["show", "order-7"]).await.status,
        200
    );
    let answer = post(addr, &[BEARER], &["check", "--replay"]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    admin.shutdown().await;
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_another_host_is_refused() {
    let (engine, admin) = service(|a| a.allow_host("admin.internal")).await;
    let addr = admin.local_addr();
    let port = addr.port();
    let request = |path: &str, host: Option<&str>| {
        let host = host.map_or(String::new(), |h| format!("\r\nHost: {h}"));
        format!("GET {path} HTTP/1.1{host}\r\n{BEARER}\r\nConnection: close")
    };
    // A page whose name was rebound to 127.0.0.1 reads nothing, not even
    // the dashboard.
    for path in ["/", "/metrics", "/dashboard/app.js"] {
        for host in [
            "attacker.example".to_owned(),
            format!("attacker.example:{port}"),
            format!("localhost.attacker.example:{port}"),
            format!("127.0.0.1:{}", port.wrapping_add(1)),
        ] {
            let answer = send(addr, request(path, Some(&host)), Vec::new()).await;
            assert_eq!(answer.status, 403, "{path} for {host}: {}", answer.body);
            assert!(answer.error().contains("Host"), "{}", answer.body);
        }
        // HTTP/1.1 without a Host.
        let answer = send(addr, request(path, None), Vec::new()).await;
        assert_eq!(answer.status, 400, "{path}: {}", answer.body);
        assert!(answer.error().contains("Host"), "{}", answer.body);
    }
    let body = serde_json::json!({"args": ["show", "order-7", "--json"]}).to_string();
    let command = |host: &str, body: &str| {
        format!(
            "POST /v1/command HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{BEARER}\r\nConnection: close",
            body.len()
        )
    };
    let answer = send(
        addr,
        command("attacker.example", &body),
        body.clone().into_bytes(),
    )
    .await;
    assert_eq!(answer.status, 403);
    assert!(!answer.body.contains("lamp"), "{}", answer.body);
    // The bound address, localhost, and the names allowed, are served.
    for host in [
        format!("127.0.0.1:{port}"),
        "127.0.0.1".to_owned(),
        format!("localhost:{port}"),
        "localhost".to_owned(),
        "LocalHost".to_owned(),
        "admin.internal".to_owned(),
        "admin.internal:443".to_owned(),
    ] {
        let answer = send(addr, command(&host, &body), body.clone().into_bytes()).await;
        assert_eq!(answer.status, 200, "{host}: {}", answer.body);
    }
    admin.shutdown().await;
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_are_taken_as_json_only() {
    let (engine, admin) = service(|a| a).await;
    let addr = admin.local_addr();
    let body = serde_json::json!({"args": ["list"]}).to_string();
    // What a form or a `fetch` without preflight can send.
    for content_type in [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let content_type = content_type.map_or(String::new(), |c| format!("\r\nContent-Type: {c}"));
        let head = format!(
            "POST /v1/command HTTP/1.1\r\nHost: {addr}{content_type}\r\nContent-Length: {}\r\n{BEARER}\r\nConnection: close",
            body.len()
        );
        let answer = send(addr, head, body.clone().into_bytes()).await;
        assert_eq!(answer.status, 415, "{content_type}: {}", answer.body);
        assert!(
            answer.error().contains("application/json"),
            "{}",
            answer.body
        );
    }
    let head = format!(
        "POST /v1/command HTTP/1.1\r\nHost: {addr}\r\nContent-Type: Application/JSON; charset=utf-8\r\nContent-Length: {}\r\n{BEARER}\r\nConnection: close",
        body.len()
    );
    assert_eq!(send(addr, head, body.into_bytes()).await.status, 200);
    admin.shutdown().await;
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_need_the_token_unless_opened_on_purpose() {
    let (engine, admin) = service(|a| a).await;
    let addr = admin.local_addr();
    for args in [
        &["list"][..],
        &["show", "order-7"],
        &["queues"],
        &["schedules"],
    ] {
        let answer = post(addr, &[], args).await;
        assert_eq!(answer.status, 401, "{args:?}: {}", answer.body);
        assert!(!answer.body.contains("lamp"), "{}", answer.body);
        assert_eq!(post(addr, &[BEARER], args).await.status, 200, "{args:?}");
    }
    let metrics = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close");
    assert_eq!(send(addr, metrics, Vec::new()).await.status, 401);
    admin.shutdown().await;
    engine.close().await;

    // Opened on purpose: reads without the token, control still with it.
    let (engine, admin) = service(saga_cli::Admin::reads_without_token).await;
    let addr = admin.local_addr();
    let answer = post(addr, &[], &["show", "order-7"]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(post(addr, &[], &["pause", "order-7"]).await.status, 401);
    admin.shutdown().await;
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_read_without_case_and_refusals_say_why() {
    let (engine, admin) = service(|a| a).await;
    let addr = admin.local_addr();
    for header in [
        "Authorization: bearer t0ken-for-tests",
        "Authorization: BEARER t0ken-for-tests",
        "authorization: Bearer  t0ken-for-tests",
    ] {
        // A control command, which needed the token before reads did.
        let event = ["send-event", "order-7", "note", "--json", "1"];
        let answer = post(addr, &[header], &event).await;
        assert_eq!(answer.status, 200, "{header}: {}", answer.body);
    }
    let refused = |answer: Answer| {
        assert_eq!(answer.status, 401, "{}", answer.body);
        answer.error()
    };
    let none = refused(post(addr, &[], &["list"]).await);
    assert!(none.contains("needs the admin token"), "{none}");
    let wrong = refused(post(addr, &["Authorization: bearer t0ken-for-testz"], &["list"]).await);
    assert!(wrong.contains("not this endpoint's"), "{wrong}");
    assert!(!wrong.contains(TOKEN), "{wrong}");
    let other = refused(post(addr, &["Authorization: Basic dXNlcjpwYXNz"], &["list"]).await);
    assert!(other.contains("Bearer"), "{other}");
    assert!(!other.contains("not this endpoint's"), "{other}");
    admin.shutdown().await;
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_is_the_endpoints_json() {
    let (engine, admin) = service(|a| a).await;
    let addr = admin.local_addr();
    // Over the 64 KiB limit.
    let body = format!("{{\"args\": [\"show\", \"{}\"]}}", "x".repeat(64 * 1024));
    let head = format!(
        "POST /v1/command HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{BEARER}\r\nConnection: close",
        body.len()
    );
    let answer = send(addr, head, body.into_bytes()).await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    assert!(answer.error().contains("64 KiB"), "{}", answer.body);
    // A route that is not there, and a method the route does not take.
    let head = format!("GET /v2/nothing HTTP/1.1\r\nHost: {addr}\r\n{BEARER}\r\nConnection: close");
    let answer = send(addr, head, Vec::new()).await;
    assert_eq!(answer.status, 404, "{}", answer.body);
    answer.error();
    let head = format!("GET /v1/command HTTP/1.1\r\nHost: {addr}\r\n{BEARER}\r\nConnection: close");
    let answer = send(addr, head, Vec::new()).await;
    assert_eq!(answer.status, 405, "{}", answer.body);
    assert!(answer.error().contains("POST"), "{}", answer.body);
    admin.shutdown().await;
    engine.close().await;
}

/// The ids of a `saga list` table, in the order printed.
fn listed_ids(table: &str) -> Vec<String> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next())
        .filter(|id| !id.starts_with("next"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saga_url_list_and_saga_list_on_the_store_give_one_order() {
    let dir = TempDir::new("serve-order");
    let clock = TestClock::new();
    let engine = Engine::builder()
        .clock(clock.clone())
        .register(held)
        .open(dir.path())
        .unwrap();
    // Started in this order; the last started is the last updated.
    let started = ["c-first", "a-second", "b-third"];
    for (n, id) in started.iter().enumerate() {
        let order = Order { item: (*id).into() };
        engine.start(held, id, order).await.unwrap();
        clock.wait_for_sleepers(n + 1).await;
        clock.advance(Duration::from_secs(1));
    }
    let admin = serve_with_token(&engine, TOKEN).await;
    let url = format!("http://{}", admin.local_addr());
    let (code, remote, error) = saga(&url, Some(TOKEN), &["list"]).await;
    assert_eq!(code, 0, "{error}");
    let (code, remote_page, error) = saga(&url, Some(TOKEN), &["list", "--limit", "10"]).await;
    assert_eq!(code, 0, "{error}");
    admin.shutdown().await;
    engine.close().await;
    let local = support::ok(dir.path(), &["list"]);
    let local_page = support::ok(dir.path(), &["list", "--limit", "10"]);
    for table in [&remote, &remote_page, &local, &local_page] {
        assert_eq!(listed_ids(table), started, "{table}");
    }
}

/// `saga --url .. queues set` changes a queue's limits for every worker
/// on PostgreSQL: a control command, so only with the token; the stored
/// limits then show in `saga queues`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saga_url_queues_set_changes_a_queues_limits_with_the_token_only() {
    let schema = postgres::fresh_schema("clilimits").await;
    let engine = Engine::builder()
        .postgres_schema(&schema)
        .queue(saga_runtime::queue::Queue::new("bank-api").concurrency(2))
        .connect(&postgres::database_url())
        .await
        .unwrap_or_else(|e| postgres::missing(e));
    let admin = serve_with_token(&engine, TOKEN).await;
    let url = format!("http://{}", admin.local_addr());
    let set = ["queues", "set", "bank-api", "--concurrency", "3"];
    let (code, _, error) = saga(&url, None, &set).await;
    assert_eq!(code, 1, "{error}");
    assert!(error.contains("admin token"), "{error}");
    let (code, out, error) = saga(&url, Some(TOKEN), &set).await;
    assert_eq!(code, 0, "{out}{error}");
    assert!(
        out.contains("queue bank-api now runs with concurrency 3"),
        "{out}"
    );
    let (code, listed, error) = saga(&url, Some(TOKEN), &["queues", "--json"]).await;
    assert_eq!(code, 0, "{error}");
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["queues"][0]["limits"]["concurrency"], 3, "{listed}");
    admin.shutdown().await;
    engine.close().await;
    postgres::drop_schema(&schema).await;
}
