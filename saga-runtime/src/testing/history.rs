//! A recorded history as a file: what `saga export` writes and
//! [`replay`](super::replay) reads.
//!
//! The file is JSON:
//!
//! ```text
//! {
//!   "format": 1,
//!   "instance": "order-7",
//!   "workflow": "order",
//!   "status": "waiting",
//!   "records": ["02a0c4...", ...],
//!   "history": [{"seq": 0, "at": "2030-01-01T00:00:00.000Z", "event": "InstanceCreated",
//!                "text": "created (workflow \"order\")"}, ...]
//! }
//! ```
//!
//! `records` are the instance's journal records, in order from the first,
//! each as the store holds it (hex): exactly what a replay folds, so a
//! history replays as the instance would. `history` is the same journal
//! as people read it (`saga history`), rejected events included; a replay
//! does not read it, nor `status`. An instance that continued as new
//! (`ctx.continue_as_new`) is exported as its current run: `"run": 3`
//! (absent for run 0), its records from that run's hand-over on.
//!
//! Values the engine's codec sealed stay sealed: a replay opens them with
//! a codec that holds the keys ([`Replayer::codec`](super::Replayer::codec)).
//! Step inputs marked `#[step(redact = [..])]` are written as
//! `"<redacted>"`: a replay never reads a step's inputs (only a
//! compensation does). A record this release cannot read (a newer
//! release's) is written as it is.

use serde::{Deserialize, Serialize};

use crate::codec::Payload;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::journal::Entry;
use crate::model::history::Timestamp;
use crate::seal::{CarriesPayloads, Sealer};

/// The format of history files this release writes, and the newest it
/// reads.
pub const FORMAT: u32 = 1;

/// The recorded history of one instance: its journal records, to replay
/// against today's code ([`replay`](super::replay)), and to keep as a
/// file (`saga export`, [`History::to_json`], [`History::from_json`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    instance: String,
    workflow: String,
    status: String,
    /// The run the records are of (0 unless the instance continued as
    /// new): its records' sequence numbers begin at the run's.
    run: u32,
    records: Vec<Vec<u8>>,
    /// The history as people read it: kept, never read back.
    readable: Vec<serde_json::Value>,
}

/// The file, as serde sees it.
#[derive(Serialize, Deserialize)]
struct Document {
    format: u32,
    instance: String,
    workflow: String,
    #[serde(default)]
    status: String,
    /// The run of an instance that continued as new (absent: 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    run: u32,
    records: Vec<String>,
    #[serde(default)]
    history: Vec<serde_json::Value>,
}

impl History {
    /// The history of instance `id` of `engine`'s store, as `saga export`
    /// writes it (see the module docs for what it holds).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownInstance`] for an id the store does not hold;
    /// [`Error::Store`] when the store cannot be read.
    pub async fn export(engine: &Engine, id: &str) -> Result<History> {
        crate::names::validate_any_id(id)?;
        let journal = &engine.runner().core.journal;
        let (workflow, status) = journal
            .read(id, |s| (s.workflow.clone(), s.status.to_string()))
            .await?;
        let (records, events) = journal.records_and_history(id, None).await?;
        let run = records
            .first()
            .map_or(0, |(seq, _)| crate::journal::handover::run_of(*seq));
        let records = records
            .into_iter()
            .map(|(_, bytes)| without_redacted_inputs(bytes))
            .collect::<Result<Vec<_>>>()?;
        let readable = events
            .iter()
            .map(|event| {
                serde_json::json!({
                    "seq": event.seq,
                    "at": Timestamp(event.at).to_string(),
                    "event": variant_name(&event.kind),
                    "text": event.kind.to_string(),
                })
            })
            .collect();
        Ok(History {
            instance: id.to_owned(),
            workflow,
            status,
            run,
            records,
            readable,
        })
    }

