//! `saga schedules`: the schedules the store keeps (their definition, next
//! ticks, paused state, last tick and its outcome), and `pause`, `resume`
//! and `trigger` of one.
//!
//! The stored state holds each schedule's definition, so any engine lists,
//! pauses and resumes it. Only an engine that declares a schedule knows
//! the workflow input its ticks make, so `trigger` needs that engine: the
//! running service's, through `saga --url`.

use std::io::Write;

use serde_json::{Value, json};

use crate::CliError;
use crate::args::{ScheduleAction, SchedulesArgs};
use crate::json;
use crate::output::{Cell, Paint, Style, Table, escape, rfc3339, time};
use saga_runtime::Engine;
use saga_runtime::schedule::{CatchUp, Overlap, ScheduleInfo};

pub(crate) async fn run(
    engine: &Engine,
    args: &SchedulesArgs,
    out: &mut impl Write,
    style: &Style,
) -> Result<(), CliError> {
    match &args.action {
        None => list(engine, args.json, out, style).await,
        Some(ScheduleAction::Pause(a)) => pause(engine, &a.name, out).await,
        Some(ScheduleAction::Resume(a)) => resume(engine, &a.name, out).await,
        Some(ScheduleAction::Trigger(a)) => trigger(engine, &a.name, out).await,
    }
}

async fn list(
    engine: &Engine,
    as_json: bool,
    out: &mut impl Write,
    style: &Style,
) -> Result<(), CliError> {
    let schedules = engine.schedules().list().await?;
    if as_json {
        let listed: Vec<_> = schedules.iter().map(listed).collect();
        return json::print(out, &json!({"schema": json::SCHEMA, "schedules": listed}));
    }
    if schedules.is_empty() {
        writeln!(out, "no schedules")?;
        return Ok(());
    }
    let mut table = Table::new(vec![
        "NAME",
        "WORKFLOW",
        "TIMING",
        "STATE",
        "NEXT TICK",
        "LAST TICK",
        "LAST OUTCOME",
    ]);
    for schedule in &schedules {
        table.row(row(schedule, style));
    }
    write!(out, "{}", table.render(style))?;
    Ok(())
}

fn row(schedule: &ScheduleInfo, style: &Style) -> Vec<Cell> {
    let state = if schedule.paused {
        Cell::painted("paused", style, Paint::Yellow)
    } else {
        Cell::plain("active")
    };
    vec![
        Cell::plain(&schedule.name),
        Cell::plain(&schedule.workflow),
        Cell::plain(&schedule.timing),
        state,
        Cell::plain(
            schedule
                .next_fires
                .first()
                .map_or("-".to_owned(), |t| time(*t)),
        ),
        Cell::plain(schedule.last_tick.map_or("-".to_owned(), time)),
        match schedule.last_outcome {
            Some(status) => Cell::status(status, style),
            None => Cell::plain("-"),
        },
    ]
}

/// One schedule of `schedules --json`.
fn listed(schedule: &ScheduleInfo) -> Value {
    json!({
        "name": schedule.name,
        "workflow": schedule.workflow,
        "timing": schedule.timing,
        "paused": schedule.paused,
        "next_ticks": schedule.next_fires.iter().map(|t| rfc3339(*t)).collect::<Vec<_>>(),
        "last_tick": schedule.last_tick.map(rfc3339),
        "last_outcome": schedule.last_outcome.map(|s| s.to_string()),
        "catch_up": catch_up(schedule.catch_up),
        "overlap": match schedule.overlap {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
            Overlap::QueueOne => "queue-one",
            _ => "unknown",
        },
        "jitter_ms": schedule.jitter.map(|j| j.as_millis() as u64),
        "kept_tick": schedule.kept_tick.map(rfc3339),
        "declared_here": schedule.declared_here,
        "run_time": schedule.run_time,
    })
}

/// `{"policy": "all", "at_most": 5}`; `at_most` is null but for `all`.
fn catch_up(policy: CatchUp) -> Value {
    let (name, at_most) = match policy {
        CatchUp::Skip => ("skip", None),
        CatchUp::Latest => ("latest", None),
        CatchUp::All { at_most } => ("all", Some(at_most)),
        _ => ("unknown", None),
    };
    json!({"policy": name, "at_most": at_most})
}

async fn pause(engine: &Engine, name: &str, out: &mut impl Write) -> Result<(), CliError> {
    stored(engine, name).await?;
    engine.schedules().pause(name).await?;
    writeln!(
        out,
        "paused schedule {}: it fires no tick until resumed, and the ticks it misses are never caught up",
        escape(name)
    )?;
    Ok(())
}

async fn resume(engine: &Engine, name: &str, out: &mut impl Write) -> Result<(), CliError> {
    stored(engine, name).await?;
    engine.schedules().resume(name).await?;
    let next = stored(engine, name)
        .await?
        .next_fires
        .first()
        .map_or("none".to_owned(), |t| time(*t));
    writeln!(out, "resumed schedule {}: next tick {next}", escape(name))?;
    Ok(())
}

async fn trigger(engine: &Engine, name: &str, out: &mut impl Write) -> Result<(), CliError> {
    let schedule = stored(engine, name).await?;
    if schedule.run_time {
        return Err(CliError::usage(format!(
            "schedule \"{name}\" was created at run time, and only an engine that registers its workflow ({workflow}) starts its ticks, which this one does not: trigger it on the running service, with saga --url URL schedules trigger {name} (saga_cli::serve)",
            name = escape(name),
            workflow = escape(&schedule.workflow),
        )));
    }
    if !schedule.declared_here {
        return Err(CliError::usage(format!(
            "schedule \"{name}\" is stored, but only an engine that declares it (Engine::builder().schedule(..)) knows what its ticks start, and this one does not: trigger it on the running service, with saga --url URL schedules trigger {name} (saga_cli::serve)",
            name = escape(name),
        )));
    }
    let run = engine.schedules().trigger(name).await?;
    writeln!(
        out,
        "triggered schedule {}: started {}",
        escape(name),
        escape(run.id())
    )?;
    writeln!(out, "status: {}", run.status().await?)?;
    Ok(())
}

/// The stored schedule `name`; an unknown one is an error that says where
/// to find the names.
async fn stored(engine: &Engine, name: &str) -> Result<ScheduleInfo, CliError> {
    let schedules = engine.schedules().list().await?;
    let known: Vec<&str> = schedules.iter().map(|s| s.name.as_str()).collect();
    if let Some(found) = schedules.iter().find(|s| s.name == name) {
        return Ok(found.clone());
    }
    let stored = if known.is_empty() {
        "the store holds none".to_owned()
    } else {
        format!("the store holds {}", escape(&known.join(", ")))
    };
    Err(CliError::failed(format!(
        "unknown schedule \"{}\": {stored}",
        escape(name)
    )))
}
