//! `saga queues`: each queue's depth, store-wide: how many instances wait
//! for a slot, how many left the wait and have not ended.

use std::io::Write;

use serde_json::json;

use crate::CliError;
use crate::args::{QueueAction, QueueSet, QueuesArgs};
use crate::json;
use crate::output::{Cell, Paint, Style, Table, rfc3339, time};
use saga_runtime::Engine;
use saga_runtime::queue::{Queue, QueueDepth, QueueLimits};

pub(crate) async fn run(
    engine: &Engine,
    args: &QueuesArgs,
    out: &mut impl Write,
    style: &Style,
) -> Result<(), CliError> {
    if let Some(QueueAction::Set(set)) = &args.action {
        return change(engine, set, out).await;
    }
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
                    "limits": shown(d).map(|l| json!({
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
            Cell::plain(
                depth
                    .stored
                    .or(depth.declared)
                    .map_or("?".to_owned(), |l| l.to_string()),
            ),
        ]);
    }
    write!(out, "{}", table.render(style))?;
    if counts
        .queues
        .iter()
        .any(|d| d.stored.is_none() && d.declared.is_none())
    {
        let note = "?: limits are declared in the application's code; `saga --url` on its admin endpoint (or saga_cli::run in it) shows them";
        writeln!(out, "{}", style.paint(Paint::Dim, note))?;
    }
    Ok(())
}

/// The limits a queue runs by: those stored (every worker's), with this
/// engine's own capacity; those it declares where none are stored.
fn shown(depth: &QueueDepth) -> Option<QueueLimits> {
    match (depth.stored, depth.declared) {
        (Some(mut stored), Some(declared)) => {
            stored.per_worker = declared.per_worker;
            Some(stored)
        }
        (stored, declared) => stored.or(declared),
    }
}

/// `saga queues set NAME --concurrency N ...`.
async fn change(engine: &Engine, set: &QueueSet, out: &mut impl Write) -> Result<(), CliError> {
    let mut queue = Queue::new(&set.name);
    if let Some(n) = set.concurrency {
        queue = queue.concurrency(n);
    }
    if let Some(n) = set.per_key {
        queue = queue.per_key(n);
    }
    if let (Some(n), Some(per)) = (set.rate, set.per) {
        queue = queue.rate_limit(n, per);
    }
    let limits = engine.set_queue_limits(queue).await?;
    writeln!(
        out,
        "queue {} now runs with {limits} on every worker, from each one's next take; declare the same in the code before the next deploy",
        set.name
    )?;
    Ok(())
}
