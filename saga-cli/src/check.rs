//! `saga check --lock saga.lock`: before a deploy, the in-flight instances
//! whose history names a workflow, step, sleep or wait that the release's
//! lock no longer has. The macros see a step renamed or dropped inside a
//! workflow they expand; only the store knows which instances still need
//! a workflow deleted entirely. `--replay` (in `replay`) goes further: it
//! replays each against the registered code.

use std::collections::{BTreeSet, HashSet};
use std::io::Write;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::CliError;
use crate::args::CheckArgs;
use crate::json;
use crate::output::{Paint, Style, escape};
use saga_runtime::Engine;
use saga_runtime::inspect::ListFilter;
use saga_runtime::inspect::{InspectedSlot, Inspection};

/// The names a `saga.lock` keeps (its format is documented in
/// `saga-macros/src/lock.rs`).
#[derive(Debug, Default)]
struct Lock {
    workflows: HashSet<String>,
    /// `step * <name> <hash> <fn>`: a `#[step]` function, any workflow.
    any_workflow_steps: HashSet<String>,
    /// `step <workflow> <name>`: an inline `ctx.step`.
    steps: HashSet<(String, String)>,
    sleeps: HashSet<(String, String)>,
    waits: HashSet<(String, String)>,
    /// `child <workflow> <name>`: a `ctx.child` call.
    children: HashSet<(String, String)>,
}

impl Lock {
    fn read(path: &Path) -> Result<Lock, CliError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            CliError::usage(format!("cannot read the lock file {}: {e}", path.display()))
        })?;
        let lock = Lock::parse(&text);
        if lock.workflows.is_empty() {
            return Err(CliError::usage(format!(
                "{} has no `workflow` line: is it a saga.lock?",
                path.display()
            )));
        }
        Ok(lock)
    }

    /// One fact per line, fields split by spaces, `#` starts a comment.
    /// Lines of kinds this build does not know are skipped.
    fn parse(text: &str) -> Lock {
        let mut lock = Lock::default();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            let fields: Vec<&str> = line.split_whitespace().collect();
            let pair = |w: &str, n: &str| (w.to_owned(), n.to_owned());
            match fields.as_slice() {
                // workflow bank-transfer
                ["workflow", w] => {
                    lock.workflows.insert((*w).to_owned());
                }
                // step * debit-bank-a 5f0c8a1e9d3b7a24 debit_bank_a
                ["step", "*", name, ..] => {
                    lock.any_workflow_steps.insert((*name).to_owned());
                }
                // step bank-transfer double
                ["step", w, name] => {
                    lock.steps.insert(pair(w, name));
                }
                // sleep bank-transfer settle
                ["sleep", w, name] => {
                    lock.sleeps.insert(pair(w, name));
                }
                // event bank-transfer wait-approval
                ["event", w, name] => {
                    lock.waits.insert(pair(w, name));
                }
                // child trip-booking book-flight
                ["child", w, name] => {
                    lock.children.insert(pair(w, name));
                }
                _ => {}
            }
        }
        lock
    }

    /// What `inspection` names that the lock does not have:
    /// `("step", "credit-bank-b")`. A missing workflow is the whole answer.
    fn missing(&self, inspection: &Inspection) -> BTreeSet<(&'static str, String)> {
        let workflow = &inspection.workflow;
        if !self.workflows.contains(workflow) {
            return BTreeSet::from([("workflow", workflow.clone())]);
        }
        let has = |set: &HashSet<(String, String)>, name: &str| {
            set.contains(&(workflow.clone(), name.to_owned()))
        };
        inspection
            .slots
            .iter()
            .filter_map(|slot| match slot {
                InspectedSlot::Step(s)
                    if !self.any_workflow_steps.contains(&s.name) && !has(&self.steps, &s.name) =>
                {
                    Some(("step", s.name.clone()))
                }
                InspectedSlot::Sleep(s) if !has(&self.sleeps, &s.name) => {
                    Some(("sleep", s.name.clone()))
                }
                InspectedSlot::Wait(w) if !has(&self.waits, &w.name) => {
                    Some(("wait", w.name.clone()))
                }
                InspectedSlot::Child(c) if !has(&self.children, &c.name) => {
                    Some(("child", c.name.clone()))
                }
                _ => None,
            })
            .collect()
    }
}

