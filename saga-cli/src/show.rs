//! `saga show ID`: one instance as a timeline. Its steps, sleeps and
//! waits in call order, each with a bar of where the time went; the
//! rollback in the order it ran; the workflow's error and the rollback's
//! outcome side by side.

use std::collections::HashMap;
use std::io::Write;
use std::time::SystemTime;

use crate::CliError;
use crate::args::ShowArgs;
use crate::json::{self, NEWER};
use crate::list::place;
use crate::output::{
    Cell, Paint, Style, Table, bar, between, duration, escape, pad, short, size, time,
};
use saga_runtime::inspect::InstanceInfo;
use saga_runtime::inspect::{
    CompensationOutcome, InspectedCompensation, InspectedSlot, Inspection, PayloadView, StepState,
    WaitState,
};
use saga_runtime::{Codec, Keyring};
use saga_runtime::{Engine, Status};
use unicode_width::UnicodeWidthStr;

/// The width of a step's bar, in cells.
const BAR: usize = 24;
/// Payloads longer than this are cut (`--json` has them whole).
const PAYLOAD: usize = 160;

pub(crate) async fn run(
    engine: &Engine,
    args: &ShowArgs,
    codec: Option<&dyn Codec>,
    out: &mut impl Write,
    style: &Style,
) -> Result<(), CliError> {
    let instance = engine.instance(&args.id).await?;
    let mut inspection = instance.inspect().await?;
    let info = instance.info().await?;
    if let Some(codec) = codec {
        inspection.open_with(codec);
    }
    if let Some(path) = &args.key_file {
        inspection
            .open_with(&Keyring::from_file(path).map_err(|e| CliError::usage(e.to_string()))?);
    }
    if args.json {
        return json::print(out, &json::instance(&inspection, &info));
    }
    let undone = undone_children(engine, &inspection).await;
    write!(out, "{}", timeline(&inspection, &info, &undone, style))?;
    Ok(())
}

/// The most child instances whose rollbacks a timeline shows inside its own.
const NESTED: usize = 256;

/// The inspections of the children the instance's rollback undoes, and of
/// theirs, by id: their compensations show inside the parent's rollback.
/// A child that cannot be read is left out (its row still names it).
async fn undone_children(engine: &Engine, inspection: &Inspection) -> HashMap<String, Inspection> {
    let mut found = HashMap::new();
    let mut queue: Vec<String> = children_undone(inspection);
    while let Some(id) = queue.pop() {
        if found.len() >= NESTED || found.contains_key(&id) {
            continue;
        }
        let Ok(child) = engine.instance(&id).await else {
            continue;
        };
        let Ok(inspected) = child.inspect().await else {
            continue;
        };
        queue.extend(children_undone(&inspected));
        found.insert(id, inspected);
    }
    found
}

fn children_undone(inspection: &Inspection) -> Vec<String> {
    inspection
        .compensations
        .iter()
        .filter_map(|c| c.child.clone())
        .collect()
}

fn timeline(
    i: &Inspection,
    info: &InstanceInfo,
    undone: &HashMap<String, Inspection>,
    style: &Style,
) -> String {
    let mut text = header(i, info, style);
    if !i.slots.is_empty() {
        text.push_str(&slots(i, style));
    }
    if !i.compensations.is_empty() {
        text.push_str(&rollback(i, undone, style));
    }
    if !i.published.is_empty() {
        text.push_str(&format!("\n{}\n", style.paint(Paint::Bold, "Published")));
        for published in &i.published {
            text.push_str(&format!(
                "  {} {}  {}\n",
                escape(&format!("{:?}", published.name)),
                time(published.published_at),
                payload(&published.value)
            ));
        }
    }
    if !i.pending_events.is_empty() {
        text.push_str(&format!(
            "\n{}\n",
            style.paint(Paint::Bold, "Events not taken yet")
        ));
        for event in &i.pending_events {
            text.push_str(&format!(
                "  {} sent {}  {}\n",
                escape(&format!("{:?}", event.event_type)),
                time(event.sent_at),
                payload(&event.payload)
            ));
        }
    }
    if !i.rejected_events.is_empty() {
        text.push_str(&format!(
            "\n{}\n",
            style.paint(Paint::Bold, "Events set aside (they do not decode)")
        ));
        for event in &i.rejected_events {
            text.push_str(&format!(
                "  {} by wait {} {}  {}\n",
                escape(&format!("{:?}", event.event_type)),
                escape(&format!("{:?}", event.wait)),
                time(event.rejected_at),
                style.paint(Paint::Red, &escape(&event.error))
            ));
        }
    }
    text.push_str(&outcome(i, style));
    text
}

