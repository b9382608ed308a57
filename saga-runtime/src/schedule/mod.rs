//! Schedules: a workflow started at every tick of a cron expression (in a
//! time zone) or of a fixed interval, exactly once per tick.
//!
//! A [`Schedule`] is declared on the builder (`.schedule(..)`), or created
//! at run time through [`Schedules`] (`engine.schedules()`), its input
//! stored as JSON; [`ScheduleInfo`] is what the store keeps of one: its
//! definition, its next fire time, whether it is paused and its last tick.
//!
//! A tick's instance id is `InstanceId::tick(schedule, at, 0)`, so a tick
//! fired twice (two workers, a retry after a crash) starts one instance:
//! the engine's create is idempotent by id.

pub(crate) mod control;
mod cron;
pub(crate) mod firing;
pub(crate) mod state;
mod timing;

pub use control::{NEXT_FIRES_LISTED, ScheduleInfo, Schedules};

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::codec::Payload;
use crate::error::{Error, Result};
use crate::names::id::InstanceId;
use crate::time::duration::IntoDuration;
use crate::workflow::engine_core::Core;
use crate::workflow::{ErasedWorkflow, Workflow};

pub(crate) use timing::Timing;

/// The longest schedule name: its ticks' ids (`name.YYYYMMDDThhmmssZ~m..`)
/// then stay readable within the 100 characters of an id.
pub const MAX_SCHEDULE_NAME: usize = 64;

/// What to do with ticks that passed while no worker fired them (the
/// service was down): see [`Schedule::catch_up`]. A paused schedule never
/// catches up the ticks it missed while paused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum CatchUp {
    /// Fire no tick that is more than a minute late: only a tick fired on
    /// time runs.
    Skip,
    /// Fire the latest tick that passed, however late, and none before it
    /// (the default).
    #[default]
    Latest,
    /// Fire every tick that passed, oldest first, but at most this many:
    /// the latest ones.
    All {
        /// The most ticks one catch-up fires (at least 1).
        at_most: u32,
    },
}

/// What a tick does when the previous tick's instance is still running:
/// see [`Schedule::overlap`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Overlap {
    /// Start it anyway: each tick is an instance of its own (the default).
    #[default]
    Allow,
    /// Skip the tick (it starts nothing, and is not fired later). A
    /// catch-up then fires at most one tick, the latest.
    Skip,
    /// Keep the tick, and start it as soon as the previous tick's
    /// instance ends; while one is kept, further ticks that fall due are
    /// skipped. The kept tick is stored (a restart keeps it), and its
    /// instance is named by its own time. A catch-up fires (or keeps) at
    /// most one tick, the latest.
    QueueOne,
}

/// A tick of a schedule, given to the closure that makes the workflow's
/// input (see [`Schedule::start`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tick {
    schedule: Arc<str>,
    at: i64,
    manual: u32,
}

impl Tick {
    /// The schedule's name.
    pub fn schedule(&self) -> &str {
        &self.schedule
    }

    /// The tick's time: when the schedule said it fires (not when a
    /// worker got to it), or when it was triggered by hand.
    pub fn at(&self) -> SystemTime {
        system_time(self.at)
    }

    /// The tick's time in seconds since the Unix epoch (UTC).
    pub fn unix_seconds(&self) -> i64 {
        self.at
    }

    /// 0 for a tick of the schedule; n ≥ 1 for the n-th run started by
    /// [`trigger`](crate::schedule::Schedules::trigger) in that second.
    pub fn manual(&self) -> u32 {
        self.manual
    }

    /// The id of the instance this tick starts:
    /// `nightly.20301012T020000Z`, `nightly.20301012T021503Z~m1` for a
    /// manual one.
    pub fn instance_id(&self) -> InstanceId {
        InstanceId::tick(&self.schedule, self.at, self.manual)
    }
}

