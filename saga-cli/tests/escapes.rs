//! Stored text is shown, never obeyed: a step's error or a payload that
//! holds terminal escapes cannot clear the screen, move the cursor or draw
//! a fake row in the human output of `list`, `show` and `watch`. `--json`
//! keeps the text as it was stored.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saga_runtime::Engine;
use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use support::TempDir;

/// Clears the screen, homes the cursor, then draws a row that says the
/// step completed, hidden behind a carriage return and a right-to-left
/// override; C1 CSI and DEL too.
const EVIL_ERROR: &str =
    "boom\x1b[2J\x1b[H\n  2  charge  completed  1  0ms\r\u{202e}cod.exe\u{9b}31m\u{7f}\u{2067}";

/// A payload: JSON escapes the C0 controls, not these.
const EVIL_NOTE: &str = "note\u{9b}2J\u{202e}\u{2066}\u{7f}";

#[step(name = "charge", retries = 0)]
async fn charge(key: IdempotencyKey, note: String) -> Result<u64, StepError> {
    let _ = (key, note);
    Err(StepError::fatal(EVIL_ERROR))
}

#[workflow(name = "evil-order")]
async fn evil_order(ctx: WorkflowContext, note: String) -> Result<u64, WorkflowError> {
    Ok(charge(&ctx, note).await?)
}

/// Runs `order-13` of [`evil_order`] on `engine` until it has failed.
async fn fail_order(engine: &Engine) -> Vec<saga_runtime::inspect::Event> {
    let run = engine
        .start(evil_order, "order-13", EVIL_NOTE.to_owned())
        .await
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(30), run.result()).await;
    assert!(matches!(result, Ok(Err(_))), "{result:?}");
    run.history().await.unwrap()
}

/// No character a terminal acts on, other than the line ends of the
/// output itself; no line that starts like a row of the failed step's.
fn assert_inert(what: &str, out: &str) {
    let bad: Vec<char> = out
        .chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .collect();
    assert!(bad.is_empty(), "{what}: raw {bad:?} in:\n{out}");
    assert!(
        out.lines()
            .all(|line| !line.trim_start().starts_with("2  charge")),
        "{what}: a fake row in:\n{out}"
    );
}

#[test]
fn list_and_show_escape_what_a_step_stored() {
    let dir = TempDir::new("escapes");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = Engine::builder()
            .clock(TestClock::auto_advancing())
            .open(dir.path())
            .unwrap();
        fail_order(&engine).await;
        engine.close().await;
    });

    let show = support::ok(dir.path(), &["show", "order-13"]);
    assert_inert("show", &show);
    assert!(
        show.contains(r"error   boom\u{1b}[2J\u{1b}[H\n  2  charge  completed  1  0ms\r\u{202e}cod.exe\u{9b}31m\u{7f}\u{2067}"),
        "the error, escaped, on one line:\n{show}"
    );
    assert!(
        show.contains(r#""note\u{9b}2J\u{202e}\u{2066}\u{7f}""#),
        "the input, escaped:\n{show}"
    );

    let list = support::ok(dir.path(), &["list"]);
    assert_inert("list", &list);
    assert_eq!(list.lines().count(), 2, "a header and one row:\n{list}");
    assert!(list.contains(r"boom\u{1b"), "{list}");

    // JSON has the text as it was stored.
    let json = support::json(dir.path(), &["show", "order-13"]);
    assert_eq!(json["instance"]["slots"][0]["error"], EVIL_ERROR);
    assert_eq!(json["instance"]["input"]["value"], EVIL_NOTE);
}

/// What `watch` wrote so far, and a wake-up for each write.
#[derive(Clone, Default)]
struct Shared {
    text: Arc<Mutex<Vec<u8>>>,
    wrote: Arc<tokio::sync::Notify>,
}

impl Shared {
    fn text(&self) -> String {
        String::from_utf8(self.text.lock().unwrap().clone()).unwrap()
    }
}

impl Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.text.lock().unwrap().extend_from_slice(bytes);
        self.wrote.notify_one();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    /// Waits until `done` holds for what was written.
    async fn until(&self, done: impl Fn(&str) -> bool) -> String {
        let waited = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let text = self.text();
                if done(&text) {
                    return text;
                }
                self.wrote.notified().await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| panic!("watch wrote only:\n{}", self.text()))
    }
}

#[tokio::test]
async fn watch_escapes_what_a_step_stored() {
    let engine = Engine::builder()
        .clock(TestClock::auto_advancing())
        .temporary()
        .unwrap();
    let out = Shared::default();
    let watcher = {
        let (engine, mut out) = (engine.clone(), out.clone());
        tokio::spawn(async move { saga_cli::run(&engine, ["watch"], &mut out).await })
    };
    // Subscribed once it says so.
    out.until(|text| text.starts_with("watching")).await;
    let events = fail_order(&engine).await;
    let printed = out.until(|text| text.lines().count() > events.len()).await;
    watcher.abort();
    assert_inert("watch", &printed);
    assert!(
        printed.contains(r"boom\u{1b}[2J\u{1b}[H\n  2  charge"),
        "{printed}"
    );
}