fn header(i: &Inspection, info: &InstanceInfo, style: &Style) -> String {
    let mut text = format!(
        "{}  {}  {}\n",
        style.paint(Paint::Bold, &escape(&i.id)),
        escape(&i.workflow),
        style.status(i.status)
    );
    let mut line = |label: &str, value: String| {
        text.push_str(&format!("  {}{value}\n", pad(label, 11)));
    };
    line("started", time(i.created_at));
    match i.finished_at {
        Some(end) => line(
            "finished",
            format!(
                "{}  (took {})",
                time(end),
                duration(between(i.created_at, end))
            ),
        ),
        None => line("updated", time(i.updated_at)),
    }
    if i.generation > 0 {
        line("generation", format!("{} (restarted)", i.generation));
    }
    if i.run > 0 {
        line(
            "run",
            format!(
                "{} (continued as new; earlier runs are kept until retention)",
                i.run
            ),
        );
    }
    if let Some((kind, name)) = place(i) {
        line("at", format!("{kind} {}", escape(&name)));
    }
    if info.owner.is_some() {
        line("owner", crate::list::owner(info));
    }
    if !info.tags.is_empty() {
        let tags: Vec<String> = info
            .tags
            .iter()
            .map(|(k, v)| format!("{k}={}", escape(v)))
            .collect();
        line("tags", tags.join(" "));
    }
    if let Some(parent) = &info.parent {
        line("parent", escape(parent).into_owned());
    }
    line("input", payload(&i.input));
    if let Some(output) = &i.output {
        line("output", payload(output));
    }
    if let Some(value) = &i.error_value {
        line("error", payload(value));
    }
    text
}

/// The end of the timeline: when the instance finished, or the latest
/// time anything in it happened.
fn span_end(i: &Inspection) -> SystemTime {
    let latest = i
        .slots
        .iter()
        .flat_map(|s| [s.started_at(), s.ended_at()])
        .flatten()
        .chain(
            i.compensations
                .iter()
                .flat_map(|c| [c.started_at, c.ended_at])
                .flatten(),
        )
        .max();
    i.finished_at
        .unwrap_or(i.updated_at)
        .max(latest.unwrap_or(i.updated_at))
}

fn slots(i: &Inspection, style: &Style) -> String {
    let (from, to) = (i.created_at, span_end(i));
    let mut table = Table::new(vec![
        "#", "STEP", "STATUS", "TRIES", "TOOK", "TIME", "DETAIL",
    ]);
    for (n, slot) in i.slots.iter().enumerate() {
        let started = slot.started_at().unwrap_or(from);
        let ended = slot.ended_at();
        let took = ended.map_or("-".to_owned(), |end| duration(between(started, end)));
        let bar = bar(from, to, started, ended.unwrap_or(to), BAR);
        let row = describe(slot);
        table.row_with(
            vec![
                Cell::plain((n + 1).to_string()),
                Cell::plain(row.name),
                Cell::painted(row.state, style, row.paint),
                Cell::plain(row.tries),
                Cell::plain(took),
                Cell::painted(bar, style, Paint::Cyan),
                Cell::painted(row.detail, style, Paint::Dim),
            ],
            row.lines
                .into_iter()
                .map(|l| format!("      {l}"))
                .collect(),
        );
    }
    format!(
        "\n{}  {} → {}\n{}",
        style.paint(Paint::Bold, "Timeline"),
        time(from),
        duration(between(from, to)),
        indent(&table.render(style))
    )
}

/// The row of one slot in the timeline.
struct SlotRow {
    name: String,
    state: &'static str,
    paint: Paint,
    tries: String,
    detail: String,
    /// Payloads and errors, under the row.
    lines: Vec<String>,
}