/// A schedule declared at build time: a name, when it fires, its policies,
/// and the workflow it starts. Give it to
/// [`EngineBuilder::schedule`](crate::EngineBuilder::schedule).
///
/// Mistakes (an invalid cron expression, an unknown time zone, a zero
/// interval, no `start`) are kept here and answered by the builder's
/// `open`, `temporary` or `connect`, as typed errors, before anything is
/// stored.
///
/// ```
/// # use saga_runtime::prelude::*;
/// # use saga_runtime::schedule::{CatchUp, Schedule, Tick};
/// let settle = workflow_fn("settle", |_ctx: WorkflowContext, day: i64| async move {
///     Ok::<_, WorkflowError>(day)
/// });
/// let nightly = Schedule::cron("nightly-settlement", "0 2 * * *")
///     .time_zone("Europe/Paris")
///     .catch_up(CatchUp::Latest)
///     .start(settle, |tick: Tick| tick.unix_seconds());
/// let reminders = Schedule::every("reminders", "15 minutes")
///     .offset("5 minutes")
///     .start(settle, |tick: Tick| tick.unix_seconds());
/// # let _ = (nightly, reminders);
/// ```
#[must_use = "a schedule does nothing until it is given to EngineBuilder::schedule"]
pub struct Schedule {
    name: String,
    timing: TimingSpec,
    catch_up: CatchUp,
    overlap: Overlap,
    /// 0: none.
    jitter_ms: u64,
    target: Option<Arc<dyn TickTarget>>,
    /// The first mistake made declaring it, answered at build time.
    problem: Option<Error>,
}

impl Schedule {
    /// A schedule that fires at the matches of a five-field cron
    /// expression (`minute hour day-of-month month day-of-week`, with
    /// `*`, lists, ranges, steps and the names `JAN`-`DEC`, `SUN`-`SAT`),
    /// read in UTC unless [`time_zone`](Schedule::time_zone) says
    /// otherwise. Daylight saving: a local time that does not exist fires
    /// at the first instant after the gap; one that happens twice fires
    /// at its first occurrence.
    pub fn cron(name: &str, expression: &str) -> Schedule {
        let mut schedule = Schedule::named(
            name,
            TimingSpec::Cron {
                expression: expression.to_owned(),
                zone: "UTC".to_owned(),
            },
        );
        if let Err(reason) = cron::Cron::parse(expression) {
            schedule.note(Error::InvalidCron {
                schedule: name.to_owned(),
                expression: expression.to_owned(),
                reason,
            });
        }
        schedule
    }

    /// A schedule that fires every `interval` (a whole number of seconds,
    /// at least one: `"15 minutes"`, `Duration::from_secs(3600)`), counted
    /// from the Unix epoch in UTC: every 15 minutes is at :00, :15, :30
    /// and :45 of each hour. [`offset`](Schedule::offset) shifts it.
    pub fn every(name: &str, interval: impl IntoDuration + std::fmt::Debug) -> Schedule {
        let mut schedule = Schedule::named(
            name,
            TimingSpec::Every {
                every: 1,
                offset: 0,
            },
        );
        match whole_seconds(name, interval, false) {
            Ok(every) => schedule.timing = TimingSpec::Every { every, offset: 0 },
            Err(e) => schedule.note(e),
        }
        schedule
    }

    /// Shifts an interval schedule's ticks by `offset` (a whole number of
    /// seconds): every hour with an offset of 5 minutes fires at :05.
    pub fn offset(mut self, offset: impl IntoDuration + std::fmt::Debug) -> Schedule {
        let by = whole_seconds(&self.name, offset, true);
        match (&mut self.timing, by) {
            (TimingSpec::Every { every, offset }, Ok(by)) => *offset = by.rem_euclid(*every),
            (TimingSpec::Every { .. }, Err(e)) => self.note(e),
            (TimingSpec::Cron { .. }, _) => self.invalid(
                "an offset shifts an interval schedule (Schedule::every); write a cron expression's times into the expression itself",
            ),
        }
        self
    }

    /// The time zone a cron expression reads in: an IANA name such as
    /// `"Europe/Paris"` (default `"UTC"`).
    pub fn time_zone(mut self, zone: &str) -> Schedule {
        match &mut self.timing {
            TimingSpec::Cron { zone: at, .. } => {
                if jiff::tz::TimeZone::get(zone).is_err() {
                    self.note(Error::UnknownTimeZone {
                        schedule: self.name.clone(),
                        zone: zone.to_owned(),
                    });
                } else {
                    zone.clone_into(at);
                }
            }
            TimingSpec::Every { .. } => self.invalid(
                "an interval schedule counts in UTC and takes no time zone; use Schedule::cron for times of day in a zone",
            ),
        }
        self
    }

