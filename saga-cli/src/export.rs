//! `saga export ID` and `saga export --all [--status S] DIR`: instances'
//! histories as JSON files (`saga_runtime::testing::History`), to replay
//! against the code of the next release in its tests, before a deploy.

use std::io::Write;
use std::path::Path;

use crate::CliError;
use crate::args::ExportArgs;
use crate::output::escape;
use saga_runtime::Engine;
use saga_runtime::inspect::ListFilter;
use saga_runtime::testing::History;

pub(crate) async fn run(
    engine: &Engine,
    args: &ExportArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    if !args.all {
        let history = History::export(engine, &args.target).await?;
        writeln!(out, "{}", history.to_json())?;
        return Ok(());
    }
    let dir = Path::new(&args.target);
    std::fs::create_dir_all(dir).map_err(|e| {
        CliError::usage(format!(
            "cannot create the directory {}: {e}",
            dir.display()
        ))
    })?;
    let mut filter = ListFilter::all();
    if let Some(workflow) = &args.workflow {
        filter = filter.workflow(workflow.clone());
    }
    let mut all = engine.list_all(&filter).await?;
    all.instances.sort_by(|a, b| a.id.cmp(&b.id));
    let mut written = 0;
    let mut failed = Vec::new();
    for info in all
        .instances
        .iter()
        .filter(|i| args.status.is_empty() || args.status.contains(&i.status))
    {
        // A derived id (`trip-9.book-flight~o1`) is a fine file name: its
        // characters are unreserved everywhere.
        let path = dir.join(format!("{}.json", info.id));
        let exported = match History::export(engine, &info.id).await {
            Ok(history) => std::fs::write(&path, history.to_json() + "\n")
                .map_err(|e| format!("cannot write {}: {e}", path.display())),
            Err(e) => Err(e.to_string()),
        };
        match exported {
            Ok(()) => {
                written += 1;
                writeln!(out, "{}", escape(&path.display().to_string()))?;
            }
            Err(why) => failed.push(format!("{}: {why}", info.id)),
        }
    }
    for damaged in &all.unreadable {
        failed.push(format!(
            "{}: its index entry does not read ({})",
            damaged.id, damaged.error
        ));
    }
    writeln!(
        out,
        "wrote {written} histories to {}",
        escape(&dir.display().to_string())
    )?;
    match failed.as_slice() {
        [] => Ok(()),
        _ => Err(CliError::failed(
            escape(&format!(
                "{} instances were not exported: {}",
                failed.len(),
                failed.join("; ")
            ))
            .into_owned(),
        )),
    }
}
