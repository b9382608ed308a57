//! `saga watch [ID]`: lifecycle events as they become durable, until the
//! engine closes, `--count` events were printed, or the process is
//! interrupted.

use std::io::Write;

use crate::CliError;
use crate::args::WatchArgs;
use crate::json;
use crate::output::{escape, time};
use saga_runtime::Engine;
use saga_runtime::inspect::RecvError;

pub(crate) async fn run(
    engine: &Engine,
    args: &WatchArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    if let Some(id) = &args.id {
        // An unknown id is an error, not a silent wait forever.
        engine.instance(id).await?;
    }
    let mut events = engine.subscribe();
    if !args.json {
        // Said once subscribed: what happens from here on is shown.
        match &args.id {
            Some(id) => writeln!(out, "watching {} (interrupt to stop)", escape(id))?,
            None => writeln!(out, "watching every instance (interrupt to stop)")?,
        }
        out.flush()?;
    }
    let mut printed = 0;
    while args.count.is_none_or(|count| printed < count) {
        let event = match events.recv().await {
            Ok(event) => event,
            Err(RecvError::Lagged(skipped)) => {
                if !args.json {
                    writeln!(out, "… {skipped} events skipped (this watcher fell behind)")?;
                }
                continue;
            }
            Err(RecvError::Closed) => break,
        };
        if args.id.as_ref().is_some_and(|id| *id != event.instance) {
            continue;
        }
        if args.json {
            json::print(out, &json::event(&event))?;
        } else {
            writeln!(
                out,
                "{}  {}  #{} {}",
                time(event.at),
                escape(&event.instance),
                event.seq,
                escape(&event.kind.to_string())
            )?;
        }
        out.flush()?;
        printed += 1;
    }
    Ok(())
}
