//! The binary on a PostgreSQL store, beside the worker that drives it:
//! `list` and `show` read what the worker wrote; control commands are
//! posted to the worker, which acts on them; `watch` shows what the worker
//! does; a database that does not answer is one line.

mod support;

#[path = "../../saga-runtime/tests/support/postgres.rs"]
mod postgres;

use std::process::Command;

use saga_runtime::Engine;
use support::fulfil;

/// Runs `saga --database-url .. <args..>` on `schema`.
fn saga_pg(url: &str, schema: &str, args: &[&str]) -> support::Saga {
    let output = Command::new(env!("CARGO_BIN_EXE_saga"))
        .arg("--database-url")
        .arg(url)
        .args(args)
        .env("SAGA_DATABASE_SCHEMA", schema)
        .output()
        .expect("the saga binary runs");
    support::Saga {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).expect("UTF-8 output"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 errors"),
    }
}

/// A worker of `schema` that runs `fulfil`.
async fn worker_on(url: &str, schema: &str) -> Engine {
    Engine::builder()
        .postgres_schema(schema)
        .register(fulfil())
        .connect(url)
        .await
        .unwrap_or_else(|e| postgres::missing(e))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reads_a_schema_while_its_worker_runs() {
    let url = postgres::database_url();
    let schema = postgres::fresh_schema("cli").await;
    let worker = worker_on(&url, &schema).await;
    let run = worker
        .start(
            fulfil(),
            "order-7",
            support::Order {
                item: "lamp".into(),
            },
        )
        .await
        .unwrap();
    // Reserved, and asleep for an hour.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while run.status().await.unwrap() != saga_runtime::Status::Waiting {
        assert!(std::time::Instant::now() < deadline, "never waited");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }

    let (url2, schema2) = (url.clone(), schema.clone());
    let list = tokio::task::spawn_blocking(move || saga_pg(&url2, &schema2, &["list", "--json"]))
        .await
        .unwrap();
    assert_eq!(list.code, 0, "{}{}", list.stdout, list.stderr);
    let list: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    let instances = list["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 1);
    assert_eq!(instances[0]["id"], "order-7");
    assert_eq!(instances[0]["status"], "waiting");

    let (url2, schema2) = (url.clone(), schema.clone());
    let show = tokio::task::spawn_blocking(move || saga_pg(&url2, &schema2, &["show", "order-7"]))
        .await
        .unwrap();
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(show.stdout.contains("reserve"), "{}", show.stdout);
    assert!(show.stdout.contains("cool-off"), "{}", show.stdout);

    // Control commands are posted to the worker, which acts on them.
    let control = |args: &'static [&'static str]| {
        let (url, schema) = (url.clone(), schema.clone());
        tokio::task::spawn_blocking(move || saga_pg(&url, &schema, args))
    };
    let until = |status: saga_runtime::Status| {
        let run = &run;
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while run.status().await.unwrap() != status {
                assert!(std::time::Instant::now() < deadline, "never {status}");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
    };
    // A watcher in another process sees what the worker does.
    let mut watcher = Command::new(env!("CARGO_BIN_EXE_saga"))
        .args(["--database-url", &url, "watch", "order-7"])
        .env("SAGA_DATABASE_SCHEMA", &schema)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the saga binary runs");
    let (lines_sender, lines) = std::sync::mpsc::channel();
    let stdout = watcher.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            if lines_sender.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let next_line = || {
        lines
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("a line from saga watch")
    };
    assert!(next_line().starts_with("watching order-7"));

    let pause = control(&["pause", "order-7"]).await.unwrap();
    assert_eq!(pause.code, 0, "{}", pause.stderr);
    assert!(
        pause
            .stdout
            .contains("the worker that drives order-7 was asked to pause it, and did"),
        "{}",
        pause.stdout
    );
    until(saga_runtime::Status::Paused).await;
    let terminate = control(&["terminate", "order-7"]).await.unwrap();
    assert_eq!(terminate.code, 0, "{}", terminate.stderr);
    assert!(
        terminate.stdout.starts_with(
            "terminated order-7 (the worker that drives order-7 was asked to terminate it, and did)"
        ),
        "{}",
        terminate.stdout
    );
    until(saga_runtime::Status::Terminated).await;
    let watched: Vec<String> = std::iter::from_fn(|| Some(next_line()))
        .take_while(|line| !line.ends_with("terminated"))
        .collect();
    assert!(
        watched.iter().any(|line| line.ends_with("paused")),
        "{watched:?}"
    );
    assert!(watched.iter().all(|line| line.contains("order-7")));
    watcher.kill().unwrap();
    watcher.wait().unwrap();
    // Refused by the worker that drives it: exit 1, with its reason.
    let again = control(&["terminate", "order-7"]).await.unwrap();
    assert_eq!(again.code, 1, "{}", again.stdout);
    assert!(
        again.stderr.contains("is terminated: cannot terminate it"),
        "{}",
        again.stderr
    );
    assert_eq!(again.stderr.lines().count(), 1, "{}", again.stderr);
    let unknown = control(&["pause", "order-8"]).await.unwrap();
    assert_eq!(unknown.code, 1, "{}", unknown.stderr);
    assert_eq!(unknown.stderr.lines().count(), 1, "{}", unknown.stderr);

    worker.close().await;
    postgres::drop_schema(&schema).await;
}

#[test]
fn an_unreachable_database_is_one_line() {
    let run = saga_pg("postgres://nobody@127.0.0.1:1/none", "saga", &["list"]);
    assert_ne!(run.code, 0);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(run.stderr.contains("127.0.0.1:1"), "{}", run.stderr);
}

/// `--schema NAME` names the schema, and wins over
/// `$SAGA_DATABASE_SCHEMA`; a bad name is one line, exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_flag_names_the_schema() {
    let url = postgres::database_url();
    let schema = postgres::fresh_schema("cli_flag").await;
    let worker = worker_on(&url, &schema).await;
    worker
        .start(fulfil(), "order-5", support::Order { item: "rug".into() })
        .await
        .unwrap();
    let (url2, schema2) = (url.clone(), schema.clone());
    let list = tokio::task::spawn_blocking(move || {
        // The variable names a schema that is not there: the flag wins.
        saga_pg(
            &url2,
            "saga_t_not_this_one",
            &["list", "--schema", &schema2, "--json"],
        )
    })
    .await
    .unwrap();
    assert_eq!(list.code, 0, "{}{}", list.stdout, list.stderr);
    let list: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    let ids: Vec<_> = list["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["order-5"]);

    let (url2, schema2) = (url.clone(), schema.clone());
    let bad = tokio::task::spawn_blocking(move || {
        saga_pg(&url2, &schema2, &["--schema", "Not-A-Schema", "list"])
    })
    .await
    .unwrap();
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert_eq!(bad.stderr.lines().count(), 1, "{}", bad.stderr);
    assert!(bad.stderr.contains("Not-A-Schema"), "{}", bad.stderr);

    worker.close().await;
    postgres::drop_schema(&schema).await;
}

// On PostgreSQL an index entry is never repaired on open (sled repairs
// its own): one that does not read is named by `list` (and `check`,
// which gathers the instances the same way), and
// hides none of the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_index_entry_is_named_and_hides_no_other() {
    let url = postgres::database_url();
    let schema = postgres::fresh_schema("cli_unreadable").await;
    let worker = worker_on(&url, &schema).await;
    for id in ["order-1", "order-2"] {
        worker
            .start(fulfil(), id, support::Order { item: "cup".into() })
            .await
            .unwrap();
    }
    worker.close().await;
    postgres::admin()
        .await
        .execute(
            &format!(
                "UPDATE {schema}.instances SET summary = '\\x00ff'::bytea WHERE id = 'order-2'"
            ),
            &[],
        )
        .await
        .unwrap();
    let run = |args: &'static [&'static str]| {
        let (url, schema) = (url.clone(), schema.clone());
        tokio::task::spawn_blocking(move || saga_pg(&url, &schema, args))
    };
    let table = run(&["list"]).await.unwrap();
    assert_eq!(table.code, 0, "{}{}", table.stdout, table.stderr);
    assert!(table.stdout.contains("order-1"), "{}", table.stdout);
    assert!(
        table.stdout.contains("unreadable order-2"),
        "{}",
        table.stdout
    );
    let listed = run(&["list", "--json"]).await.unwrap();
    let listed: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(listed["instances"].as_array().unwrap().len(), 1);
    assert_eq!(listed["unreadable"][0]["id"], "order-2");
    postgres::drop_schema(&schema).await;
}