    /// What to do with ticks missed while no worker fired them (default
    /// [`CatchUp::Latest`]).
    pub fn catch_up(mut self, catch_up: CatchUp) -> Schedule {
        if catch_up == (CatchUp::All { at_most: 0 }) {
            self.invalid("CatchUp::All { at_most: 0 } fires nothing: use CatchUp::Skip, or at_most of 1 or more");
        }
        self.catch_up = catch_up;
        self
    }

    /// What a tick does while the previous tick's instance still runs
    /// (default [`Overlap::Allow`]).
    pub fn overlap(mut self, overlap: Overlap) -> Schedule {
        self.overlap = overlap;
        self
    }

    /// Spreads the ticks out: each fires at its time plus a delay in
    /// `[0, jitter)`, derived from the schedule's name and the tick's
    /// time by a hash, so every worker and every run fires it at the same
    /// moment. The tick keeps its time: its instance id and
    /// [`Tick::at`] are the tick's, not the moment it fired.
    ///
    /// `jitter` is a whole number of milliseconds, at least one, and for
    /// an interval schedule shorter than the interval; else the builder's
    /// `open` is [`Error::InvalidJitter`]. A cron schedule's jitter may
    /// outlast the gap to its next tick: ticks still fire in order, each
    /// once the one before it fired.
    pub fn jitter(mut self, jitter: impl IntoDuration + std::fmt::Debug) -> Schedule {
        match jitter_millis(&self.name, jitter, &self.timing) {
            Ok(ms) => self.jitter_ms = ms,
            Err(e) => self.note(e),
        }
        self
    }

    /// The workflow each tick starts, and its input, made from the tick
    /// by `input` (which must not panic; one that does fires nothing, and
    /// the engine logs it). The builder registers the workflow too.
    pub fn start<W, F>(mut self, workflow: W, input: F) -> Schedule
    where
        W: Workflow,
        F: Fn(Tick) -> W::Input + Send + Sync + 'static,
    {
        self.target = Some(Arc::new(Target {
            workflow: Arc::new(workflow),
            input,
        }));
        self
    }

