//! The commands and their arguments, as `clap` parses them.

use std::path::PathBuf;
use std::time::SystemTime;

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
    /// Print one instance's history: every event, in order, as stored.
    History(HistoryArgs),
    /// Send an event to an instance.
    SendEvent(SendEventArgs),
    /// Send an update to a running workflow and print its reply.
    Update(UpdateArgs),
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
    /// Before a deploy: in-flight instances that name what a saga.lock no
    /// longer has (--lock), or that the registered code no longer replays
    /// (--replay).
    Check(CheckArgs),
    /// Write instances' histories as JSON files, to replay against new
    /// code (saga_runtime::testing::replay).
    Export(ExportArgs),
    /// List the schedules (timing, workflow, next tick, paused, last
    /// tick), or pause, resume or trigger one.
    Schedules(SchedulesArgs),
    /// Each queue's instances: how many wait for a slot, how many started
    /// and have not ended.
    Queues(QueuesArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// Only instances in this status (queued, running, waiting, paused,
    /// rolling-back, blocked, complete, errored, terminated, compensated).
    #[arg(long, value_parser = parse_status)]
    pub(crate) status: Option<Status>,
    /// Only instances of this workflow.
    #[arg(long)]
    pub(crate) workflow: Option<String>,
    /// Only instances tagged KEY=VALUE (given again, every tag must match).
    #[arg(long = "tag", value_name = "KEY=VALUE", value_parser = parse_tag)]
    pub(crate) tags: Vec<(String, String)>,
    /// Only instances started at or after this time (RFC 3339, e.g.
    /// 2030-01-01T00:00:00Z).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) started_after: Option<SystemTime>,
    /// Only instances started before this time (RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) started_before: Option<SystemTime>,
    /// Only instances that ended at or after this time (RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) ended_after: Option<SystemTime>,
    /// Only instances that ended before this time (RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) ended_before: Option<SystemTime>,
    /// Only instances started by this instance (child workflows).
    #[arg(long, value_name = "ID")]
    pub(crate) parent: Option<String>,
    /// Only instances whose rollback gave up.
    #[arg(long)]
    pub(crate) rollback_failed: bool,
    /// Only instances a compensation of which failed at least once.
    #[arg(long)]
    pub(crate) failed_compensation: bool,
    /// Only instances whose id begins with this.
    #[arg(long, value_name = "PREFIX")]
    pub(crate) id_prefix: Option<String>,
    /// One page of at most this many instances, in --order, and the
    /// cursor of the next page. Without --limit, --after or --order: every
    /// instance, by start time then id (the order of pages).
    #[arg(long)]
    pub(crate) limit: Option<usize>,
    /// The page after this cursor (printed by the page before).
    #[arg(long, value_name = "CURSOR")]
    pub(crate) after: Option<saga_runtime::inspect::Cursor>,
    /// The order of pages: started (start time, then id) or id.
    #[arg(long, value_enum, value_name = "ORDER")]
    pub(crate) order: Option<ListOrder>,
    /// Print JSON (schema 1) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The order of `saga list` pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ListOrder {
    /// By start time, then id.
    Started,
    /// By id.
    Id,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ShowArgs {
    /// The instance id.
    pub(crate) id: String,
    /// Open encrypted values with these keys: `<key id> <64 hex digits>`
    /// lines, as `Keyring::from_file` reads them. Without it, a value the
    /// engine cannot open is shown as `<encrypted: key K>`.
    #[arg(long, value_name = "FILE")]
    pub(crate) key_file: Option<PathBuf>,
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
pub(crate) struct UpdateArgs {
    /// The instance id.
    pub(crate) id: String,
    /// The update's name, as its workflow declares it.
    pub(crate) name: String,
    /// The request, as JSON.
    #[arg(value_name = "JSON", value_parser = parse_json)]
    pub(crate) request: serde_json::Value,
    /// The update's id: a call again with the same id is handled once
    /// and prints the same reply (default: a new id, printed on a timeout).
    #[arg(long = "id", value_name = "UPDATE_ID")]
    pub(crate) update_id: Option<String>,
    /// How many seconds to wait for the reply.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub(crate) timeout: u64,
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
pub(crate) struct HistoryArgs {
    /// The instance.
    pub(crate) id: String,
    /// An earlier run of an instance that continued as new (0 is the
    /// first); without it, the current run.
    #[arg(long)]
    pub(crate) run: Option<u32>,
    /// Print one JSON object (schema 1, as `watch --json`) per event.
    #[arg(long)]
    pub(crate) json: bool,
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
#[command(group(clap::ArgGroup::new("checks").args(["lock", "replay"]).required(true).multiple(true)))]
pub(crate) struct CheckArgs {
    /// The saga.lock of the release about to be deployed.
    #[arg(long, value_name = "FILE")]
    pub(crate) lock: Option<PathBuf>,
    /// Replay every in-flight instance against the workflows this engine
    /// registers (run it in the application, through saga_cli::run),
    /// with no side effects: those that would be parked Blocked.
    #[arg(long)]
    pub(crate) replay: bool,
    /// With --replay: replay the histories in this directory (written by
    /// `saga export --all`) instead of the store's in-flight instances.
    #[arg(long, value_name = "DIR", requires = "replay")]
    pub(crate) from: Option<PathBuf>,
    /// Print JSON (schema 1) instead of a list.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ExportArgs {
    /// Every instance (those in --status, of --workflow), one file
    /// ID.json each, into the directory given instead of an id.
    #[arg(long)]
    pub(crate) all: bool,
    /// With --all: only instances in this status (given again, in any of
    /// them).
    #[arg(long, value_parser = parse_status, requires = "all")]
    pub(crate) status: Vec<Status>,
    /// With --all: only instances of this workflow.
    #[arg(long, requires = "all")]
    pub(crate) workflow: Option<String>,
    /// The instance, whose history is printed; with --all, the directory
    /// to write the histories to.
    #[arg(value_name = "ID|DIR")]
    pub(crate) target: String,
}

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct SchedulesArgs {
    /// Without one, the schedules are listed.
    #[command(subcommand)]
    pub(crate) action: Option<ScheduleAction>,
    /// Print JSON (schema 1) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// What `saga schedules` does to one schedule.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ScheduleAction {
    /// Pause a schedule for every worker: it fires no tick until resumed.
    Pause(ScheduleName),
    /// Resume a paused schedule: its next tick is the first after now.
    Resume(ScheduleName),
    /// Start an extra tick of a schedule now (on an engine that declares
    /// it: the running service, through --url).
    Trigger(ScheduleName),
}

#[derive(Debug, clap::Args)]
pub(crate) struct ScheduleName {
    /// The schedule's name.
    pub(crate) name: String,
}

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct QueuesArgs {
    /// Without one, each queue's depth and limits are listed.
    #[command(subcommand)]
    pub(crate) action: Option<QueueAction>,
    /// Print JSON (schema 1) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// What `saga queues` changes.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum QueueAction {
    /// Change a queue's limits for every worker on the store (PostgreSQL):
    /// each takes by them from its next take. Run it on a worker, through
    /// `saga --url` with the admin token; then deploy the same limits in
    /// the code, since a worker that connects declaring others is refused.
    Set(QueueSet),
}

#[derive(Debug, clap::Args)]
pub(crate) struct QueueSet {
    /// The queue's name.
    pub(crate) name: String,
    /// At most this many of its instances hold a slot at once.
    #[arg(long)]
    pub(crate) concurrency: Option<u32>,
    /// At most this many with one key at once.
    #[arg(long)]
    pub(crate) per_key: Option<u32>,
    /// At most this many start in any window of --per.
    #[arg(long, requires = "per")]
    pub(crate) rate: Option<u32>,
    /// The rate's window, e.g. "1 second", "1 minute".
    #[arg(long, requires = "rate", value_parser = parse_window)]
    pub(crate) per: Option<std::time::Duration>,
}

fn parse_window(text: &str) -> Result<std::time::Duration, String> {
    use saga_runtime::time::IntoDuration;
    text.into_duration().map_err(|e| e.to_string())
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

/// `customer=42`.
fn parse_tag(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| "expected KEY=VALUE, e.g. customer=42".to_owned())
}

/// An RFC 3339 time: `2030-01-01T00:00:00Z`, `2030-01-01T09:00:00+09:00`.
fn parse_time(text: &str) -> Result<SystemTime, String> {
    let at = text
        .parse::<jiff::Timestamp>()
        .map_err(|e| format!("not an RFC 3339 time such as 2030-01-01T00:00:00Z: {e}"))?;
    let seconds = u64::try_from(at.as_second())
        .map_err(|_| "a time after 1970, such as 2030-01-01T00:00:00Z".to_owned())?;
    let nanos = u32::try_from(at.subsec_nanosecond()).unwrap_or(0);
    Ok(SystemTime::UNIX_EPOCH + std::time::Duration::new(seconds, nanos))
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

    #[test]
    fn tags_and_times_parse() {
        assert_eq!(
            parse_tag("customer=42=x"),
            Ok(("customer".into(), "42=x".into()))
        );
        assert!(parse_tag("customer").is_err());
        let at = parse_time("1970-01-01T00:00:01.5Z").unwrap();
        assert_eq!(
            at,
            SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1500)
        );
        assert!(parse_time("yesterday").is_err());
    }
}
