//! `saga queues`: each queue's depth, store-wide: how many instances wait
//! for a slot, how many left the wait and have not ended.

use std::io::Write;

use serde_json::json;

use crate::CliError;
use crate::args::QueuesArgs;
use crate::json;
use crate::output::{Cell, Paint, Style, Table, rfc3339, time};
use saga_runtime::Engine;

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
    let mut table = Table::new(vec!["QUEUE", "WAITING", "STARTED", "OLDEST WAITING"]);
    for depth in &counts.queues {
        table.row(vec![
            Cell::plain(&depth.queue),
            Cell::plain(depth.waiting.to_string()),
            Cell::plain(depth.started.to_string()),
            Cell::plain(depth.oldest_waiting.map_or("-".to_owned(), time)),
        ]);
    }
    write!(out, "{}", table.render(style))?;
    Ok(())
}