    /// The workflow each tick starts, and its input: the same for every
    /// tick, stored as JSON. This is how a run-time schedule
    /// ([`Schedules::create`](crate::schedule::Schedules::create)) says what it
    /// starts, since a closure cannot be stored; `input` is checked
    /// against the workflow's input type here, and encoded (and decoded
    /// back) at once: one that cannot be is the error of `create` (or of
    /// the builder's `open`). A builder's schedule may use it too.
    pub fn start_with_input<W: Workflow>(mut self, workflow: W, input: &W::Input) -> Schedule {
        let what = format!("the input of schedule {:?}", self.name);
        let json = match Payload::encode(input) {
            Ok(Payload::Json(json)) => json,
            Ok(_) => unreachable!("Payload::encode makes JSON"),
            Err(detail) => {
                self.note(Error::Encode { what, detail });
                return self;
            }
        };
        // An input that does not read back (a NaN written as `null`)
        // would fail every tick's instance at once.
        if let Err(detail) = serde_json::from_slice::<W::Input>(&json) {
            let detail = format!("it does not decode back: {detail}");
            self.note(Error::Encode { what, detail });
            return self;
        }
        self.target = Some(Arc::new(JsonTarget {
            workflow: Arc::new(workflow),
            input: json,
        }));
        self
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn named(name: &str, timing: TimingSpec) -> Schedule {
        let mut schedule = Schedule {
            name: name.to_owned(),
            timing,
            catch_up: CatchUp::default(),
            overlap: Overlap::default(),
            jitter_ms: 0,
            target: None,
            problem: None,
        };
        if let Err(reason) = check_name(name) {
            schedule.invalid(&reason);
        }
        schedule
    }

    /// Keeps the first mistake: the one a reader of the chain sees first.
    fn note(&mut self, problem: Error) {
        self.problem.get_or_insert(problem);
    }

    fn invalid(&mut self, reason: &str) {
        let schedule = self.name.clone();
        self.note(Error::InvalidSchedule {
            schedule,
            reason: reason.to_owned(),
        });
    }

    /// The workflow it starts, for the builder to register.
    pub(crate) fn workflow(&self) -> Option<Arc<dyn ErasedWorkflow>> {
        self.target.as_ref().map(|t| t.workflow())
    }
}

impl Schedule {
    /// The schedule checked, declared at `now`: the first mistake is the
    /// answer. A run-time one (`run_time`) keeps its input in its
    /// definition, and so needs one that is stored.
    pub(crate) fn checked(self, now: SystemTime, run_time: bool) -> Result<Declaration> {
        if let Some(problem) = self.problem {
            return Err(problem);
        }
        let invalid = |reason: &str| Error::InvalidSchedule {
            schedule: self.name.clone(),
            reason: reason.to_owned(),
        };
        let Some(target) = self.target else {
            return Err(invalid(if run_time {
                "it starts nothing: add .start_with_input(workflow, &input)"
            } else {
                "it starts nothing: add .start(workflow, |tick| input)"
            }));
        };
        let input = target.stored_input().map(<[u8]>::to_vec);
        if run_time && input.is_none() {
            return Err(invalid(
                "a run-time schedule stores its input, and a closure cannot be stored: use .start_with_input(workflow, &input)",
            ));
        }
        let timing = self
            .timing
            .timing()
            .ok_or_else(|| invalid("its timing does not parse"))?;
        Ok(Declaration {
            name: Arc::from(self.name.as_str()),
            definition: Definition {
                timing: self.timing,
                catch_up: self.catch_up,
                overlap: self.overlap,
                workflow: target.workflow_name().to_owned(),
                jitter_ms: self.jitter_ms,
                input: input.filter(|_| run_time),
            },
            timing,
            target,
            declared_at: unix_seconds(now),
            registered: tokio::sync::OnceCell::new(),
            shadowed: Default::default(),
        })
    }
}

impl std::fmt::Debug for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schedule")
            .field("name", &self.name)
            .field("timing", &self.timing)
            .field("catch_up", &self.catch_up)
            .field("overlap", &self.overlap)
            .field("jitter_ms", &self.jitter_ms)
            .finish_non_exhaustive()
    }
}

/// A schedule's name is the base of its ticks' ids: a chosen id's
/// characters, and short.
fn check_name(name: &str) -> std::result::Result<(), String> {
    if name.len() > MAX_SCHEDULE_NAME {
        return Err(format!(
            "the name is longer than {MAX_SCHEDULE_NAME} characters; use a shorter one, e.g. \"nightly-settlement\""
        ));
    }
    InstanceId::new(name).map(drop).map_err(|_| {
        "a schedule name is 1-64 characters of [A-Za-z0-9_-], not starting with '-', e.g. \"nightly-settlement\"".to_owned()
    })
}

/// `interval` in whole seconds, or the error that quotes it.
fn whole_seconds(
    schedule: &str,
    interval: impl IntoDuration + std::fmt::Debug,
    zero_ok: bool,
) -> Result<i64> {
    let shown = shown(&interval);
    let invalid = |reason: String| Error::InvalidInterval {
        schedule: schedule.to_owned(),
        interval: shown.clone(),
        reason,
    };
    let duration = interval
        .into_duration()
        .map_err(|e| invalid(e.to_string()))?;
    if duration.is_zero() && !zero_ok {
        return Err(invalid("it is zero".into()));
    }
    if duration.subsec_nanos() != 0 {
        return Err(invalid(
            "it is not a whole number of seconds (ticks are named by the second)".into(),
        ));
    }
    i64::try_from(duration.as_secs()).map_err(|_| invalid("it is too long".into()))
}