pub(crate) async fn run(
    engine: &Engine,
    args: &CheckArgs,
    out: &mut impl Write,
    style: &Style,
) -> Result<(), CliError> {
    let mut report = Map::new();
    report.insert("schema".into(), json!(json::SCHEMA));
    let mut failures = Vec::new();
    if let Some(lock) = &args.lock {
        failures.extend(check_lock(engine, lock, args.json, &mut report, out, style).await?);
    }
    if args.replay {
        let from = args.from.as_deref();
        failures
            .extend(crate::replay::check(engine, from, args.json, &mut report, out, style).await?);
    }
    if args.json {
        json::print(out, &Value::Object(report))?;
    }
    match failures.as_slice() {
        [] => Ok(()),
        _ => Err(CliError::failed(failures.join("; "))),
    }
}

/// `--lock`: what it found goes to `out` (or into `report`, for
/// `--json`); the failure to report when some instance does not fit.
async fn check_lock(
    engine: &Engine,
    path: &Path,
    as_json: bool,
    report: &mut Map<String, Value>,
    out: &mut impl Write,
    style: &Style,
) -> Result<Option<String>, CliError> {
    let lock = Lock::read(path)?;
    let mut in_flight = 0;
    let mut stale = Vec::new();
    let all = engine.list_all(&ListFilter::all()).await?;
    let unreadable = all.unreadable;
    for info in all.instances {
        if info.status.is_terminal() {
            continue;
        }
        in_flight += 1;
        let inspection = engine.instance(&info.id).await?.inspect().await?;
        let missing = lock.missing(&inspection);
        if !missing.is_empty() {
            stale.push((inspection, missing));
        }
    }
    let lock_name = path.display().to_string();
    if as_json {
        let stale: Vec<_> = stale
            .iter()
            .map(|(i, missing)| {
                json!({
                    "id": i.id,
                    "workflow": i.workflow,
                    "status": i.status.to_string(),
                    "missing": missing.iter().map(|(kind, name)| json!({"kind": kind, "name": name})).collect::<Vec<_>>(),
                })
            })
            .collect();
        report.insert("lock".into(), json!(lock_name));
        report.insert("stale".into(), json!(stale));
        report.insert(
            "unreadable".into(),
            json!(
                unreadable
                    .iter()
                    .map(|u| json!({"id": u.id, "error": u.error.to_string()}))
                    .collect::<Vec<_>>()
            ),
        );
    } else if stale.is_empty() {
        writeln!(
            out,
            "{} all {in_flight} in-flight instances fit {lock_name}",
            style.paint(Paint::Green, "ok:")
        )?;
    } else {
        writeln!(
            out,
            "{} of {in_flight} in-flight instances name what {lock_name} no longer has:",
            stale.len()
        )?;
        for (i, missing) in &stale {
            let names: Vec<String> = missing
                .iter()
                .map(|(kind, name)| format!("{kind} {}", escape(&format!("{name:?}"))))
                .collect();
            writeln!(
                out,
                "  {}  {}  {}  missing {}",
                escape(&i.id),
                escape(&i.workflow),
                style.status(i.status),
                style.paint(Paint::Red, &names.join(", "))
            )?;
        }
    }
    if !as_json {
        // Not checked: a damaged entry says nothing of the steps its
        // instance ran (`saga show` tells what can be read of it).
        for damaged in &unreadable {
            writeln!(
                out,
                "{} {} was not checked: its index entry does not read ({})",
                style.paint(Paint::Red, "unreadable:"),
                escape(&damaged.id),
                escape(&damaged.error.to_string())
            )?;
        }
    }
    Ok((!stale.is_empty()).then(|| {
        format!(
            "{} in-flight instances do not fit {lock_name}: deploying it would strand them",
            stale.len()
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_kind_of_line() {
        let lock = Lock::parse(
            "# saga.lock\n\
             call bank-transfer debit_bank_a\n\
             event bank-transfer wait-approval   # a comment\n\
             sleep bank-transfer settle\n\
             step bank-transfer double\n\
             step * debit-bank-a 5f0c8a1e9d3b7a24 debit_bank_a\n\
             workflow bank-transfer\n\
             future-kind x y z\n",
        );
        assert!(lock.workflows.contains("bank-transfer"));
        assert!(lock.any_workflow_steps.contains("debit-bank-a"));
        let pair = |n: &str| ("bank-transfer".to_owned(), n.to_owned());
        assert!(lock.steps.contains(&pair("double")));
        assert!(lock.sleeps.contains(&pair("settle")));
        assert!(lock.waits.contains(&pair("wait-approval")));
    }
}