fn describe(slot: &InspectedSlot) -> SlotRow {
    match slot {
        InspectedSlot::Step(s) => {
            let mut lines = Vec::new();
            if let Some(input) = &s.input {
                lines.push(format!("input   {}", payload(input)));
            }
            if let Some(output) = &s.output {
                lines.push(format!("output  {}", payload(output)));
            }
            let (state, paint, attempts) = match &s.state {
                StepState::Running { attempts, retry_at } => {
                    if let Some(at) = retry_at {
                        lines.push(format!("next attempt {}", time(*at)));
                    }
                    ("running", Paint::Cyan, *attempts)
                }
                StepState::Completed { attempts } => ("completed", Paint::Green, *attempts),
                StepState::Failed { attempts, error } => {
                    lines.push(format!("error   {}", escape(error.message())));
                    ("failed", Paint::Red, *attempts)
                }
                StepState::Cancelled => ("cancelled", Paint::Yellow, 0),
                _ => ("unknown", Paint::Dim, 0),
            };
            let tries = if attempts == 0 {
                "-".to_owned()
            } else {
                attempts.to_string()
            };
            let name = match s.occurrence {
                0 => s.name.clone(),
                n => format!("{} #{n}", s.name),
            };
            SlotRow {
                name,
                state,
                paint,
                tries,
                detail: format!("key {}", s.key),
                lines,
            }
        }
        InspectedSlot::Sleep(s) => {
            let (state, paint) = if s.done {
                ("slept", Paint::Green)
            } else {
                ("sleeping", Paint::Cyan)
            };
            let detail = s
                .wake_at
                .map_or(String::new(), |at| format!("wakes {}", time(at)));
            SlotRow {
                name: format!("sleep {}", s.name),
                state,
                paint,
                tries: "-".into(),
                detail,
                lines: Vec::new(),
            }
        }
        InspectedSlot::Child(c) => {
            let mut lines = Vec::new();
            if let Some(output) = &c.output {
                lines.push(format!("output  {}", payload(output)));
            }
            if let Some(failure) = &c.failure {
                lines.push(format!("error   {}", escape(failure.message())));
            }
            let (state, paint) = match c.ended {
                None => ("running", Paint::Cyan),
                Some(Status::Complete) => ("completed", Paint::Green),
                Some(Status::Errored) => ("failed", Paint::Red),
                Some(Status::Terminated) => ("terminated", Paint::Yellow),
                Some(_) => ("ended", Paint::Yellow),
            };
            let undo = if c.has_rollback { "" } else { ", no rollback" };
            SlotRow {
                name: format!("child {}", c.name),
                state,
                paint,
                tries: "-".into(),
                detail: format!(
                    "instance {} ({}){undo}",
                    escape(&c.child),
                    escape(&c.workflow)
                ),
                lines,
            }
        }
        InspectedSlot::Wait(w) => {
            let mut lines = Vec::new();
            let (state, paint) = match &w.state {
                WaitState::Waiting => ("waiting", Paint::Cyan),
                WaitState::Received { payload: p } => {
                    lines.push(format!("event   {}", payload(p)));
                    ("received", Paint::Green)
                }
                WaitState::TimedOut => ("timed out", Paint::Yellow),
                _ => ("unknown", Paint::Dim),
            };
            let deadline = w
                .deadline
                .map_or(String::new(), |at| format!(", deadline {}", time(at)));
            let detail = format!("event {:?}{deadline}", w.event_type);
            SlotRow {
                name: format!("wait {}", w.name),
                state,
                paint,
                tries: "-".into(),
                detail,
                lines,
            }
        }
        _ => SlotRow {
            name: slot.name().to_owned(),
            state: "unknown",
            paint: Paint::Dim,
            tries: "-".into(),
            detail: NEWER.to_owned(),
            lines: Vec::new(),
        },
    }
}

fn rollback(i: &Inspection, undone: &HashMap<String, Inspection>, style: &Style) -> String {
    let mut table = Table::new(vec!["#", "COMPENSATES", "STATUS", "TRIES", "TOOK", "KEY"]);
    compensation_rows(&mut table, "", &i.compensations, undone, style);
    format!(
        "\n{}\n{}",
        style.paint(Paint::Bold, "Rollback, in the order it ran"),
        indent(&table.render(style))
    )
}

/// The rows of `compensations`, numbered under `prefix`; a child's row is
/// followed by its own compensations, indented and numbered under it.
fn compensation_rows(
    table: &mut Table,
    prefix: &str,
    compensations: &[InspectedCompensation],
    undone: &HashMap<String, Inspection>,
    style: &Style,
) {
    let depth = prefix.matches('.').count();
    for (n, c) in compensations.iter().enumerate() {
        let number = format!("{prefix}{}", n + 1);
        let (state, paint, lines) = match &c.state {
            CompensationOutcome::Running { attempts } => (
                format!("running ({attempts} failed attempts)"),
                Paint::Cyan,
                Vec::new(),
            ),
            CompensationOutcome::Completed => ("completed".into(), Paint::Green, Vec::new()),
            CompensationOutcome::Failed { error } => (
                "failed".into(),
                Paint::Red,
                vec![format!("      error   {}", escape(error))],
            ),
            _ => ("unknown".into(), Paint::Dim, Vec::new()),
        };
        let took = match (c.started_at, c.ended_at) {
            (Some(from), Some(to)) => duration(between(from, to)),
            _ => "-".into(),
        };
        let name = match c.occurrence {
            0 => c.step.clone(),
            n => format!("{} #{n}", c.step),
        };
        let name = match depth {
            0 => name,
            d => format!("{}└ {name}", "  ".repeat(d - 1)),
        };
        let key = match &c.child {
            Some(child) => format!("child {}", escape(child)),
            None => c.key.as_str().to_owned(),
        };
        table.row_with(
            vec![
                Cell::plain(number.clone()),
                Cell::plain(name),
                Cell::painted(state, style, paint),
                Cell::plain(match (c.attempts, &c.child) {
                    // A child's own compensations have theirs.
                    (_, Some(_)) | (0, None) => "-".to_owned(),
                    (n, None) => n.to_string(),
                }),
                Cell::plain(took),
                Cell::painted(key, style, Paint::Dim),
            ],
            lines,
        );
        if let Some(child) = c.child.as_ref().and_then(|id| undone.get(id)) {
            compensation_rows(
                table,
                &format!("{number}."),
                &child.compensations,
                undone,
                style,
            );
        }
    }
}

