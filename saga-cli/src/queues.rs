//! `saga queues`: each queue's depth, store-wide: how many instances wait
//! for a slot, how many left the wait and have not ended.

use std::io::Write;

use serde_json::json;

use crate::CliError;
use crate::args::QueuesArgs;
use crate::json;
use crate::output::{Cell, Paint, Style, Table, rfc3339, time};
use saga_runtime::{Engine, QueueLimits};

pub(crate) async fn run(
    engine: &Engine,
    args: &QueuesArgs,
    out: &mut impl Write,
    style: &Style,
) -> Result<(), CliError> {
    // Every queue an instance names, and those this engine declares: the
    // binary declares none, a service (`--url`) its own.
    let counts = engine.instance_counts().await?;
    if args.json {
        let queues: Vec<_> = counts
            .queues
            .iter()
            .map(|d| {
                json!({
                    "queue": d.queue,
                    "waiting": d.waiting,
                    "started": d.started,
                    "oldest_waiting": d.oldest_waiting.map(rfc3339),
                    "limits": d.declared.map(|l| json!({
                        "concurrency": l.concurrency,
                        "per_key": l.per_key,
                        "per_worker": l.per_worker,
                        "rate": l.rate.map(|(starts, per)| json!({
                            "starts": starts,
                            "per_ms": u64::try_from(per.as_millis()).unwrap_or(u64::MAX),
                        })),
                        "release_while_waiting": l.release_while_waiting,
                    })),
                })
            })
            .collect();
        return json::print(
            out,
            &json!({
                "schema": json::SCHEMA,
                "queues": queues,
                "unreadable_count": counts.unreadable,
            }),
        );
    }
    if counts.unreadable > 0 {
        let damaged = format!(
            "{} index entries do not read, and are not counted (saga list names them)",
            counts.unreadable
        );
        writeln!(out, "{}", style.paint(Paint::Red, &damaged))?;
    }
    if counts.queues.is_empty() {
        writeln!(out, "no queues")?;
        return Ok(());
    }
    let mut table = Table::new(vec![
        "QUEUE",
        "WAITING",
        "STARTED",
        "OLDEST WAITING",
        "LIMITS",
    ]);
    for depth in &counts.queues {
        table.row(vec![
            Cell::plain(&depth.queue),
            Cell::plain(depth.waiting.to_string()),
            Cell::plain(depth.started.to_string()),
            Cell::plain(depth.oldest_waiting.map_or("-".to_owned(), time)),
            Cell::plain(depth.declared.map_or("?".to_owned(), limits)),
        ]);
    }
    write!(out, "{}", table.render(style))?;
    if counts.queues.iter().any(|d| d.declared.is_none()) {
        let note = "?: limits are declared in the application's code; `saga --url` on its admin endpoint (or saga_cli::run in it) shows them";
        writeln!(out, "{}", style.paint(Paint::Dim, note))?;
    }
    Ok(())
}

/// A queue's limits in a few words: `concurrency 10, per key 1, 100 per
/// 1s, released while waiting`, or `none`.
fn limits(declared: QueueLimits) -> String {
    let mut parts = Vec::new();
    if let Some(n) = declared.concurrency {
        parts.push(format!("concurrency {n}"));
    }
    if let Some(n) = declared.per_key {
        parts.push(format!("per key {n}"));
    }
    if let Some(n) = declared.per_worker {
        parts.push(format!("per worker {n}"));
    }
    if let Some((n, per)) = declared.rate {
        parts.push(format!("{n} per {per:?}"));
    }
    if declared.release_while_waiting {
        parts.push("released while waiting".to_owned());
    }
    if parts.is_empty() {
        return "none".to_owned();
    }
    parts.join(", ")
}
