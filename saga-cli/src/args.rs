//! The commands and their arguments, as `clap` parses them.

use std::path::PathBuf;

use saga_runtime::Status;

use crate::output::ColorWhen;

/// The `saga` commands, to put in an application's own `clap` parser with
/// `#[command(flatten)]` and run with [`execute`](crate::execute).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// When to color the output: auto (a terminal, unless NO_COLOR is
    /// set), always, never.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t)]
    pub(crate) color: ColorWhen,
    #[command(subcommand)]
    pub(crate) command: Command,
}

impl Args {
    /// Whether the command is `watch`, which needs the engine that drives
    /// the instances (on sled, the application's own process).
    pub fn is_watch(&self) -> bool {
        matches!(self.command, Command::Watch(_))
    }
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// List instances: id, workflow, status, times, where each is, its error.
    List(ListArgs),
    /// Show one instance as a timeline: steps, sleeps, waits, rollback.
    Show(ShowArgs),
    /// Send an event to an instance.
    SendEvent(SendEventArgs),
    /// Pause an instance at its next step boundary.
    Pause(IdArg),
    /// Resume a paused instance.
    Resume(IdArg),
    /// End an instance, with its compensations when --rollback is given.
    Terminate(TerminateArgs),
    /// Run an instance again as a new generation (new idempotency keys).
    Restart(RestartArgs),
    /// Run again the compensations of an instance whose rollback gave up.
    RetryRollback(IdArg),
    /// Print lifecycle events as they become durable.
    Watch(WatchArgs),
    /// List in-flight instances that name what a saga.lock no longer has.
    Check(CheckArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// Only instances in this status (queued, running, waiting, paused,
    /// rolling-back, blocked, complete, errored, terminated).
    #[arg(long, value_parser = parse_status)]
    pub(crate) status: Option<Status>,
    /// Only instances of this workflow.
    #[arg(long)]
    pub(crate) workflow: Option<String>,
    /// At most this many instances (the most recently updated first).
    #[arg(long)]
    pub(crate) limit: Option<usize>,
    /// Print JSON (schema 1) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ShowArgs {
    /// The instance id.
    pub(crate) id: String,
    /// Print JSON (schema 1) instead of a timeline.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct SendEventArgs {
    /// The instance id.
    pub(crate) id: String,
    /// The event type its wait_for_event waits for.
    pub(crate) event_type: String,
    /// The payload, as JSON.
    #[arg(long = "json", value_name = "PAYLOAD", value_parser = parse_json)]
    pub(crate) payload: serde_json::Value,
}

#[derive(Debug, clap::Args)]
pub(crate) struct IdArg {
    /// The instance id.
    pub(crate) id: String,
}

#[derive(Debug, clap::Args)]
pub(crate) struct TerminateArgs {
    /// Run the compensations of the steps it started first.
    #[arg(long)]
    pub(crate) rollback: bool,
    /// The instance id.
    pub(crate) id: String,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RestartArgs {
    /// Keep the steps before the first call of this step.
    #[arg(long, value_name = "STEP")]
    pub(crate) from: Option<String>,
    /// The instance id.
    pub(crate) id: String,
}

#[derive(Debug, clap::Args)]
pub(crate) struct WatchArgs {
    /// Only this instance's events.
    pub(crate) id: Option<String>,
    /// Stop after this many events.
    #[arg(long)]
    pub(crate) count: Option<u64>,
    /// Print one JSON object (schema 1) per event.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    /// The saga.lock of the release about to be deployed.
    #[arg(long, value_name = "FILE")]
    pub(crate) lock: PathBuf,
    /// Print JSON (schema 1) instead of a list.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `rolling-back`, `rolling_back`, `"rolling back"` and `RollingBack`
/// are one status.
pub(crate) fn parse_status(text: &str) -> Result<Status, String> {
    let squash = |s: &str| {
        s.chars()
            .filter(|c| !matches!(c, '-' | '_' | ' '))
            .flat_map(char::to_lowercase)
            .collect::<String>()
    };
    let wanted = squash(text);
    Status::ALL
        .into_iter()
        .find(|status| squash(&status.to_string()) == wanted)
        .ok_or_else(|| {
            let known: Vec<String> = Status::ALL
                .iter()
                .map(|s| s.to_string().replace(' ', "-"))
                .collect();
            format!("unknown status; expected one of {}", known.join(", "))
        })
}

fn parse_json(text: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_parses_back_from_how_it_prints() {
        for status in Status::ALL {
            assert_eq!(parse_status(&status.to_string()), Ok(status));
            assert_eq!(
                parse_status(&status.to_string().replace(' ', "-")),
                Ok(status)
            );
        }
        assert_eq!(parse_status("RollingBack"), Ok(Status::RollingBack));
        assert!(parse_status("sleepy").unwrap_err().contains("rolling-back"));
    }
}
