//! Payload encryption and redaction: an engine's codec (`Keyring`) seals
//! every user value it stores, so neither the store's files nor its rows
//! hold one in the clear; values round-trip; a rotated key still opens old
//! instances; a missing key is a typed error at the value's first use, and
//! parks an instance that replays it `Blocked` until the key is given; and
//! `#[step(redact = [..])]` inputs never show in the inspection.
//!
//! Each test reopens one store with other keys: a sled directory, or (in
//! `postgres_semantics`) a PostgreSQL schema of its own.
#![cfg(feature = "encryption")]

#[path = "support/helpers.rs"]
mod helpers;

use std::path::PathBuf;
use std::sync::Mutex;

use saga_runtime::inspect::{InspectedSlot, Inspection, PayloadView, REDACTED};
use saga_runtime::prelude::*;
use saga_runtime::{EngineBuilder, Error, Keyring, Status};
use serde_json::json;

use helpers::{until_status, when_released, within};

/// In every value the instances store; never in the store's bytes when
/// a codec seals them.
const CARD: &str = "4111-PLAINTEXT-MARKER-1111";
const APPROVER: &str = "APPROVER-PLAINTEXT-MARKER";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Card {
    number: String,
    cents: u64,
}

fn card(cents: u64) -> Card {
    Card {
        number: CARD.to_owned(),
        cents,
    }
}

/// The cards the refunds were given.
static REFUNDED: Mutex<Vec<Card>> = Mutex::new(Vec::new());

#[step(name = "charge", redact = ["card"], rollback = refund)]
async fn charge(key: IdempotencyKey, card: Card, memo: String) -> Result<String, StepError> {
    Ok(format!(
        "{} cents from {} ({memo}, {key})",
        card.cents, card.number
    ))
}

#[rollback]
async fn refund(
    ctx: RollbackContext<'_, String>,
    card: Card,
    _memo: String,
) -> Result<(), StepError> {
    let _key = ctx.key();
    REFUNDED.lock().unwrap().push(card);
    Ok(())
}

/// Why a payment was refused; its `card` is not in its message, so the
/// stored typed value is the only place it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Refused {
    card: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the approver refused")
    }
}

/// Charges the card, waits for an approver, and refunds when refused.
#[workflow(name = "pay")]
async fn pay(ctx: WorkflowContext, card: Card) -> Result<String, Refused> {
    let receipt = charge(&ctx, card.clone(), "memo".into())
        .await
        .map_err(|_| Refused {
            card: card.number.clone(),
        })?;
    let approver: String = ctx
        .wait_for_event("approval", "approve", "7 days")
        .await
        .map_err(|_| Refused {
            card: card.number.clone(),
        })?;
    if approver == "nobody" {
        return Err(Refused { card: card.number });
    }
    Ok(format!("{receipt}, approved by {approver}"))
}

/// Publishes the card it is given (`ctx.publish`), then ends.
#[workflow(name = "announce")]
async fn announce(ctx: WorkflowContext, card: Card) -> Result<(), WorkflowError> {
    ctx.publish("card", &card)?;
    Ok(())
}

fn ring(current: &str, old: &[&str]) -> Keyring {
    let mut ring = Keyring::new(current, key_bytes(current)).unwrap();
    for id in old {
        ring = ring.with_old_key(id, key_bytes(id)).unwrap();
    }
    ring
}

fn key_bytes(id: &str) -> [u8; 32] {
    let mut key = [0u8; 32];
    for (i, b) in id.bytes().cycle().take(32).enumerate() {
        key[i] = b.wrapping_add(i as u8);
    }
    key
}

/// A store the test opens again and again: a sled directory, or a
/// PostgreSQL schema.
enum Place {
    Sled(PathBuf),
    #[cfg(feature = "postgres")]
    Postgres(String),
}

