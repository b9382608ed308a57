//! `saga history ID [--run N]`: every event of one instance's history
//! (its current run, or run `N` of one that continued as new), in order,
//! as stored: what `show` draws its timeline from.

use std::io::Write;

use crate::CliError;
use crate::args::HistoryArgs;
use crate::json;
use crate::output::{escape, time};
use saga_runtime::Engine;

pub(crate) async fn run(
    engine: &Engine,
    args: &HistoryArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let instance = engine.instance(&args.id).await?;
    let history = match args.run {
        Some(run) => instance.history_of_run(run).await?,
        None => instance.history().await?,
    };
    for event in &history {
        if args.json {
            json::print(out, &json::event(event))?;
        } else {
            writeln!(
                out,
                "#{:<4} {}  {}",
                event.seq,
                time(event.at),
                escape(&event.kind.to_string())
            )?;
        }
    }
    Ok(())
}