/// `jitter` in whole milliseconds, or the error that quotes it: zero, a
/// fraction of a millisecond, and (for an interval schedule) the interval
/// or more are refused.
fn jitter_millis(
    schedule: &str,
    jitter: impl IntoDuration + std::fmt::Debug,
    timing: &TimingSpec,
) -> Result<u64> {
    let shown = shown(&jitter);
    let invalid = |reason: String| Error::InvalidJitter {
        schedule: schedule.to_owned(),
        jitter: shown.clone(),
        reason,
    };
    let duration = jitter.into_duration().map_err(|e| invalid(e.to_string()))?;
    if duration.is_zero() {
        return Err(invalid("it is zero (leave .jitter out for none)".into()));
    }
    if duration.subsec_nanos() % 1_000_000 != 0 {
        return Err(invalid("it is not a whole number of milliseconds".into()));
    }
    let ms = u64::try_from(duration.as_millis()).map_err(|_| invalid("it is too long".into()))?;
    match timing {
        TimingSpec::Every { every, .. } if i128::from(ms) >= i128::from(*every) * 1000 => {
            Err(invalid(format!(
                "it is not shorter than the interval ({every} s), so a tick could fire after the next one's time"
            )))
        }
        _ => Ok(ms),
    }
}

/// A duration as the user wrote it, for an error to quote.
fn shown(duration: &impl std::fmt::Debug) -> String {
    format!("{duration:?}").trim_matches('"').to_owned()
}

/// When a schedule fires, as declared and stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum TimingSpec {
    /// A cron expression, in the time zone named.
    Cron { expression: String, zone: String },
    /// Every `every` seconds from the epoch, shifted by `offset`.
    Every { every: i64, offset: i64 },
}

impl TimingSpec {
    /// The tick times it makes; `None` for a spec this release cannot
    /// read (stored by another release).
    pub(crate) fn timing(&self) -> Option<Timing> {
        match self {
            TimingSpec::Cron { expression, zone } => Some(Timing::Cron {
                cron: cron::Cron::parse(expression).ok()?,
                zone: jiff::tz::TimeZone::get(zone).ok()?,
            }),
            TimingSpec::Every { every, offset } if *every > 0 => Some(Timing::Every {
                every: *every,
                offset: *offset,
            }),
            TimingSpec::Every { .. } => None,
        }
    }
}

impl std::fmt::Display for TimingSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TimingSpec::Cron { expression, zone } => write!(f, "cron {expression:?} in {zone}"),
            TimingSpec::Every { every, offset: 0 } => write!(f, "every {every} s"),
            TimingSpec::Every { every, offset } => write!(f, "every {every} s, offset {offset} s"),
        }
    }
}

/// What a schedule is, as the store keeps it: the last engine to register
/// the schedule wrote it, and every worker fires by it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Definition {
    pub(crate) timing: TimingSpec,
    pub(crate) catch_up: CatchUp,
    pub(crate) overlap: Overlap,
    pub(crate) workflow: String,
    /// The most a tick fires after its time, milliseconds (0: none). Not
    /// in the first layout of the stored state (`state::Extension`).
    #[serde(skip)]
    pub(crate) jitter_ms: u64,
    /// A run-time schedule's input, JSON (`None`: declared at build time).
    /// Only in the run-time layout of the stored state (`state::RunTime`).
    #[serde(skip)]
    pub(crate) input: Option<Vec<u8>>,
}

impl Definition {
    /// When schedule `name`'s tick at `at` (seconds) fires, milliseconds
    /// since the epoch: its time plus its jitter's delay.
    pub(crate) fn fires_at(&self, name: &str, at: i64) -> i64 {
        let delay = timing::jitter_delay(name, at, self.jitter_ms);
        at.saturating_mul(1000)
            .saturating_add(i64::try_from(delay).unwrap_or(i64::MAX))
    }
}

/// The workflow a schedule starts and how it makes the input, with the
/// types erased.
pub(crate) trait TickTarget: Send + Sync + 'static {
    fn workflow(&self) -> Arc<dyn ErasedWorkflow>;
    fn workflow_name(&self) -> &'static str;
    /// The encoded input for `tick`; a panic of the user's closure is an
    /// error.
    fn input(&self, core: &Core, tick: &Tick) -> Result<Payload>;
    /// The input as stored, JSON, when it is the same for every tick.
    fn stored_input(&self) -> Option<&[u8]> {
        None
    }
}

