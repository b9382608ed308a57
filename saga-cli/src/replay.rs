//! `saga check --replay`: before a deploy, every in-flight instance of the
//! store replayed against the workflows the engine registers (the code of
//! the release about to be deployed, when the application runs the
//! command), with no side effects: those it would park `Blocked`.
//!
//! Each history is read as `saga export` reads it and replayed in a store
//! of its own (`saga_runtime::testing::Replayer`): nothing of the store's
//! instances changes, nothing runs for real.

use std::io::Write;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::CliError;
use crate::output::{Paint, Style, escape};
use saga_runtime::Engine;
use saga_runtime::inspect::ListFilter;
use saga_runtime::testing::{History, ReplayError, Replayer};

/// What the replay of one instance found.
enum Found {
    Fits,
    /// A live run would park it `Blocked`: what history recorded and what
    /// the code calls now, when the calls diverged; the whole message.
    Blocks {
        calls: Option<(String, String)>,
        message: String,
    },
    /// Not replayed here: its workflow is not registered.
    NotRegistered,
    /// Not replayed: why.
    Unchecked(String),
}

/// An instance to replay: its id, workflow and status, and its history
/// (or why there is none).
struct Subject {
    id: String,
    workflow: String,
    status: String,
    history: Result<History, String>,
}

/// Replays the in-flight instances (or the histories in `from`); what it
/// found goes to `out` (or into `report`, for `--json`). The failure to
/// report when some instance would block or could not be replayed.
pub(crate) async fn check(
    engine: &Engine,
    from: Option<&Path>,
    as_json: bool,
    report: &mut Map<String, Value>,
    out: &mut impl Write,
    style: &Style,
) -> Result<Option<String>, CliError> {
    let replayer = Replayer::of(engine);
    let subjects = match from {
        Some(dir) => from_files(dir)?,
        None => in_flight(engine).await?,
    };
    let mut found = Vec::with_capacity(subjects.len());
    for subject in subjects {
        let outcome = match &subject.history {
            Ok(history) => replay_one(&replayer, history).await,
            Err(why) => Found::Unchecked(why.clone()),
        };
        found.push((subject, outcome));
    }
    let count = |wanted: fn(&Found) -> bool| found.iter().filter(|(_, f)| wanted(f)).count();
    let blocking = count(|f| matches!(f, Found::Blocks { .. }));
    let unregistered = count(|f| matches!(f, Found::NotRegistered));
    let unchecked = count(|f| matches!(f, Found::Unchecked(_)));
    let replayed = found.len() - unregistered - unchecked;
    // The standalone binary registers no workflow: it has no code to replay.
    if replayed == 0 && unregistered > 0 {
        return Err(CliError::usage(
            "check --replay replays with the workflows the engine registers, and this one registers none of the instances' workflows: run it inside the application (saga_cli::run) after registering them",
        ));
    }
    let what = if from.is_some() {
        "histories"
    } else {
        "in-flight instances"
    };
    if as_json {
        report.insert("replayed".into(), json!(replayed));
        report.insert("blocked".into(), json!(blocked_json(&found)));
        let not_registered: Vec<Value> = found
            .iter()
            .filter(|(_, f)| matches!(f, Found::NotRegistered))
            .map(|(s, _)| json!({"id": s.id, "workflow": s.workflow}))
            .collect();
        let not_replayed: Vec<Value> = found
            .iter()
            .filter_map(|(s, f)| match f {
                Found::Unchecked(why) => Some(json!({"id": s.id, "error": why})),
                _ => None,
            })
            .collect();
        report.insert("not_registered".into(), json!(not_registered));
        report.insert("not_replayed".into(), json!(not_replayed));
    } else {
        print_text(&found, what, replayed, (blocking, unchecked), out, style)?;
    }
    let mut failures = Vec::new();
    if blocking > 0 {
        failures.push(format!(
            "{blocking} {what} would be blocked by this code: deploying it would park them"
        ));
    }
    if unchecked > 0 {
        failures.push(format!("{unchecked} {what} could not be replayed"));
    }
    Ok((!failures.is_empty()).then(|| failures.join("; ")))
}

