//! The binary on a PostgreSQL store, beside the worker that drives it:
//! `list` and `show` read what the worker wrote; control commands, which
//! need the worker's lease, are refused in one line that says where to run
//! them; a database that does not answer is one line too.

mod support;

#[path = "../../tests/support/postgres.rs"]
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reads_a_schema_while_its_worker_runs() {
    let url = postgres::database_url();
    let schema = postgres::fresh_schema("cli").await;
    let worker = Engine::builder()
        .postgres_schema(&schema)
        .register(fulfil())
        .connect(&url)
        .await
        .unwrap_or_else(|e| postgres::missing(e));
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

    let (url2, schema2) = (url.clone(), schema.clone());
    let pause =
        tokio::task::spawn_blocking(move || saga_pg(&url2, &schema2, &["pause", "order-7"]))
            .await
            .unwrap();
    assert_ne!(pause.code, 0);
    assert_eq!(pause.stderr.lines().count(), 1, "{}", pause.stderr);
    assert!(pause.stderr.contains("only reads"), "{}", pause.stderr);
    // The worker still drives it, untouched.
    assert_eq!(run.status().await.unwrap(), saga_runtime::Status::Waiting);

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
