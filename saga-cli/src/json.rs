//! The `--json` documents, schema 1 (documented in the module docs of
//! `cli`). Built by hand rather than derived, so that a change to a
//! runtime type cannot change the schema by accident.

use std::io::Write;
use std::time::SystemTime;

use serde_json::{Value, json};

use crate::CliError;
use crate::output::{between, rfc3339};
use saga_runtime::inspect::Event;
use saga_runtime::inspect::InstanceInfo;
use saga_runtime::inspect::{
    CompensationOutcome, InspectedCompensation, InspectedSlot, Inspection, PayloadView, StepState,
    WaitState,
};

/// What stands for a kind of record that a newer runtime added and this
/// command does not know yet.
pub(crate) const NEWER: &str = "written by a newer saga-runtime: update saga-cli";

/// The schema version every document carries.
pub(crate) const SCHEMA: u32 = 1;

/// Writes `document` as one line.
pub(crate) fn print(out: &mut impl Write, document: &Value) -> Result<(), CliError> {
    serde_json::to_writer(&mut *out, document)
        .map_err(|e| CliError::output(std::io::Error::other(e)))?;
    writeln!(out)?;
    Ok(())
}

fn time(at: Option<SystemTime>) -> Value {
    at.map_or(Value::Null, |at| Value::String(rfc3339(at)))
}

/// How a value sealed with a key nobody here holds is shown.
pub(crate) fn encrypted(key: &str) -> String {
    format!("<encrypted: key {}>", crate::output::escape(key))
}

fn payload(view: Option<&PayloadView>) -> Value {
    match view {
        None => Value::Null,
        Some(PayloadView::Json { value, bytes }) => json!({"bytes": bytes, "value": value}),
        Some(PayloadView::Unavailable { bytes, reason }) => {
            json!({"bytes": bytes, "unavailable": reason})
        }
        Some(PayloadView::Encrypted { sealed }) => json!({
            "bytes": sealed.bytes.len(),
            "unavailable": encrypted(&sealed.key),
            "encrypted_with": sealed.key,
        }),
        Some(_) => json!({"bytes": null, "unavailable": NEWER}),
    }
}