    /// Reads a history file that [`History::to_json`] (or `saga export`)
    /// wrote.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] saying what is wrong: not JSON, not a
    /// history, a format newer than [`FORMAT`] (written by a newer
    /// release: replay it with that release), a record that is not hex.
    pub fn from_json(json: &str) -> Result<History> {
        let invalid = |why: String| Error::InvalidArgument(format!("not a saga history: {why}"));
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|e| invalid(format!("not JSON ({e})")))?;
        match value.get("format").and_then(serde_json::Value::as_u64) {
            Some(format) if format > u64::from(FORMAT) => {
                return Err(Error::InvalidArgument(format!(
                    "the history is of format {format}, written by a newer release; this release reads format {FORMAT} and older: replay it with the release that wrote it"
                )));
            }
            Some(_) => {}
            None => return Err(invalid("it has no \"format\" number".into())),
        }
        let document: Document =
            serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
        crate::names::validate_any_id(&document.instance)?;
        if document.records.is_empty() {
            return Err(invalid("it has no records".into()));
        }
        let records = document
            .records
            .iter()
            .enumerate()
            .map(|(seq, hex)| {
                from_hex(hex).ok_or_else(|| invalid(format!("record {seq} is not hex digits")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(History {
            instance: document.instance,
            workflow: document.workflow,
            status: document.status,
            run: document.run,
            records,
            readable: document.history,
        })
    }

    /// The history as a file (pretty JSON, see the module docs), for
    /// [`History::from_json`].
    pub fn to_json(&self) -> String {
        let document = Document {
            format: FORMAT,
            instance: self.instance.clone(),
            workflow: self.workflow.clone(),
            status: self.status.clone(),
            run: self.run,
            records: self.records.iter().map(|r| to_hex(r)).collect(),
            history: self.readable.clone(),
        };
        // Strings and numbers only: it always encodes.
        serde_json::to_string_pretty(&document).unwrap_or_default()
    }

    /// The run its records are of: 0, or the current run of an instance
    /// that continued as new when it was exported.
    pub fn run(&self) -> u32 {
        self.run
    }

    /// The instance it is the history of.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The workflow the instance runs.
    pub fn workflow(&self) -> &str {
        &self.workflow
    }

    /// The instance's status when it was exported (`waiting`), as it
    /// prints.
    pub fn status(&self) -> &str {
        &self.status
    }

    /// How many journal records it holds.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether it holds no record (never, for one exported or read).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Its records, in order from the first.
    pub(crate) fn records(&self) -> &[Vec<u8>] {
        &self.records
    }
}

/// `bytes` of a journal record, with the step inputs it marks redacted
/// replaced by `"<redacted>"`. Sealed values stay as they are (the codec's
/// bytes); a record this release cannot read is kept as it is.
fn without_redacted_inputs(bytes: Vec<u8>) -> Result<Vec<u8>> {
    let plain = Sealer::default();
    let Ok(mut entry) = plain.decode_record::<Entry>(&bytes) else {
        return Ok(bytes);
    };
    let mut masked = false;
    for payload in entry.payloads_mut() {
        if let Payload::Redacted { json, hidden } = payload {
            let mut inputs = serde_json::from_slice(json).unwrap_or(serde_json::Value::Null);
            crate::instance::inspect::redact(&mut inputs, hidden);
            *json = serde_json::to_vec(&inputs).unwrap_or_default();
            masked = true;
        }
    }
    if !masked {
        return Ok(bytes);
    }
    plain.encode_record(&entry)
}

/// The name of `kind`'s variant (`"StepCompleted"`).
fn variant_name(kind: &crate::model::history::EventKind) -> String {
    match serde_json::to_value(kind) {
        Ok(serde_json::Value::String(name)) => name,
        Ok(serde_json::Value::Object(map)) => map.keys().next().cloned().unwrap_or_default(),
        _ => String::new(),
    }
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    out
}

fn from_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A history of run 0 says nothing of its run.
fn is_zero(run: &u32) -> bool {
    *run == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(from_hex(&to_hex(&bytes)), Some(bytes));
        assert_eq!(from_hex("0"), None);
        assert_eq!(from_hex("zz"), None);
        assert_eq!(from_hex("+1"), None);
    }

    #[test]
    fn a_file_of_a_newer_format_or_no_history_is_refused() {
        let newer = r#"{"format": 2, "instance": "a", "workflow": "w", "records": ["00"]}"#;
        let error = History::from_json(newer).unwrap_err().to_string();
        assert!(error.contains("format 2"), "{error}");
        let other = r#"{"instance": "a"}"#;
        let error = History::from_json(other).unwrap_err().to_string();
        assert!(error.contains("\"format\""), "{error}");
        let empty = r#"{"format": 1, "instance": "a", "workflow": "w", "records": []}"#;
        assert!(History::from_json(empty).is_err());
    }
}
