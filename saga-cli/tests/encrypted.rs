//! `saga show` on stores whose values are encrypted (a `Keyring` codec)
//! or whose step inputs are redacted (`#[step(redact = [..])]`): a value
//! it cannot open is `<encrypted: key K>`, `--key-file` (or the codec given
//! to `saga_cli::run_with_codec`) opens it, and a redacted input never
//! appears, opened or not.

mod support;

use std::path::Path;

use saga_runtime::prelude::*;
use saga_runtime::{Engine, Keyring};
use support::{TempDir, json, ok};

/// Redacted: never in any output.
const CARD: &str = "4111-REDACTED-MARKER-1111";
/// Encrypted: in the output only once opened.
const MEMO: &str = "MEMO-SEALED-MARKER";

const KEY: [u8; 32] = [42; 32];

#[step(name = "charge", redact = ["card"])]
async fn charge(key: IdempotencyKey, card: String, memo: String) -> Result<String, StepError> {
    Ok(format!("charged {} ({memo}, {key})", card.len()))
}

#[workflow(name = "pay")]
async fn pay(ctx: WorkflowContext, memo: String) -> Result<String, WorkflowError> {
    Ok(charge(&ctx, CARD.to_owned(), memo).await?)
}

/// A store where `p-1` of [`pay`] completed, its values sealed with key
/// `k1` when `keys` is given.
fn store(keys: Option<Keyring>) -> TempDir {
    let dir = TempDir::new("encrypted");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let builder = Engine::builder();
        let builder = match keys {
            Some(keys) => builder.codec(keys),
            None => builder,
        };
        let engine = builder.open(dir.path()).unwrap();
        let run = engine.start(pay, "p-1", MEMO.to_owned()).await.unwrap();
        run.result().await.unwrap();
        drop(run);
        engine.close().await;
    });
    dir
}

fn key_file(dir: &Path) -> String {
    let hex: String = KEY.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join("saga-keys");
    std::fs::write(&path, format!("# the key of the store\nk1 {hex}\n")).unwrap();
    path.display().to_string()
}

#[test]
fn encrypted_values_show_their_key_until_a_key_file_opens_them() {
    let store = store(Some(Keyring::new("k1", KEY).unwrap()));
    let timeline = ok(store.path(), &["show", "p-1"]);
    assert!(timeline.contains("<encrypted: key k1>"), "{timeline}");
    assert!(
        !timeline.contains(MEMO) && !timeline.contains(CARD),
        "{timeline}"
    );
    let shown = json(store.path(), &["show", "p-1"]);
    let input = &shown["instance"]["input"];
    assert_eq!(input["unavailable"], "<encrypted: key k1>", "{shown}");
    assert_eq!(input["encrypted_with"], "k1");
    assert!(!shown.to_string().contains(MEMO));

    let keys_dir = TempDir::new("keys");
    std::fs::create_dir_all(keys_dir.path()).unwrap();
    let keys = key_file(keys_dir.path());
    let opened = ok(store.path(), &["show", "p-1", "--key-file", &keys]);
    assert!(opened.contains(MEMO), "{opened}");
    assert!(!opened.contains("<encrypted"), "{opened}");
    assert!(
        opened.contains(r#"["<redacted>","MEMO-SEALED-MARKER"]"#),
        "{opened}"
    );
    assert!(!opened.contains(CARD), "{opened}");
    let opened = json(store.path(), &["show", "p-1", "--key-file", &keys]);
    assert_eq!(opened["instance"]["input"]["value"], MEMO);
    assert!(!opened.to_string().contains(CARD), "{opened}");
}

#[test]
fn a_bad_key_file_is_a_usage_error_naming_its_line() {
    let store = store(None);
    let keys_dir = TempDir::new("bad-keys");
    std::fs::create_dir_all(keys_dir.path()).unwrap();
    let path = keys_dir.path().join("saga-keys");
    std::fs::write(&path, "k1 not-hex\n").unwrap();
    let run = support::fails(
        store.path(),
        &["show", "p-1", "--key-file", &path.display().to_string()],
    );
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("line 1"), "{}", run.stderr);
}

#[test]
fn redacted_inputs_never_show_even_unencrypted() {
    let store = store(None);
    let timeline = ok(store.path(), &["show", "p-1"]);
    assert!(
        timeline.contains(r#"["<redacted>","MEMO-SEALED-MARKER"]"#),
        "{timeline}"
    );
    assert!(!timeline.contains(CARD), "{timeline}");
    let shown = json(store.path(), &["show", "p-1"]);
    let step = &shown["instance"]["slots"][0];
    assert_eq!(step["input"]["value"][0], "<redacted>", "{shown}");
    assert!(!shown.to_string().contains(CARD), "{shown}");
}

#[test]
fn an_embedding_application_gives_its_codec() {
    let keys = Keyring::new("k1", KEY).unwrap();
    let store = store(Some(keys.clone()));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // Its engine reads the store without the keys; the command opens them.
        let engine = Engine::open(store.path()).unwrap();
        let show = |codec: Option<Keyring>| {
            let engine = engine.clone();
            async move {
                let mut out = Vec::new();
                let args = ["show", "p-1"];
                match codec {
                    Some(codec) => saga_cli::run_with_codec(&engine, &codec, args, &mut out).await,
                    None => saga_cli::run(&engine, args, &mut out).await,
                }
                .unwrap();
                String::from_utf8(out).unwrap()
            }
        };
        let sealed = show(None).await;
        assert!(
            sealed.contains("<encrypted: key k1>") && !sealed.contains(MEMO),
            "{sealed}"
        );
        let opened = show(Some(keys)).await;
        assert!(opened.contains(MEMO) && !opened.contains(CARD), "{opened}");
        engine.close().await;
    });
}
