//! `engine.schedules()`: create and delete run-time schedules; pause,
//! resume, list and trigger any schedule. Every
//! change is a swap of the stored state, so it holds for every worker and
//! across restarts.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[cfg(doc)]
use super::Tick;
use super::state::{self, Decision};
use super::{CatchUp, Declared, Overlap, Schedule, firing, system_time, unix_seconds};
use crate::error::{Error, Result};
use crate::instance::Instance;
use crate::model::status::Status;
use crate::names::id::InstanceId;
use crate::run::runner::Runner;

/// How many next fire times [`Schedules::list`] shows of each schedule.
pub const NEXT_FIRES_LISTED: usize = 3;

/// The schedules of an engine's store; made by
/// [`Engine::schedules`](crate::Engine::schedules).
///
/// ```
/// # use saga_runtime::prelude::*;
/// # use saga_runtime::schedule::{Schedule, Tick};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), saga_runtime::Error> {
/// let remind = workflow_fn("remind", |_ctx: WorkflowContext, at: i64| async move {
///     Ok::<_, WorkflowError>(at)
/// });
/// let engine = Engine::builder()
///     .schedule(Schedule::every("reminders", "15 minutes").start(remind, |t: Tick| t.unix_seconds()))
///     .temporary()?;
/// engine.schedules().pause("reminders").await?;
/// let listed = engine.schedules().list().await?;
/// assert!(listed[0].paused);
/// engine.schedules().resume("reminders").await?;
/// let run = engine.schedules().trigger("reminders").await?;
/// assert!(run.id().ends_with("~m1"));
/// # Ok(()) }
/// ```
pub struct Schedules<'a> {
    runner: &'a Arc<Runner>,
    declared: &'a Declared,
}

/// One schedule as [`Schedules::list`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// Its name.
    pub name: String,
    /// When it fires: `cron "0 2 * * *" in Europe/Paris`, `every 900 s`.
    pub timing: String,
    /// The workflow its ticks start.
    pub workflow: String,
    /// Its next fire times, [`NEXT_FIRES_LISTED`] of them, each a tick's
    /// time plus its jitter's delay (none while it is paused: resuming
    /// counts them from then).
    pub next_fires: Vec<SystemTime>,
    /// Whether it is paused.
    pub paused: bool,
    /// The time of the last tick it fired (manual runs aside).
    pub last_tick: Option<SystemTime>,
    /// The status of the last tick's instance: its outcome once it ended
    /// (`None`: no tick yet, or its instance is not there, e.g. removed
    /// by retention).
    pub last_outcome: Option<Status>,
    /// Its catch-up policy.
    pub catch_up: CatchUp,
    /// Its overlap policy.
    pub overlap: Overlap,
    /// The most a tick fires after its time ([`Schedule::jitter`]).
    pub jitter: Option<Duration>,
    /// The tick kept by [`Overlap::QueueOne`] to start once the previous
    /// tick's instance ends.
    pub kept_tick: Option<SystemTime>,
    /// Whether this engine declares it (and so fires it, and may trigger it).
    pub declared_here: bool,
    /// Whether it was created at run time ([`Schedules::create`]): any
    /// engine that registers its workflow fires it.
    pub run_time: bool,
}