/// A workflow and its input, JSON, the same for every tick: what a
/// run-time schedule starts.
pub(crate) struct JsonTarget {
    workflow: Arc<dyn ErasedWorkflow>,
    input: Vec<u8>,
}

impl JsonTarget {
    /// What a stored run-time schedule starts: `workflow` (registered
    /// here) with `input`.
    pub(crate) fn new(workflow: Arc<dyn ErasedWorkflow>, input: Vec<u8>) -> JsonTarget {
        JsonTarget { workflow, input }
    }
}

impl TickTarget for JsonTarget {
    fn workflow(&self) -> Arc<dyn ErasedWorkflow> {
        self.workflow.clone()
    }

    fn workflow_name(&self) -> &'static str {
        self.workflow.workflow_name()
    }

    fn input(&self, _core: &Core, _tick: &Tick) -> Result<Payload> {
        Ok(Payload::Json(self.input.clone()))
    }

    fn stored_input(&self) -> Option<&[u8]> {
        Some(&self.input)
    }
}

struct Target<W, F> {
    workflow: Arc<W>,
    input: F,
}

impl<W, F> TickTarget for Target<W, F>
where
    W: Workflow,
    F: Fn(Tick) -> W::Input + Send + Sync + 'static,
{
    fn workflow(&self) -> Arc<dyn ErasedWorkflow> {
        self.workflow.clone()
    }

    fn workflow_name(&self) -> &'static str {
        self.workflow.name()
    }

    fn input(&self, core: &Core, tick: &Tick) -> Result<Payload> {
        let what = || format!("input of {}", tick.instance_id());
        let input = crate::panic::catch(|| (self.input)(tick.clone())).map_err(|panic| {
            Error::InvalidArgument(format!(
                "the input closure of schedule {:?} panicked: {panic}",
                tick.schedule()
            ))
        })?;
        core.encode_readable(&input, what)
    }
}

/// A schedule as an engine runs it: checked, with its tick times.
pub(crate) struct Declaration {
    pub(crate) name: Arc<str>,
    pub(crate) definition: Definition,
    pub(crate) timing: Timing,
    pub(crate) target: Arc<dyn TickTarget>,
    /// When the engine was built (seconds since the epoch): a schedule new
    /// to the store fires first at its first tick after then.
    pub(crate) declared_at: i64,
    /// Set once this engine stored its definition (see `firing::register`);
    /// set from the start for a run-time schedule, whose definition is
    /// the store's.
    pub(crate) registered: tokio::sync::OnceCell<()>,
    /// Set while a run-time schedule of the name is stored, which this
    /// declaration never overwrites: once that one is deleted, the
    /// declaration stores itself (see `firing::fire_due`).
    pub(crate) shadowed: std::sync::atomic::AtomicBool,
}

impl Declaration {
    /// A run-time schedule `name`, stored as `definition`, as this engine
    /// runs it: `None` unless its workflow is registered here (and its
    /// timing parses).
    pub(crate) fn run_time(
        runner: &crate::run::runner::Runner,
        name: &str,
        definition: &Definition,
    ) -> Option<Declaration> {
        let input = definition.input.clone()?;
        let workflow = runner.workflow(&definition.workflow)?;
        Some(Declaration {
            name: Arc::from(name),
            definition: definition.clone(),
            timing: definition.timing.timing()?,
            target: Arc::new(JsonTarget::new(workflow, input)),
            declared_at: 0,
            registered: tokio::sync::OnceCell::new_with(Some(())),
            shadowed: Default::default(),
        })
    }

    /// Whether it is a run-time schedule (its definition the store's).
    pub(crate) fn is_run_time(&self) -> bool {
        self.definition.input.is_some()
    }

    /// The tick at `at` (manual run `manual`).
    pub(crate) fn tick(&self, at: i64, manual: u32) -> Tick {
        Tick {
            schedule: self.name.clone(),
            at,
            manual,
        }
    }
}

/// The schedules an engine declares, and a bell its control calls ring so
/// the firing tasks look again at once.
#[derive(Default)]
pub(crate) struct Declared {
    pub(crate) schedules: Vec<Arc<Declaration>>,
    pub(crate) changed: tokio::sync::Notify,
}