/// Where an instance is, for `list`: `{"kind", "name"}` or null.
pub(crate) fn at(place: Option<(&'static str, String)>) -> Value {
    place.map_or(
        Value::Null,
        |(kind, name)| json!({"kind": kind, "name": name}),
    )
}

/// One row of `list`.
pub(crate) fn listed(info: &InstanceInfo, place: Option<(&'static str, String)>) -> Value {
    json!({
        "id": info.id,
        "workflow": info.workflow,
        "status": info.status.to_string(),
        "created_at": rfc3339(info.created_at),
        "updated_at": rfc3339(info.updated_at),
        "finished_at": time(info.finished_at),
        "workflow_registered": info.workflow_registered,
        "at": at(place),
        "error": info.failure.as_ref().map(|f| f.message()),
        "rollback_error": info.rollback_failure.as_ref().map(|f| f.message()),
        "tags": info.tags,
        "parent": info.parent,
        "failed_compensation": info.failed_compensation,
        "owner": owner(info),
    })
}

/// Who drives an unfinished instance: `{"worker", "since"}` or null.
fn owner(info: &InstanceInfo) -> Value {
    info.owner.as_ref().map_or(
        Value::Null,
        |owner| json!({"worker": owner.worker, "since": rfc3339(owner.since)}),
    )
}

/// The document of `show`.
pub(crate) fn instance(i: &Inspection, info: &InstanceInfo) -> Value {
    json!({
        "schema": SCHEMA,
        "instance": {
            "id": i.id,
            "workflow": i.workflow,
            "status": i.status.to_string(),
            "generation": i.generation,
            "run": i.run,
            "created_at": rfc3339(i.created_at),
            "updated_at": rfc3339(i.updated_at),
            "finished_at": time(i.finished_at),
            "input": payload(Some(&i.input)),
            "output": payload(i.output.as_ref()),
            "error": i.failure.as_ref().map(|f| f.message()),
            "error_value": payload(i.error_value.as_ref()),
            "rollback_cause": i.rollback_cause.as_ref().map(|f| f.message()),
            "rollback_error": i.rollback_failure.as_ref().map(|f| f.message()),
            "slots": i.slots.iter().map(slot).collect::<Vec<_>>(),
            "compensations": i.compensations.iter().map(compensation).collect::<Vec<_>>(),
            "pending_events": i.pending_events.iter().map(|e| json!({
                "event_type": e.event_type,
                "payload": payload(Some(&e.payload)),
                "sent_at": rfc3339(e.sent_at),
            })).collect::<Vec<_>>(),
            "rejected_events": i.rejected_events.iter().map(|e| json!({
                "wait": e.wait,
                "event_type": e.event_type,
                "error": e.error,
                "rejected_at": rfc3339(e.rejected_at),
            })).collect::<Vec<_>>(),
            "published": i.published.iter().map(|p| json!({
                "name": p.name,
                "value": payload(Some(&p.value)),
                "version": p.version,
                "published_at": rfc3339(p.published_at),
            })).collect::<Vec<_>>(),
            "event_ids": i.event_ids.iter().map(|e| json!({
                "id": e.id,
                "event_type": e.event_type,
                "sent_at": rfc3339(e.sent_at),
            })).collect::<Vec<_>>(),
            "tags": info.tags,
            "parent": info.parent,
            "failed_compensation": info.failed_compensation,
            "owner": owner(info),
        }
    })
}

fn slot(slot: &InspectedSlot) -> Value {
    let duration = match (slot.started_at(), slot.ended_at()) {
        (Some(from), Some(to)) => json!(between(from, to).as_millis() as u64),
        _ => Value::Null,
    };
    let mut value = match slot {
        InspectedSlot::Step(s) => {
            let (state, attempts, error, retry_at) = match &s.state {
                StepState::Running { attempts, retry_at } => {
                    ("running", Some(*attempts), None, *retry_at)
                }
                StepState::Completed { attempts } => ("completed", Some(*attempts), None, None),
                StepState::Failed { attempts, error } => {
                    ("failed", Some(*attempts), Some(error.message()), None)
                }
                _ => ("cancelled", None, None, None),
            };
            json!({
                "kind": "step",
                "name": s.name,
                "occurrence": s.occurrence,
                "generation": s.generation,
                "key": s.key.as_str(),
                "state": state,
                "attempts": attempts,
                "error": error,
                "retry_at": time(retry_at),
                "input": payload(s.input.as_ref()),
                "output": payload(s.output.as_ref()),
            })
        }
        InspectedSlot::Sleep(s) => json!({
            "kind": "sleep",
            "name": s.name,
            "occurrence": s.occurrence,
            "generation": s.generation,
            "wake_at": time(s.wake_at),
            "done": s.done,
        }),
        InspectedSlot::Wait(w) => {
            let (state, received) = match &w.state {
                WaitState::Received { payload } => ("received", Some(payload)),
                WaitState::TimedOut => ("timed_out", None),
                _ => ("waiting", None),
            };
            json!({
                "kind": "wait",
                "name": w.name,
                "occurrence": w.occurrence,
                "generation": w.generation,
                "event_type": w.event_type,
                "deadline": time(w.deadline),
                "state": state,
                "payload": payload(received),
            })
        }
        InspectedSlot::Child(c) => json!({
            "kind": "child",
            "name": c.name,
            "occurrence": c.occurrence,
            "generation": c.generation,
            "child": c.child,
            "workflow": c.workflow,
            "rollback": c.has_rollback,
            "state": c.ended.map_or("running".to_owned(), |s| s.to_string()),
            "output": payload(c.output.as_ref()),
            "error": c.failure.as_ref().map(|f| f.message()),
        }),
        _ => json!({"kind": "unknown", "name": slot.name(), "unavailable": NEWER}),
    };
    if let Value::Object(map) = &mut value {
        map.insert("started_at".into(), time(slot.started_at()));
        map.insert("ended_at".into(), time(slot.ended_at()));
        map.insert("duration_ms".into(), duration);
    }
    value
}

fn compensation(c: &InspectedCompensation) -> Value {
    let (state, error) = match &c.state {
        CompensationOutcome::Running { .. } => ("running", None),
        CompensationOutcome::Completed => ("completed", None),
        CompensationOutcome::Failed { error } => ("failed", Some(error.as_str())),
        _ => ("unknown", None),
    };
    let attempts = c.attempts;
    json!({
        "step": c.step,
        "occurrence": c.occurrence,
        "key": if c.child.is_some() { None } else { Some(c.key.as_str()) },
        "child": c.child,
        "state": state,
        "attempts": attempts,
        "error": error,
        "started_at": time(c.started_at),
        "ended_at": time(c.ended_at),
    })
}

/// One event of `watch`.
pub(crate) fn event(event: &Event) -> Value {
    // The variant's name, as serde writes it: `"StepCompleted"` or
    // `{"StepCompleted": {..}}`.
    let name = match serde_json::to_value(&event.kind) {
        Ok(Value::String(name)) => name,
        Ok(Value::Object(map)) => map.keys().next().cloned().unwrap_or_default(),
        _ => String::new(),
    };
    json!({
        "schema": SCHEMA,
        "instance": event.instance,
        "seq": event.seq,
        "at": rfc3339(event.at),
        "event": name,
        "text": event.kind.to_string(),
    })
}