impl<'a> Schedules<'a> {
    pub(crate) fn new(runner: &'a Arc<Runner>, declared: &'a Declared) -> Schedules<'a> {
        Schedules { runner, declared }
    }

    /// Pauses schedule `name` for every worker, durably: it fires no tick
    /// until [`resume`](Schedules::resume), and the ticks it misses
    /// meanwhile are never caught up. Pausing a paused schedule does
    /// nothing. An unknown name is [`Error::UnknownSchedule`].
    ///
    /// # Cancel safety
    ///
    /// The change is one swap of the stored state: dropped before it, the
    /// schedule is as it was; after it, paused (durable once flushed).
    pub async fn pause(&self, name: &str) -> Result<()> {
        self.set_paused(name, true).await
    }

    /// Resumes a paused schedule `name`: its next tick is the first after
    /// now (the ticks it missed while paused are not caught up). Resuming
    /// a running schedule does nothing. An unknown name is
    /// [`Error::UnknownSchedule`].
    ///
    /// # Cancel safety
    ///
    /// As [`pause`](Schedules::pause): one swap of the stored state.
    pub async fn resume(&self, name: &str) -> Result<()> {
        self.set_paused(name, false).await
    }

    async fn set_paused(&self, name: &str, paused: bool) -> Result<()> {
        self.registered(name).await?;
        let journal = &self.runner.core.journal;
        let now = unix_seconds(self.runner.core.clock.now());
        state::update(journal, name, |stored| {
            let stored = stored.ok_or_else(|| unknown(name))?;
            if stored.paused == paused {
                return Ok(Decision::Keep(()));
            }
            let mut changed = stored.clone();
            changed.paused = paused;
            if !paused {
                // No catch-up of what it missed while paused.
                let timing = stored.definition.timing.timing();
                changed.next = timing.and_then(|t| t.next_after(now)).unwrap_or(i64::MAX);
            }
            Ok(Decision::Put(changed, ()))
        })
        .await?;
        journal.flush().await?;
        self.declared.changed.notify_waiters();
        Ok(())
    }

    /// Every stored schedule, by name: its timing, next fire times,
    /// paused state, last tick and policies. On PostgreSQL it lists the
    /// schedules of every worker.
    ///
    /// # Cancel safety
    ///
    /// A read; dropping the future changes nothing.
    pub async fn list(&self) -> Result<Vec<ScheduleInfo>> {
        // What this engine declares is stored before it is listed.
        for schedule in &self.declared.schedules {
            if !self.runner.core.journal.read_only() {
                firing::register(self.runner, schedule).await?;
            }
        }
        let stored = state::all(&self.runner.core.journal).await?;
        let mut outcomes = Vec::with_capacity(stored.len());
        for (name, s) in &stored {
            outcomes.push(match s.last_tick {
                Some(at) => self.status_of(&InstanceId::tick(name, at, 0)).await?,
                None => None,
            });
        }
        Ok(stored
            .into_iter()
            .zip(outcomes)
            .map(|((name, s), last_outcome)| {
                let timing = s.definition.timing.timing();
                let mut next_fires = Vec::new();
                let mut at = (!s.paused && s.next != i64::MAX).then_some(s.next);
                while let Some(tick) = at.filter(|_| next_fires.len() < NEXT_FIRES_LISTED) {
                    let fires_at = s.definition.fires_at(&name, tick);
                    next_fires.push(UNIX_EPOCH + Duration::from_millis(fires_at.max(0) as u64));
                    at = timing.as_ref().and_then(|t| t.next_after(tick));
                }
                ScheduleInfo {
                    declared_here: self.declared.find(&name).is_some()
                        && s.definition.input.is_none(),
                    name,
                    timing: s.definition.timing.to_string(),
                    workflow: s.definition.workflow,
                    next_fires,
                    paused: s.paused,
                    last_tick: s.last_tick.map(system_time),
                    last_outcome,
                    catch_up: s.definition.catch_up,
                    overlap: s.definition.overlap,
                    jitter: (s.definition.jitter_ms > 0)
                        .then(|| Duration::from_millis(s.definition.jitter_ms)),
                    kept_tick: s.kept.map(system_time),
                    run_time: s.definition.input.is_some(),
                }
            })
            .collect())
    }

    /// Creates a run-time schedule, durably: from then on every engine
    /// that registers its workflow fires it (on PostgreSQL, every worker
    /// of the database, within its poll interval), across restarts, until
    /// [`delete`](Schedules::delete). Its first tick is the first after
    /// now. It says what it starts with
    /// [`Schedule::start_with_input`]: the input is stored, as JSON, and
    /// every tick's instance gets it (not encrypted by the engine's codec
    /// while it is stored in the schedule).
    ///
    /// Creating it again with the same definition does nothing. A
    /// schedule of the name stored otherwise, or declared by this
    /// engine's builder, is [`Error::InvalidSchedule`], as is one that
    /// starts nothing or with a closure (`.start(..)`: a closure cannot be
    /// stored); a mistake in the schedule is its typed error
    /// ([`Error::InvalidCron`], [`Error::InvalidInterval`], ...).
    ///
    /// A build-time declaration of the name (another engine's
    /// `.schedule(..)`) never writes over a run-time schedule: it is
    /// skipped, and says so in the log; once the run-time one is deleted,
    /// the declaration takes the name (from its first tick after then).
    ///
    /// # Examples
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// # use saga_runtime::schedule::Schedule;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), saga_runtime::Error> {
    /// let remind = workflow_fn("remind", |_ctx: WorkflowContext, who: String| async move {
    ///     Ok::<_, WorkflowError>(who)
    /// });
    /// let engine = Engine::builder().register(remind).temporary()?;
    /// let schedule = Schedule::every("remind-ada", "15 minutes")
    ///     .start_with_input(remind, &"ada".to_owned());
    /// engine.schedules().create(schedule).await?;
    /// assert!(engine.schedules().list().await?[0].run_time);
    /// engine.schedules().delete("remind-ada").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// One swap of the stored state: dropped before it, nothing is
    /// created; after it, the schedule exists (durable once flushed).
    pub async fn create(&self, schedule: Schedule) -> Result<()> {
        let now_time = self.runner.core.clock.now();
        let name = schedule.name().to_owned();
        let exists = |reason: &str| Error::InvalidSchedule {
            schedule: name.clone(),
            reason: reason.to_owned(),
        };
        if self.declared.find(&name).is_some() {
            return Err(exists(
                "this engine's builder declares a schedule of this name; give the run-time one another name",
            ));
        }
        let declaration = schedule.checked(now_time, true)?;
        let definition = declaration.definition.clone();
        let next = declaration
            .timing
            .next_after(unix_seconds(now_time))
            .unwrap_or(i64::MAX);
        let journal = &self.runner.core.journal;
        state::update(journal, &name, |stored| match stored {
            None => {
                let mut new = state::ScheduleState::new(definition.clone(), None);
                new.next = next;
                Ok(Decision::Put(new, ()))
            }
            Some(s) if s.definition == definition => Ok(Decision::Keep(())),
            Some(s) if s.definition.input.is_none() => Err(exists(
                "a schedule of this name is declared at build time (it is stored); give the run-time one another name",
            )),
            Some(_) => Err(exists(
                "a run-time schedule of this name exists with another definition; delete it first",
            )),
        })
        .await?;
        journal.flush().await?;
        self.declared.changed.notify_waiters();
        Ok(())
    }

    /// Deletes run-time schedule `name`, for every worker, durably: it
    /// fires no more ticks (a tick decided on but not started yet is
    /// dropped; instances started stay). An unknown name is
    /// [`Error::UnknownSchedule`]; a build-time schedule is
    /// [`Error::InvalidSchedule`] (its engine would store it again when
    /// built: remove its `.schedule(..)` instead, or pause it).
    ///
    /// # Cancel safety
    ///
    /// One removal of the stored state, by compare-and-swap: dropped
    /// before it, the schedule is as it was; after it, gone.
    pub async fn delete(&self, name: &str) -> Result<()> {
        let journal = &self.runner.core.journal;
        state::update(journal, name, |stored| match stored {
            None => Err(unknown(name)),
            Some(s) if s.definition.input.is_none() => Err(Error::InvalidSchedule {
                schedule: name.to_owned(),
                reason: "it is declared at build time, and its engines would store it again: remove its .schedule(..) from the builder, or pause it".to_owned(),
            }),
            Some(_) => Ok(Decision::Remove(())),
        })
        .await?;
        journal.flush().await?;
        self.declared.changed.notify_waiters();
        Ok(())
    }

    /// Starts an extra instance of schedule `name` now, whatever its
    /// timing and even while it is paused, with the input its closure
    /// makes of a manual [`Tick`] (`tick.manual()` ≥ 1). Its id says it
    /// was manual: `reminders.20300101T001503Z~m1` (`~m2` for a second one
    /// in the same second). Only an engine that declares the schedule
    /// knows what it starts; elsewhere it is [`Error::UnknownSchedule`].
    ///
    /// # Cancel safety
    ///
    /// The run's number is taken by one swap of the stored state, then the
    /// instance is created: dropped in between, that number is skipped
    /// and nothing starts; dropped after, the instance runs.
    pub async fn trigger(&self, name: &str) -> Result<Instance> {
        let journal = &self.runner.core.journal;
        let (_, stored) = state::load(journal, name).await?;
        let run_time = stored
            .as_ref()
            .and_then(|s| s.definition.input.is_some().then_some(&s.definition));
        let schedule = match run_time {
            Some(definition) => Arc::new(
                super::Declaration::run_time(self.runner, name, definition).ok_or_else(|| {
                    Error::UnknownSchedule {
                        name: name.to_owned(),
                        reason: "it is a run-time schedule whose workflow this engine does not register",
                    }
                })?,
            ),
            None => self.declared.find(name).cloned().ok_or_else(|| Error::UnknownSchedule {
                name: name.to_owned(),
                reason: "this engine does not declare it (trigger it from one whose builder has .schedule(..) for it)",
            })?,
        };
        firing::register(self.runner, &schedule).await?;
        let now = unix_seconds(self.runner.core.clock.now());
        let manual = state::update(journal, name, |stored| {
            let stored = stored.ok_or_else(|| unknown(name))?;
            let mut changed = stored.clone();
            changed.manual_count = if stored.manual_at == now {
                stored.manual_count.saturating_add(1)
            } else {
                1
            };
            changed.manual_at = now;
            Ok(Decision::Put(changed.clone(), changed.manual_count))
        })
        .await?;
        let id = firing::start_tick(self.runner, &schedule, now, manual).await?;
        journal.flush().await?;
        Ok(Instance::new(self.runner.clone(), &id))
    }

    /// The status of instance `id`, `None` if there is none.
    async fn status_of(&self, id: &InstanceId) -> Result<Option<Status>> {
        match self.runner.core.journal.read(id, |s| s.status).await {
            Ok(status) => Ok(Some(status)),
            Err(Error::UnknownInstance { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Stores the definition of a schedule this engine declares before a
    /// control call changes it.
    async fn registered(&self, name: &str) -> Result<()> {
        match self.declared.find(name) {
            Some(schedule) if !self.runner.core.journal.read_only() => {
                firing::register(self.runner, schedule).await
            }
            _ => Ok(()),
        }
    }
}

impl std::fmt::Debug for Schedules<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schedules").finish_non_exhaustive()
    }
}

fn unknown(name: &str) -> Error {
    Error::UnknownSchedule {
        name: name.to_owned(),
        reason: "no schedule of this name is stored",
    }
}