impl Declared {
    /// Checks the builder's schedules, declared at `now`: the first
    /// mistake is the answer, before the engine opens its store.
    pub(crate) fn check(schedules: Vec<Schedule>, now: SystemTime) -> Result<Declared> {
        let mut declared = Declared::default();
        for schedule in schedules {
            if declared.find(&schedule.name).is_some() {
                return Err(Error::InvalidSchedule {
                    schedule: schedule.name,
                    reason:
                        "it is declared twice in one builder; give each schedule a name of its own"
                            .to_owned(),
                });
            }
            let declaration = schedule.checked(now, false)?;
            declared.schedules.push(Arc::new(declaration));
        }
        Ok(declared)
    }

    /// The declaration of schedule `name`, if this engine declares it.
    pub(crate) fn find(&self, name: &str) -> Option<&Arc<Declaration>> {
        self.schedules.iter().find(|d| &*d.name == name)
    }
}

/// The time `at` seconds after the epoch.
pub(crate) fn system_time(at: i64) -> SystemTime {
    match u64::try_from(at) {
        Ok(secs) => UNIX_EPOCH + Duration::from_secs(secs),
        Err(_) => UNIX_EPOCH - Duration::from_secs(at.unsigned_abs()),
    }
}

/// Milliseconds since the epoch of `time` (0 before it).
pub(crate) fn unix_millis(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Seconds since the epoch of `time` (0 before it).
pub(crate) fn unix_seconds(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(schedule: Schedule) -> String {
        schedule.problem.map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn mistakes_quote_the_text_and_show_an_example() {
        let cron = problem(Schedule::cron("nightly", "0 25 * * *"));
        assert!(
            cron.contains("\"0 25 * * *\"") && cron.contains("e.g. \"0 2 * * *\""),
            "{cron}"
        );
        let zone = problem(Schedule::cron("nightly", "0 2 * * *").time_zone("Mars/Olympus"));
        assert!(
            zone.contains("\"Mars/Olympus\"") && zone.contains("Europe/Paris"),
            "{zone}"
        );
        let zero = problem(Schedule::every("r", "0 minutes"));
        assert!(
            zero.contains("\"0") && zero.contains("e.g. \"15 minutes\""),
            "{zero}"
        );
        let bad = problem(Schedule::every("r", "15 fortnights"));
        assert!(bad.contains("\"15 fortnights\""), "{bad}");
        let fraction = problem(Schedule::every("r", Duration::from_millis(1500)));
        assert!(fraction.contains("whole number of seconds"), "{fraction}");
        let name = problem(Schedule::every("a.b", "1 hour"));
        assert!(name.contains("[A-Za-z0-9_-]"), "{name}");
        let all = problem(Schedule::every("r", "1 hour").catch_up(CatchUp::All { at_most: 0 }));
        assert!(all.contains("at_most"), "{all}");
        let jitter = problem(Schedule::every("r", "1 hour").jitter("1 hour"));
        assert!(
            jitter.contains("\"1 hour\"") && jitter.contains("shorter than the interval (3600 s)"),
            "{jitter}"
        );
        let zero = problem(Schedule::every("r", "1 hour").jitter("0 s"));
        assert!(
            zero.contains("zero") && zero.contains("e.g. \"30 seconds\""),
            "{zero}"
        );
        let fraction = problem(Schedule::every("r", "1 hour").jitter(Duration::from_micros(1500)));
        assert!(
            fraction.contains("whole number of milliseconds"),
            "{fraction}"
        );
        assert!(
            Schedule::cron("n", "0 2 * * *")
                .jitter("3 days")
                .problem
                .is_none()
        );
        assert_eq!(
            Schedule::every("r", "1 hour")
                .jitter("59 minutes")
                .jitter_ms,
            59 * 60_000
        );
    }

    #[test]
    fn an_offset_is_kept_within_the_interval() {
        let schedule = Schedule::every("r", "1 hour").offset("65 minutes");
        assert_eq!(
            schedule.timing,
            TimingSpec::Every {
                every: 3600,
                offset: 300
            }
        );
        assert!(schedule.problem.is_none());
    }
}