/// The workflow's error and the rollback's outcome, side by side.
fn outcome(i: &Inspection, style: &Style) -> String {
    let error = match (&i.failure, &i.rollback_cause) {
        (Some(failure), _) => failure.message().to_owned(),
        (None, Some(cause)) => cause.message().to_owned(),
        (None, None) if i.status.is_terminal() => format!("none ({})", i.status),
        (None, None) => "none so far".to_owned(),
    };
    let with_rollback = i
        .slots
        .iter()
        .filter(|s| match s {
            InspectedSlot::Step(step) => step.has_rollback,
            InspectedSlot::Child(child) => child.has_rollback,
            _ => false,
        })
        .count();
    let ran = i.compensations.len();
    let rollback = match (&i.rollback_cause, &i.rollback_failure) {
        (None, _) => "none".to_owned(),
        (Some(_), Some(failure)) => format!(
            "gave up: {}; {} of {with_rollback} compensations ran",
            escape(failure.message()),
            ran
        ),
        (Some(_), None) if i.status.is_terminal() => {
            format!(
                "completed: {ran} of {with_rollback} compensations ran{}",
                nothing_to_undo(i)
            )
        }
        (Some(_), None) => format!("running: {ran} of {with_rollback} compensations begun"),
    };
    let error = short(&error, 96);
    let width = error.width().clamp(5, 96);
    let error_paint = if i.failure.is_some() {
        Paint::Red
    } else {
        Paint::Dim
    };
    let rollback_paint = match (&i.rollback_cause, &i.rollback_failure) {
        (_, Some(_)) => Paint::Red,
        (Some(_), None) => Paint::Green,
        (None, None) => Paint::Dim,
    };
    format!(
        "\n{}\n  {}  │ {}\n  {}  │ {}\n",
        style.paint(Paint::Bold, "Outcome"),
        pad("error", width),
        "rollback",
        style.paint(error_paint, &pad(&error, width)),
        style.paint(rollback_paint, &rollback),
    )
}

/// The calls a completed rollback had nothing to undo for, and why: a
/// child that failed undid its own steps as it did. Empty when there are
/// none.
fn nothing_to_undo(i: &Inspection) -> String {
    let failed_children: Vec<String> = i
        .slots
        .iter()
        .filter_map(|slot| match slot {
            InspectedSlot::Child(child)
                if child.has_rollback
                    && child.ended.is_some_and(|s| s != Status::Complete)
                    && !i
                        .compensations
                        .iter()
                        .any(|c| c.child.as_deref() == Some(child.child.as_str())) =>
            {
                Some(format!(
                    "child {} ({})",
                    escape(&child.name),
                    escape(&child.child)
                ))
            }
            _ => None,
        })
        .collect();
    match failed_children.as_slice() {
        [] => String::new(),
        [one] => format!("; {one} had nothing to undo: it failed, and undid its own steps"),
        many => format!(
            "; {} had nothing to undo: they failed, and undid their own steps",
            many.join(", ")
        ),
    }
}

/// A payload as one line of JSON with its size.
fn payload(view: &PayloadView) -> String {
    match view {
        PayloadView::Json { value, bytes } => {
            format!("{}  ({})", short(&value.to_string(), PAYLOAD), size(*bytes))
        }
        PayloadView::Unavailable { bytes, reason } => {
            format!("<unavailable: {}>  ({})", escape(reason), size(*bytes))
        }
        PayloadView::Encrypted { sealed } => {
            format!(
                "{}  ({})",
                json::encrypted(&sealed.key),
                size(sealed.bytes.len())
            )
        }
        _ => format!("<unavailable: {NEWER}>"),
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|line| format!("  {line}\n")).collect()
}
