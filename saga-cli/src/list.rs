//! `saga list`: a table of instances, the most recently updated first.

use std::io::Write;

use serde_json::json;

use crate::CliError;
use crate::args::ListArgs;
use crate::json;
use crate::output::{Cell, Paint, Style, Table, short, time};
use saga_runtime::Engine;
use saga_runtime::{CompensationOutcome, InspectedSlot, Inspection, StepState, WaitState};
use saga_runtime::{InstanceInfo, ListFilter};

pub(crate) async fn run(
    engine: &Engine,
    args: &ListArgs,
    out: &mut impl Write,
    style: &Style,
) -> Result<(), CliError> {
    let mut filter = ListFilter::all();
    if let Some(status) = args.status {
        filter = filter.status(status);
    }
    if let Some(workflow) = &args.workflow {
        filter = filter.workflow(workflow.clone());
    }
    let mut instances = engine.list(&filter).await?;
    instances.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.id.cmp(&b.id)));
    instances.truncate(args.limit.unwrap_or(usize::MAX));
    let mut rows = Vec::with_capacity(instances.len());
    for info in instances {
        let place = where_is(engine, &info).await?;
        rows.push((info, place));
    }
    if args.json {
        let listed: Vec<_> = rows
            .iter()
            .map(|(info, place)| json::listed(info, place.clone()))
            .collect();
        return json::print(out, &json!({"schema": json::SCHEMA, "instances": listed}));
    }
    if rows.is_empty() {
        writeln!(out, "no instances")?;
        return Ok(());
    }
    let mut table = Table::new(vec![
        "ID", "WORKFLOW", "STATUS", "STARTED", "UPDATED", "AT", "ERROR",
    ]);
    for (info, place) in &rows {
        table.row(row(info, place.as_ref(), style));
    }
    write!(out, "{}", table.render(style))?;
    Ok(())
}

fn row(info: &InstanceInfo, place: Option<&(&'static str, String)>, style: &Style) -> Vec<Cell> {
    let at = place.map_or("-".to_owned(), |(kind, name)| format!("{kind} {name}"));
    let mut error = info
        .failure
        .as_ref()
        .map_or(String::new(), |f| short(f.message(), 48));
    if let Some(rollback) = &info.rollback_failure {
        error.push_str(&format!(
            "{}rollback: {}",
            if error.is_empty() { "" } else { "; " },
            short(rollback.message(), 32)
        ));
    }
    vec![
        Cell::plain(&info.id),
        Cell::plain(&info.workflow),
        Cell::status(info.status, style),
        Cell::plain(time(info.created_at)),
        Cell::plain(time(info.updated_at)),
        Cell::plain(at),
        Cell::painted(error, style, Paint::Red),
    ]
}

/// Where an unfinished instance is: the step, sleep or wait it is in, or
/// the compensation that runs; `None` for a finished one.
async fn where_is(
    engine: &Engine,
    info: &InstanceInfo,
) -> Result<Option<(&'static str, String)>, CliError> {
    if info.status.is_terminal() {
        return Ok(None);
    }
    let inspection = engine.instance(&info.id).await?.inspect().await?;
    Ok(place(&inspection))
}

/// Where an instance is, from its inspection: `("step", "charge")`.
pub(crate) fn place(inspection: &Inspection) -> Option<(&'static str, String)> {
    if inspection.status.is_terminal() {
        return None;
    }
    let compensating = inspection
        .compensations
        .iter()
        .find(|c| matches!(c.state, CompensationOutcome::Running { .. }));
    if let Some(c) = compensating {
        return Some(("compensation", c.step.clone()));
    }
    inspection.slots.iter().rev().find_map(|slot| match slot {
        InspectedSlot::Step(s) if matches!(s.state, StepState::Running { .. }) => {
            Some(("step", s.name.clone()))
        }
        InspectedSlot::Sleep(s) if !s.done => Some(("sleep", s.name.clone())),
        InspectedSlot::Wait(w) if w.state == WaitState::Waiting => Some(("wait", w.name.clone())),
        _ => None,
    })
}