/// The store's unfinished instances, by id, with their histories.
async fn in_flight(engine: &Engine) -> Result<Vec<Subject>, CliError> {
    let all = engine.list_all(&ListFilter::all()).await?;
    let mut subjects = Vec::new();
    for info in all.instances.iter().filter(|i| !i.status.is_terminal()) {
        subjects.push(Subject {
            id: info.id.clone(),
            workflow: info.workflow.clone(),
            status: info.status.to_string(),
            history: History::export(engine, &info.id)
                .await
                .map_err(|e| e.to_string()),
        });
    }
    // A damaged index entry says nothing of its instance's workflow.
    subjects.extend(all.unreadable.iter().map(|u| Subject {
        id: u.id.clone(),
        workflow: String::new(),
        status: String::new(),
        history: Err(format!("its index entry does not read ({})", u.error)),
    }));
    subjects.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(subjects)
}

/// The histories `saga export --all` wrote into `dir` (its `.json` files),
/// by file name.
fn from_files(dir: &Path) -> Result<Vec<Subject>, CliError> {
    let cannot = |e: std::io::Error| {
        CliError::usage(format!("cannot read the directory {}: {e}", dir.display()))
    };
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .map_err(cannot)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    Ok(paths
        .into_iter()
        .map(|path| {
            let read = std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|text| History::from_json(&text).map_err(|e| e.to_string()));
            match read {
                Ok(history) => Subject {
                    id: history.instance().to_owned(),
                    workflow: history.workflow().to_owned(),
                    status: history.status().to_owned(),
                    history: Ok(history),
                },
                Err(why) => Subject {
                    id: path.display().to_string(),
                    workflow: String::new(),
                    status: String::new(),
                    history: Err(why),
                },
            }
        })
        .collect())
}

async fn replay_one(replayer: &Replayer, history: &History) -> Found {
    match replayer.replay_registered(history).await {
        Ok(_) => Found::Fits,
        Err(ReplayError::OtherWorkflow { .. }) => Found::NotRegistered,
        Err(e @ (ReplayError::Diverged { .. } | ReplayError::Panicked { .. })) => Found::Blocks {
            calls: e
                .non_determinism()
                .map(|(recorded, called)| (recorded.to_owned(), called.to_owned())),
            message: match &e {
                ReplayError::Diverged { failure, .. } => failure.to_string(),
                other => other.to_string(),
            },
        },
        Err(e) => Found::Unchecked(e.to_string()),
    }
}

fn blocked_json(found: &[(Subject, Found)]) -> Vec<Value> {
    found
        .iter()
        .filter_map(|(subject, f)| match f {
            Found::Blocks { calls, message } => Some(json!({
                "id": subject.id,
                "workflow": subject.workflow,
                "status": subject.status,
                "recorded": calls.as_ref().map(|(recorded, _)| recorded),
                "called": calls.as_ref().map(|(_, called)| called),
                "error": message,
            })),
            _ => None,
        })
        .collect()
}

fn print_text(
    found: &[(Subject, Found)],
    what: &str,
    replayed: usize,
    (blocking, unchecked): (usize, usize),
    out: &mut impl Write,
    style: &Style,
) -> Result<(), CliError> {
    // "ok" only when everything was replayed and fits: a history that
    // could not be read was not checked at all.
    if blocking == 0 && unchecked == 0 {
        writeln!(
            out,
            "{} all {replayed} {what} replay against the registered code",
            style.paint(Paint::Green, "ok:")
        )?;
    } else if blocking == 0 {
        writeln!(
            out,
            "{unchecked} of {} {what} could not be replayed (listed below, with why); the {replayed} replayed fit the registered code",
            replayed + unchecked
        )?;
    } else {
        writeln!(
            out,
            "{blocking} of {replayed} {what} would be blocked by the registered code:"
        )?;
    }
    for (subject, f) in found {
        let Found::Blocks { calls, message } = f else {
            continue;
        };
        let why = match calls {
            Some((recorded, called)) => {
                format!("history recorded {recorded}, the code now calls {called}")
            }
            None => message.clone(),
        };
        writeln!(
            out,
            "  {}  {}  {}  {}",
            escape(&subject.id),
            escape(&subject.workflow),
            escape(&subject.status),
            style.paint(Paint::Red, &escape(&why))
        )?;
    }
    for (subject, f) in found {
        match f {
            Found::NotRegistered => writeln!(
                out,
                "not replayed: {} runs workflow {}, which is not registered here",
                escape(&subject.id),
                escape(&format!("{:?}", subject.workflow))
            )?,
            Found::Unchecked(why) => writeln!(
                out,
                "{} {}: {}",
                style.paint(Paint::Red, "not replayed:"),
                escape(&subject.id),
                escape(why)
            )?,
            Found::Fits | Found::Blocks { .. } => {}
        }
    }
    Ok(())
}