impl Place {
    async fn new(tag: &str) -> Place {
        #[cfg(feature = "postgres")]
        if helpers::on_postgres() {
            return Place::Postgres(helpers::postgres::fresh_schema(tag).await);
        }
        let dir =
            std::env::temp_dir().join(format!("saga-encryption-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Place::Sled(dir)
    }

    /// An engine on the store with `keys` (none: no codec), `pay` registered.
    async fn open(&self, keys: Option<Keyring>) -> Engine {
        let builder = |keys: Option<Keyring>| -> EngineBuilder {
            let builder = Engine::builder();
            let builder = match keys {
                Some(keys) => builder.codec(keys),
                None => builder,
            };
            builder.register(pay).register(announce)
        };
        match self {
            Place::Sled(dir) => when_released(|| builder(keys.clone()).open(dir))
                .await
                .unwrap(),
            #[cfg(feature = "postgres")]
            Place::Postgres(schema) => builder(keys)
                .postgres_schema(schema)
                .connect(&helpers::postgres::database_url())
                .await
                .unwrap_or_else(|e| helpers::postgres::missing(e)),
        }
    }

    /// Every byte the store keeps: the sled files, or on PostgreSQL the
    /// journal's records, the index's summaries and the inbox's posts.
    async fn bytes(&self) -> Vec<u8> {
        match self {
            Place::Sled(dir) => {
                let mut all = Vec::new();
                let mut dirs = vec![dir.clone()];
                while let Some(dir) = dirs.pop() {
                    for entry in std::fs::read_dir(&dir).unwrap() {
                        let path = entry.unwrap().path();
                        if path.is_dir() {
                            dirs.push(path);
                        } else {
                            all.extend(std::fs::read(&path).unwrap_or_default());
                        }
                    }
                }
                all
            }
            #[cfg(feature = "postgres")]
            Place::Postgres(schema) => {
                let client = helpers::postgres::admin().await;
                let mut all = Vec::new();
                for query in [
                    format!("SELECT record FROM {schema}.journal"),
                    format!("SELECT summary FROM {schema}.instances"),
                    format!("SELECT intent FROM {schema}.inbox"),
                ] {
                    for row in client.query(&query, &[]).await.unwrap() {
                        all.extend(row.get::<_, Vec<u8>>(0));
                    }
                }
                all
            }
        }
    }

    /// On PostgreSQL, the `needs` of instance `id`'s row; `None` on sled.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    async fn needs(&self, id: &str) -> Option<i32> {
        match self {
            Place::Sled(_) => None,
            #[cfg(feature = "postgres")]
            Place::Postgres(schema) => {
                let client = helpers::postgres::admin().await;
                let query = format!("SELECT needs FROM {schema}.instances WHERE id = $1");
                Some(client.query_one(&query, &[&id]).await.unwrap().get(0))
            }
        }
    }

    /// On PostgreSQL, that instance `id`'s row is marked as holding
    /// sealed records (bit 16 of `needs`), while its low bits, the kinds
    /// of record it holds, stay within the 27 the release before knows.
    async fn assert_marked_sealed(&self, id: &str) {
        if let Some(needs) = self.needs(id).await {
            assert_eq!(needs & (1 << 16), 1 << 16, "needs {needs}");
            assert!(
                needs & 0xFFFF <= 27,
                "no kind of record past 27: needs {needs}"
            );
        }
    }

    async fn holds(&self, text: &str) -> bool {
        self.bytes()
            .await
            .windows(text.len())
            .any(|w| w == text.as_bytes())
    }
}

async fn approve(engine: &Engine, id: &str, approver: &str) {
    engine
        .send_event(id, "approve", &approver.to_owned())
        .await
        .unwrap();
}

/// Starts `pay` as `id`, lets it wait, and approves it by `approver`: its
/// result.
async fn pay_approved(
    engine: &Engine,
    id: &str,
    cents: u64,
    approver: &str,
) -> Result<String, Error> {
    let run = engine.start(pay, id, card(cents)).await.unwrap();
    until_status(&run, Status::Waiting).await;
    approve(engine, id, approver).await;
    within(id, run.result()).await
}

fn step_input(inspection: &Inspection) -> &PayloadView {
    match &inspection.slots[0] {
        InspectedSlot::Step(step) => step.input.as_ref().expect("charge records its inputs"),
        other => panic!("expected the charge step, got {other:?}"),
    }
}

#[tokio::test]
async fn the_store_holds_no_value_in_the_clear_and_values_round_trip() {
    let place = Place::new("clear").await;
    let engine = place.open(Some(ring("k1", &[]))).await;
    let receipt = pay_approved(&engine, "p-1", 300, APPROVER).await.unwrap();
    assert!(
        receipt.contains(CARD) && receipt.contains(APPROVER),
        "{receipt}"
    );
    // Refused: a typed failure whose only copy of the card is its value.
    let failure = match pay_approved(&engine, "p-2", 5, "nobody").await {
        Err(Error::WorkflowFailed { failure, .. }) => failure,
        other => panic!("expected the refusal, got {other:?}"),
    };
    assert_eq!(
        failure.downcast::<Refused>(),
        Some(Refused { card: CARD.into() })
    );
    assert!(REFUNDED.lock().unwrap().contains(&card(5)));

    // Read back from the store by a new engine with the key: every value.
    engine.close().await;
    let engine = place.open(Some(ring("k1", &[]))).await;
    let again = engine.instance("p-1").await.unwrap();
    assert_eq!(again.result::<String>().await.unwrap(), receipt);
    let inspection = again.inspect().await.unwrap();
    assert_eq!(
        inspection.input.json(),
        Some(&json!({"number": CARD, "cents": 300}))
    );
    assert_eq!(
        step_input(&inspection).json(),
        Some(&json!([REDACTED, "memo"]))
    );
    drop(again);
    engine.close().await;

    assert!(
        !place.holds(CARD).await,
        "the card is in the store in the clear"
    );
    assert!(
        !place.holds(APPROVER).await,
        "the event is in the store in the clear"
    );
    // The key id is stored beside each value, in the clear.
    assert!(place.holds("k1").await);
    // On PostgreSQL the instance's row says it holds sealed records (its
    // low bits count the kinds of record it holds): the release before
    // claims only rows whose `needs` is at most its 27 kinds of record.
    place.assert_marked_sealed("p-1").await;
}

#[tokio::test]
async fn without_a_codec_the_values_are_stored_in_the_clear() {
    // The check above can see a value: here it finds one.
    let place = Place::new("plain").await;
    let engine = place.open(None).await;
    let run = engine.start(pay, "p-1", card(1)).await.unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    engine.close().await;
    assert!(place.holds(CARD).await);
    // Still marked: the redacted input is a kind of payload the release
    // before does not read either.
    place.assert_marked_sealed("p-1").await;
}

#[tokio::test]
async fn a_rotated_key_still_opens_old_instances() {
    let place = Place::new("rotate").await;
    let engine = place.open(Some(ring("k1", &[]))).await;
    let done_receipt = pay_approved(&engine, "done", 3, APPROVER).await.unwrap();
    let old = engine.start(pay, "old", card(1)).await.unwrap();
    until_status(&old, Status::Waiting).await;
    drop(old);
    engine.close().await;

    // Rotated: new values use k2; the instance that ended under k1 reads,
    // and the waiting one, sealed with k1, replays and completes.
    let engine = place.open(Some(ring("k2", &["k1"]))).await;
    let done = engine.instance("done").await.unwrap();
    assert_eq!(done.result::<String>().await.unwrap(), done_receipt);
    let old = engine.instance("old").await.unwrap();
    approve(&engine, "old", APPROVER).await;
    let old_receipt = within("old", old.result::<String>()).await.unwrap();
    assert!(old_receipt.contains(CARD));
    let new_receipt = pay_approved(&engine, "new", 2, APPROVER).await.unwrap();
    drop((done, old));
    engine.close().await;

    // With k1 dropped from the ring: values sealed with k2 open (the old
    // instance's output too: written after the rotation), those sealed
    // with k1 say which key they need, at their first use.
    let engine = place.open(Some(ring("k2", &[]))).await;
    let new = engine.instance("new").await.unwrap();
    assert_eq!(new.result::<String>().await.unwrap(), new_receipt);
    let old = engine.instance("old").await.unwrap();
    assert_eq!(old.result::<String>().await.unwrap(), old_receipt);
    let done = engine.instance("done").await.unwrap();
    match done.result::<String>().await {
        Err(Error::MissingKey { key, what }) => {
            assert_eq!(key, "k1");
            assert!(what.contains("done"), "{what}");
        }
        other => panic!("expected MissingKey, got {other:?}"),
    }
    // What cannot be opened is shown as such, never as damage.
    let inspection = done.inspect().await.unwrap();
    assert_eq!(inspection.input.encrypted_with(), Some("k1"));
    assert_eq!(
        inspection.output.as_ref().and_then(|o| o.encrypted_with()),
        Some("k1")
    );
    assert_eq!(
        old.inspect().await.unwrap().input.encrypted_with(),
        Some("k1")
    );
    assert_eq!(done.status().await.unwrap(), Status::Complete);
    drop((done, old, new));
    engine.close().await;
}

#[tokio::test]
async fn a_missing_key_parks_a_replaying_instance_blocked_until_the_key_is_given() {
    let place = Place::new("missing").await;
    let engine = place.open(Some(ring("k1", &[]))).await;
    let run = engine.start(pay, "p-1", card(7)).await.unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    engine.close().await;

    // Opened without k1: a waiting instance stays unloaded until it is
    // woken. Its approval wakes it; the replay's first use of the input
    // fails, and parks the instance; nothing is lost, the approval included.
    let engine = place.open(Some(ring("k2", &[]))).await;
    let run = engine.instance("p-1").await.unwrap();
    approve(&engine, "p-1", APPROVER).await;
    until_status(&run, Status::Blocked).await;
    match within("p-1", run.result::<String>()).await {
        Err(Error::Blocked { failure, .. }) => {
            assert!(failure.message().contains("\"k1\""), "{failure}");
        }
        other => panic!("expected Blocked, got {other:?}"),
    }
    drop(run);
    engine.close().await;

    // Opened with no codec at all: the same, still parked.
    let engine = place.open(None).await;
    let run = engine.instance("p-1").await.unwrap();
    assert_eq!(run.status().await.unwrap(), Status::Blocked);
    drop(run);
    engine.close().await;

    // Given the key again, the parked instance resumes where it was (on
    // PostgreSQL once a worker claims it) and takes the approval it was
    // sent while parked.
    let engine = place.open(Some(ring("k2", &["k1"]))).await;
    let run = engine.instance("p-1").await.unwrap();
    helpers::wait_until("p-1 resumed", || async {
        run.status().await.unwrap() != Status::Blocked
    })
    .await;
    let receipt = within("p-1", run.result::<String>()).await.unwrap();
    assert!(
        receipt.starts_with(&format!("7 cents from {CARD}")),
        "{receipt}"
    );
    // The charge ran once: its stored output was replayed.
    let charges = helpers::kinds(&run)
        .await
        .into_iter()
        .filter(|k| matches!(k, saga_runtime::inspect::EventKind::StepCompleted { step, .. } if step == "charge"))
        .count();
    assert_eq!(charges, 1);
    drop(run);
    engine.close().await;
}

#[tokio::test]
async fn redacted_inputs_are_stored_for_the_rollback_but_never_shown() {
    let place = Place::new("redact").await;
    let engine = place.open(None).await;
    let run = engine.start(pay, "r-1", card(9)).await.unwrap();
    until_status(&run, Status::Waiting).await;
    let inspection = run.inspect().await.unwrap();
    assert_eq!(
        step_input(&inspection).json(),
        Some(&json!([REDACTED, "memo"]))
    );
    assert!(!format!("{:?}", step_input(&inspection)).contains(CARD));
    // Refused: the refund gets the card the step was given.
    approve(&engine, "r-1", "nobody").await;
    assert!(within("r-1", run.result()).await.is_err());
    assert!(REFUNDED.lock().unwrap().contains(&card(9)));
    drop(run);
    engine.close().await;
}

/// On PostgreSQL a reader (a dashboard, `saga send-event`) posts events to
/// the worker that drives the instance: the post is sealed in the inbox
/// too, and the worker that claims the instance opens it.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn an_event_posted_to_another_worker_is_sealed_in_the_inbox() {
    // The sled store has no inbox: a PostgreSQL case only.
    if !helpers::on_postgres() {
        return;
    }
    let place = Place::new("inbox").await;
    let Place::Postgres(schema) = &place else {
        unreachable!("on PostgreSQL")
    };
    let engine = place.open(Some(ring("k1", &[]))).await;
    let run = engine.start(pay, "p-1", card(4)).await.unwrap();
    until_status(&run, Status::Waiting).await;
    drop(run);
    // Its worker leaves; none other runs, so the post stays in the inbox.
    engine.close().await;
    let reader = Engine::builder()
        .codec(ring("k1", &[]))
        .postgres_schema(schema)
        .store_timeout(std::time::Duration::from_millis(500))
        .connect_read_only(&helpers::postgres::database_url())
        .await
        .unwrap();
    let sent = reader
        .event("p-1", "approve")
        .send(&APPROVER.to_owned())
        .await
        .unwrap();
    assert_eq!(sent, saga_runtime::Sent::Posted);
    let client = helpers::postgres::admin().await;
    let posts: i64 = client
        .query_one(&format!("SELECT count(*) FROM {schema}.inbox"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(posts, 1);
    assert!(!place.holds(APPROVER).await, "the post is in the clear");
    reader.close().await;

    let engine = place.open(Some(ring("k1", &[]))).await;
    let run = engine.instance("p-1").await.unwrap();
    let receipt = within("p-1", run.result::<String>()).await.unwrap();
    assert!(receipt.ends_with(APPROVER), "{receipt}");
    drop(run);
    engine.close().await;
}

#[tokio::test]
async fn a_published_value_is_sealed_and_reads_back_with_the_key() {
    let place = Place::new("published").await;
    let engine = place.open(Some(ring("k1", &[]))).await;
    let run = engine.start(announce, "a-1", card(7)).await.unwrap();
    within("the result", run.result()).await.unwrap();
    assert_eq!(run.published::<Card>("card").await.unwrap(), Some(card(7)));
    drop(run);
    engine.close().await;
    assert!(
        !place.holds(CARD).await,
        "the published card is in the store in the clear"
    );
    // On PostgreSQL its row needs the first 43 kinds of record (a
    // published value is kind 42): the release before, which knows 42,
    // does not claim it.
    if let Some(needs) = place.needs("a-1").await {
        assert_eq!(needs & 0xFFFF, 43, "needs {needs}");
    }

    // An engine without the key: a typed error that names it.
    let engine = place.open(None).await;
    let run = engine.instance("a-1").await.unwrap();
    let error = run.published::<Card>("card").await.unwrap_err();
    assert!(error.to_string().contains("\"k1\""), "{error}");
    drop(run);
    engine.close().await;
}
