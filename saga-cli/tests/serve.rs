//! The admin endpoint (`saga_cli::serve`) on a running service that holds
//! its sled store: every read and control command through the real
//! binary's `saga --url`, a control command without the token (401,
//! nothing changed), the token compared whole, and the loopback rule.

mod support;

use std::process::Command;
use std::time::Duration;

use saga_runtime::prelude::*;
use saga_runtime::{Engine, TestClock};

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

    // Reads need no token (this engine has no codec).
    let (code, listed, _) = saga(&url, None, &["list"]).await;
    assert_eq!(code, 0);
    assert!(
        listed.contains("order-7") && listed.contains("waiting"),
        "{listed}"
    );
    let (code, shown, _) = saga(&url, None, &["show", "order-7", "--json"]).await;
    assert_eq!(code, 0);
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["instance"]["slots"][0]["name"], "reserve");
    let (code, history, _) = saga(&url, None, &["history", "order-7"]).await;
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
    let token = Some(TOKEN);
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
    let (code, exported, _) = saga(&url, None, &["export", "order-7"]).await;
    assert_eq!(code, 0);
    assert!(exported.contains("\"format\": 1"), "{exported}");
    let (code, _, error) = saga(&url, token, &["export", "--all", "histories"]).await;
    assert_eq!(code, 2);
    assert!(error.contains("not served"), "{error}");
    admin.shutdown().await;
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_without_a_token_refuses_control_and_binds_loopback_only() {
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
    assert_eq!(saga(&url, None, &["list"]).await.0, 0);
    drop(admin);
    engine.close().await;
}

/// The HTTP status line `POST /v1/command` of `args` gets at `addr`,
/// with no token.
fn post_command(addr: std::net::SocketAddr, args: &[&str]) -> String {
    use std::io::{Read, Write};
    let body = serde_json::json!({ "args": args }).to_string();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST /v1/command HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response.lines().next().unwrap().to_owned()
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

    // Listing schedules and queues are reads: no token.
    let (code, listed, error) = saga(&url, None, &["schedules", "--json"]).await;
    assert_eq!(code, 0, "{error}");
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["schedules"][0]["name"], "reminders");
    assert_eq!(listed["schedules"][0]["declared_here"], true);
    let (code, queues, error) = saga(&url, None, &["queues"]).await;
    assert_eq!((code, queues.trim()), (0, "no queues"), "{error}");

    // Without the token: 401, and nothing changed.
    let addr = admin.local_addr();
    for action in ["pause", "resume", "trigger"] {
        let (code, _, error) = saga(&url, None, &["schedules", action, "reminders"]).await;
        assert_eq!(code, 1, "{action}");
        assert!(error.contains("needs the admin token"), "{action}: {error}");
        let status = tokio::task::spawn_blocking(move || {
            post_command(addr, &["schedules", action, "reminders"])
        })
        .await
        .unwrap();
        assert!(status.contains("401"), "{action}: {status}");
    }
    assert!(!paused(&engine, "reminders").await);
    let ticks = ListFilter::all().tag("schedule", "reminders");
    assert!(engine.list(&ticks).await.unwrap().is_empty());

    // With it: pause, trigger (this engine declares it), resume.
    let token = Some(TOKEN);
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

/// `GET /metrics` of the endpoint at `addr`: the status line and body.
fn get_metrics(addr: std::net::SocketAddr) -> (String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
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
    let (status, body) = tokio::task::spawn_blocking(move || get_metrics(addr))
        .await
        .unwrap();
    assert!(status.contains("200"), "{status}");
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
