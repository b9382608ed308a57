//! `saga list`: a table of instances, or one page of them (`--limit`,
//! `--after`, `--order`) and the next page's cursor. One order everywhere,
//! on any store and through `saga --url`: by start time, then id (the
//! order of pages, which the index keeps), unless `--order id`.

use std::io::Write;

use serde_json::json;

use crate::CliError;
use crate::args::{ListArgs, ListOrder};
use crate::json;
use crate::output::{Cell, Paint, Style, Table, escape, short, time};
use saga_runtime::Engine;
use saga_runtime::inspect::{CompensationOutcome, InspectedSlot, Inspection, StepState, WaitState};
use saga_runtime::inspect::{InstanceInfo, ListFilter, Page};

pub(crate) async fn run(
    engine: &Engine,
    args: &ListArgs,
    out: &mut impl Write,
    style: &Style,
) -> Result<(), CliError> {
    let filter = filter(args);
    let paged = args.limit.is_some() || args.after.is_some() || args.order.is_some();
    let (instances, unreadable, next) = if paged {
        let mut page = Page::first(args.limit.unwrap_or(100));
        if args.order == Some(ListOrder::Id) {
            page = page.by_id();
        }
        if let Some(after) = &args.after {
            page = page.after(after.clone());
        }
        let found = engine.list_page(&filter, &page).await?;
        (found.instances, found.unreadable, found.next)
    } else {
        // One damaged entry hides no other, and is named. In the order of
        // the first page, so `list` and `list --limit N` agree.
        let mut all = engine.list_all(&filter).await?;
        all.instances
            .sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        (all.instances, all.unreadable, None)
    };
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
        let unreadable: Vec<_> = unreadable
            .iter()
            .map(|u| json!({"id": u.id, "error": u.error.to_string()}))
            .collect();
        return json::print(
            out,
            &json!({
                "schema": json::SCHEMA,
                "instances": listed,
                "unreadable": unreadable,
                "next": next.map(|c| c.to_string()),
            }),
        );
    }
    for damaged in &unreadable {
        writeln!(
            out,
            "{}",
            style.paint(
                Paint::Red,
                &format!(
                    "unreadable {}: {}",
                    escape(&damaged.id),
                    escape(&damaged.error.to_string())
                )
            )
        )?;
    }
    if rows.is_empty() {
        writeln!(out, "no instances")?;
    } else {
        let mut table = Table::new(vec![
            "ID", "WORKFLOW", "STATUS", "STARTED", "UPDATED", "AT", "OWNER", "ERROR",
        ]);
        for (info, place) in &rows {
            table.row(row(info, place.as_ref(), style));
        }
        write!(out, "{}", table.render(style))?;
    }
    if let Some(next) = next {
        writeln!(out, "next page: --after {next}")?;
    }
    Ok(())
}

/// The runtime's filter of the command's flags.
fn filter(args: &ListArgs) -> ListFilter {
    let mut filter = ListFilter::all();
    if let Some(status) = args.status {
        filter = filter.status(status);
    }
    if let Some(workflow) = &args.workflow {
        filter = filter.workflow(workflow.clone());
    }
    for (key, value) in &args.tags {
        filter = filter.tag(key.clone(), value.clone());
    }
    let times = [
        (
            args.started_after,
            ListFilter::started_after as fn(ListFilter, _) -> _,
        ),
        (args.started_before, ListFilter::started_before),
        (args.ended_after, ListFilter::ended_after),
        (args.ended_before, ListFilter::ended_before),
    ];
    for (at, condition) in times {
        if let Some(at) = at {
            filter = condition(filter, at);
        }
    }
    if let Some(parent) = &args.parent {
        filter = filter.parent(parent.clone());
    }
    if let Some(prefix) = &args.id_prefix {
        filter = filter.id_prefix(prefix.clone());
    }
    if args.rollback_failed {
        filter = filter.rollback_failed();
    }
    if args.failed_compensation {
        filter = filter.failed_compensation();
    }
    filter
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
        Cell::plain(owner(info)),
        Cell::painted(error, style, Paint::Red),
    ]
}

/// Who drives an unfinished instance: `worker-a (since 09:00:07)`.
pub(crate) fn owner(info: &InstanceInfo) -> String {
    info.owner.as_ref().map_or("-".to_owned(), |owner| {
        format!("{} (since {})", escape(&owner.worker), time(owner.since))
    })
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
        InspectedSlot::Child(c) if c.ended.is_none() => Some(("child", c.name.clone())),
        _ => None,
    })
}
