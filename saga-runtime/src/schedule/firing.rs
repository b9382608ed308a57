//! The task of each declared schedule: it registers the schedule's
//! definition once, then fires each tick when the engine's clock reaches
//! it, by the stored state (never by this worker's idea of it).
//!
//! Firing a tick is two steps. First a swap of the stored state decides,
//! once for every worker: the ticks to start (by the catch-up and overlap
//! policies), now `pending`, and the next fire time after now. Then the
//! ticks are started, each by the engine's idempotent create under its
//! derived id, made durable, and `pending` is cleared. A worker that dies
//! in between leaves `pending` behind; whichever worker looks next starts
//! those ticks again, which creates nothing twice.
//!
//! [`Overlap::QueueOne`] keeps a tick that falls due while the previous
//! one runs in the stored state (`kept`), by the same swap; the task then
//! waits for an instance to end as well, and the swap that starts the
//! kept tick is the one that sees the previous instance ended.
//!
//! A jitter moves when a tick fires, never its time: the stored next fire
//! time stays the tick's, and a tick is due once the clock reaches its
//! time plus its delay (`Definition::fires_at`, the same on every worker).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::state::{self, Decision, ScheduleState};
use super::{CatchUp, Declaration, Declared, Overlap, Timing, unix_millis};
use crate::error::{Error, Result};
use crate::names::id::InstanceId;
use crate::run::runner::Runner;
use crate::store::Told;
use crate::time::clock::from_millis;

/// A tick fired within this long of its time is on time: the latest tick
/// [`CatchUp::Skip`] still fires.
const ON_TIME: i64 = 60;

/// How long a task waits before it looks again after a failure (real time).
const AFTER_FAILURE: Duration = Duration::from_secs(1);

/// Starts the firing task of each declared schedule, and the task that
/// finds the stored run-time schedules; they end with the engine.
pub(crate) fn spawn(runner: &Arc<Runner>, declared: &Arc<Declared>) {
    for declaration in &declared.schedules {
        spawn_one(runner, declared, declaration.clone());
    }
    let task = runner.core.spawn(find_run_time_for_ever(
        Arc::downgrade(runner),
        declared.clone(),
    ));
    runner.core.track(task);
}

fn spawn_one(runner: &Arc<Runner>, declared: &Arc<Declared>, declaration: Arc<Declaration>) {
    let task = runner.core.spawn(fire_for_ever(
        Arc::downgrade(runner),
        declared.clone(),
        declaration,
    ));
    runner.core.track(task);
}

/// Any engine that registers a run-time schedule's workflow fires it: this
/// task looks at the stored schedules when a control call rings (a create
/// here) and, on a shared store, every poll interval (a create by another
/// worker), and starts a firing task for each run-time schedule it does
/// not fire yet. A firing task ends when its schedule is deleted or
/// created again otherwise; the next look starts one for the new one.
async fn find_run_time_for_ever(runner: Weak<Runner>, declared: Arc<Declared>) {
    // The task of each run-time schedule fired here, by the declaration
    // it holds: gone once the task ended.
    let mut firing: std::collections::BTreeMap<String, Weak<Declaration>> = Default::default();
    loop {
        let Some(strong) = runner.upgrade() else {
            return;
        };
        let changed = declared.changed.notified();
        let mut failed = false;
        match strong.core.journal.schedule_states().await {
            Ok(stored) => {
                let mut seen = std::collections::BTreeSet::new();
                for (name, bytes) in stored {
                    // One this release cannot read is reported by `list`.
                    let Ok(state) = state::ScheduleState::decode(&name, &bytes) else {
                        continue;
                    };
                    let fired = firing.get(&name).and_then(Weak::upgrade);
                    if fired.is_some_and(|d| d.definition == state.definition) {
                        seen.insert(name);
                        continue;
                    }
                    let Some(declaration) =
                        Declaration::run_time(&strong, &name, &state.definition)
                    else {
                        continue;
                    };
                    let declaration = Arc::new(declaration);
                    firing.insert(name.clone(), Arc::downgrade(&declaration));
                    spawn_one(&strong, &declared, declaration);
                    seen.insert(name);
                }
                firing.retain(|name, _| seen.contains(name));
            }
            Err(Error::Closed) => return,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the stored schedules; trying again");
                failed = true;
            }
        }
        let poll = strong.core.journal.shared().then_some(strong.core.poll);
        drop(strong);
        match poll {
            _ if failed => tokio::time::sleep(AFTER_FAILURE).await,
            Some(poll) => {
                tokio::select! {
                    // Either leads to the same look.
                    // Biased: a simulated run picks the same on every replay of its seed.
                    biased;
                    () = changed => {}
                    () = tokio::time::sleep(poll) => {}
                }
            }
            None => changed.await,
        }
    }
}

/// What a task waits for before it looks again.
enum Wait {
    /// Nothing: look again now.
    Now,
    /// The engine's clock to reach this millisecond.
    Until(i64),
    /// An instance to end (the previous tick's, for a kept tick), or the
    /// engine's clock to reach this millisecond (`i64::MAX`: never).
    EndOrUntil(i64),
    /// A control call (or, on a shared store, the next poll).
    Change,
    /// A failure passed: a moment of real time.
    Failed,
    /// Nothing ever: the run-time schedule was deleted (or created again,
    /// which another task fires).
    Gone,
}

async fn fire_for_ever(runner: Weak<Runner>, declared: Arc<Declared>, schedule: Arc<Declaration>) {
    let Some(strong) = runner.upgrade() else {
        return;
    };
    // Ends here, and on a shared store stops told by other workers.
    let mut ends = strong.core.journal.subscribe_ends();
    let mut stops = strong.core.journal.changes(Told::Stops);
    drop(strong);
    loop {
        let Some(strong) = runner.upgrade() else {
            return;
        };
        // Made before the look, so a control call or an end during it is
        // not missed.
        let changed = declared.changed.notified();
        ends.borrow_and_update();
        if let Some(stops) = &mut stops {
            stops.borrow_and_update();
        }
        let wait = match fire_due(&strong, &schedule).await {
            Ok(wait) => wait,
            Err(Error::Closed) => return,
            Err(e) => {
                tracing::warn!(schedule = %schedule.name, error = %e, "could not fire the schedule; trying again");
                Wait::Failed
            }
        };
        let clock = strong.core.clock.clone();
        // Another worker may pause, resume or fire it: look at every poll.
        let poll = if strong.core.journal.shared() {
            strong.core.poll
        } else {
            Duration::MAX
        };
        drop(strong);
        let polled = async {
            if poll == Duration::MAX {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(poll).await;
        };
        // A timeout, not a sleep: a time-skipping test clock must not jump
        // to the next tick on its own.
        let reached = |at: i64| clock.timeout_at(from_millis(u64::try_from(at).unwrap_or(0)));
        match wait {
            Wait::Now => {}
            Wait::Until(at) => {
                tokio::select! {
                    // Each only makes the task look again.
                    // Biased: a simulated run picks the same on every replay of its seed.
                    biased;
                    () = reached(at) => {}
                    () = changed => {}
                    () = polled => {}
                }
            }
            Wait::EndOrUntil(at) => {
                let ticks = async {
                    if at == i64::MAX {
                        std::future::pending::<()>().await;
                    }
                    reached(at).await;
                };
                tokio::select! {
                    // Each only makes the task look again.
                    // Biased: a simulated run picks the same on every replay of its seed.
                    biased;
                    () = ticks => {}
                    // Err: the journal is gone, and the engine with it.
                    _ = ends.changed() => {}
                    Some(()) = crate::journal::told_of_change(&mut stops) => {}
                    () = changed => {}
                    () = polled => {}
                }
            }
            Wait::Change => {
                tokio::select! {
                    // Either makes the task look again.
                    // Biased: a simulated run picks the same on every replay of its seed.
                    biased;
                    () = changed => {}
                    () = polled => {}
                }
            }
            Wait::Failed => tokio::time::sleep(AFTER_FAILURE).await,
            Wait::Gone => return,
        }
    }
}

/// Stores this engine's definition of the schedule, once: a schedule new
/// to the store fires first at its first tick after the engine was built;
/// one stored with another definition (another release's) takes this
/// one, the last registered, and its next tick is counted again from
/// then. Paused state, last tick and pending ticks stay. A run-time
/// schedule of the name is never written over: the declaration is
/// skipped (said once, in the log), and fires nothing.
pub(crate) async fn register(runner: &Runner, schedule: &Declaration) -> Result<()> {
    schedule
        .registered
        .get_or_try_init(|| async {
            let journal = &runner.core.journal;
            let next = schedule.timing.next_after(schedule.declared_at);
            state::update(journal, &schedule.name, |stored| {
                Ok(match stored {
                    None => {
                        Decision::Put(ScheduleState::new(schedule.definition.clone(), next), ())
                    }
                    Some(s) if s.definition == schedule.definition => Decision::Keep(()),
                    Some(s) if s.definition.input.is_some() => {
                        tracing::warn!(schedule = %schedule.name, "a run-time schedule of this name is stored: the build-time declaration is skipped (it takes the name once the run-time one is deleted)");
                        Decision::Keep(())
                    }
                    Some(s) => {
                        let mut changed = s.clone();
                        changed.definition = schedule.definition.clone();
                        changed.next = next.unwrap_or(i64::MAX);
                        Decision::Put(changed, ())
                    }
                })
            })
            .await?;
            journal.flush().await
        })
        .await
        .map(drop)
}

/// Fires what is due of the schedule, and says what to wait for next.
async fn fire_due(runner: &Arc<Runner>, schedule: &Declaration) -> Result<Wait> {
    register(runner, schedule).await?;
    let journal = &runner.core.journal;
    let (_, stored) = state::load(journal, &schedule.name).await?;
    if schedule.is_run_time()
        && stored
            .as_ref()
            .is_none_or(|s| s.definition != schedule.definition)
    {
        return Ok(Wait::Gone);
    }
    if stored
        .as_ref()
        .is_some_and(|s| s.definition.input.is_some() && !schedule.is_run_time())
    {
        // A run-time schedule of the name: not this declaration's.
        schedule.shadowed.store(true, Ordering::Relaxed);
        return Ok(Wait::Change);
    }
    if stored.is_none() && schedule.shadowed.swap(false, Ordering::Relaxed) {
        // The run-time one was deleted: the declaration takes the name,
        // from its first tick after now.
        let now = super::unix_seconds(runner.core.clock.now());
        let next = schedule.timing.next_after(now);
        state::update(journal, &schedule.name, |stored| {
            Ok(match stored {
                None => Decision::Put(ScheduleState::new(schedule.definition.clone(), next), ()),
                Some(_) => Decision::Keep(()),
            })
        })
        .await?;
        journal.flush().await?;
        return Ok(Wait::Now);
    }
    let Some(stored) = stored else {
        // Removed from under it (by hand, in the database): said, every
        // moment, until the engine is built again and registers it.
        return Err(Error::UnknownSchedule {
            name: schedule.name.to_string(),
            reason: "its stored state is gone",
        });
    };
    if !stored.pending.is_empty() {
        start_pending(runner, schedule, stored.pending).await?;
        return Ok(Wait::Now);
    }
    if stored.paused {
        return Ok(Wait::Change);
    }
    let now = unix_millis(runner.core.clock.now());
    let fires_at = stored.definition.fires_at(&schedule.name, stored.next);
    let due = now >= fires_at;
    // Whether the last tick still runs is read before the swap, which
    // keeps the state as it is if the last tick changed meanwhile: the
    // next look reads it again.
    let previous_runs = match (stored.definition.overlap, stored.last_tick) {
        (Overlap::Allow, _) | (_, None) => false,
        (_, Some(_)) if !due && stored.kept.is_none() => false,
        (_, Some(last)) => still_runs(runner, &schedule.name, last).await?,
    };
    let kept_waits = stored.kept.is_some() && previous_runs;
    if !due && (stored.kept.is_none() || kept_waits) {
        return Ok(match fires_at {
            _ if kept_waits => Wait::EndOrUntil(fires_at),
            i64::MAX => Wait::Change,
            at => Wait::Until(at),
        });
    }
    let decided = state::update(journal, &schedule.name, |current| {
        let Some(current) = current
            .filter(|c| c.pending.is_empty() && !c.paused && c.last_tick == stored.last_tick)
        else {
            return Ok(Decision::Keep(None));
        };
        let timing = current
            .definition
            .timing
            .timing()
            .unwrap_or_else(|| schedule.timing.clone());
        let next = decide(&timing, &schedule.name, current, now, previous_runs);
        let (fire, kept) = (next.pending.clone(), next.kept);
        Ok(if next == *current {
            Decision::Keep(None)
        } else {
            Decision::Put(next, Some((fire, kept.filter(|_| kept != current.kept))))
        })
    })
    .await?;
    match decided {
        Some((fire, _)) if !fire.is_empty() => start_pending(runner, schedule, fire).await?,
        Some((_, Some(kept))) => {
            tracing::info!(schedule = %schedule.name, tick = kept, "tick kept until the previous tick's instance ends");
        }
        Some((_, None)) => {
            tracing::info!(schedule = %schedule.name, "ticks skipped by the schedule's policies");
        }
        None => {}
    }
    Ok(Wait::Now)
}

/// The state after the ticks of schedule `name` due at `now`
/// (milliseconds): the ticks the policies fire (oldest first) are
/// `pending`, a tick [`Overlap::QueueOne`] keeps is `kept`, and the next
/// tick is the first that fires after now. A kept tick whose previous
/// instance ended fires first.
fn decide(
    timing: &Timing,
    name: &str,
    state: &ScheduleState,
    now: i64,
    previous_runs: bool,
) -> ScheduleState {
    let mut next = state.clone();
    let mut busy = previous_runs;
    if let Some(kept) = state.kept.filter(|_| !previous_runs) {
        next.kept = None;
        next.pending.push(kept);
        busy = true;
    }
    if now >= state.definition.fires_at(name, state.next) {
        let (due, after) = ticks_due(timing, name, state, now);
        next.next = after;
        match state.definition.overlap {
            Overlap::Allow => next.pending.extend(due),
            Overlap::Skip | Overlap::QueueOne if !busy => next.pending.extend(due),
            Overlap::Skip => {}
            Overlap::QueueOne => {
                // At most one kept: a tick due while one is kept is skipped.
                next.kept = next.kept.or(due.last().copied());
            }
        }
    }
    next.last_tick = next.pending.last().copied().or(state.last_tick);
    next
}

/// The ticks due at `now` (milliseconds) that the catch-up policy fires,
/// oldest first, and the first tick not due (`i64::MAX`: none). A tick
/// is due once its fire time (its time, plus its jitter) has come; the
/// ticks after one not due are not, so ticks fire in order.
fn ticks_due(timing: &Timing, name: &str, state: &ScheduleState, now: i64) -> (Vec<i64>, i64) {
    let at_most = match state.definition.catch_up {
        CatchUp::All { at_most } => at_most.max(1) as usize,
        CatchUp::Skip | CatchUp::Latest => 1,
    };
    // One tick at a time when they must not overlap.
    let at_most = match state.definition.overlap {
        Overlap::Skip | Overlap::QueueOne => 1,
        Overlap::Allow => at_most,
    };
    let mut due = std::collections::VecDeque::with_capacity(at_most);
    let fires_at = |tick: i64| state.definition.fires_at(name, tick);
    let mut at = Some(state.next);
    while let Some(tick) = at.filter(|t| fires_at(*t) <= now) {
        if due.len() == at_most {
            due.pop_front();
        }
        due.push_back(tick);
        at = timing.next_after(tick);
    }
    if state.definition.catch_up == CatchUp::Skip {
        due.retain(|tick| now - fires_at(*tick) <= ON_TIME * 1000);
    }
    (due.into(), at.unwrap_or(i64::MAX))
}

/// Whether the instance of `schedule`'s tick at `at` exists and has not
/// ended.
async fn still_runs(runner: &Runner, schedule: &str, at: i64) -> Result<bool> {
    let id = InstanceId::tick(schedule, at, 0);
    match runner
        .core
        .journal
        .read(&id, |s| !s.status.is_terminal())
        .await
    {
        Ok(runs) => Ok(runs),
        Err(Error::UnknownInstance { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Starts the decided ticks (idempotently), makes them durable, and
/// clears them from the stored state.
async fn start_pending(
    runner: &Arc<Runner>,
    schedule: &Declaration,
    ticks: Vec<i64>,
) -> Result<()> {
    for &at in &ticks {
        if let Err(e) = start_tick(runner, schedule, at, 0).await {
            // A closure that panics, an input too large: this tick is
            // lost, not retried for ever.
            if !matches!(
                e,
                Error::InvalidArgument(_) | Error::Encode { .. } | Error::PayloadTooLarge { .. }
            ) {
                return Err(e);
            }
            tracing::error!(schedule = %schedule.name, tick = at, error = %e, "the tick's instance could not be made; it is skipped");
        }
    }
    runner.core.journal.flush().await?;
    state::update(&runner.core.journal, &schedule.name, |current| {
        Ok(match current {
            Some(c) if c.pending == ticks => {
                let mut cleared = c.clone();
                cleared.pending.clear();
                Decision::Put(cleared, ())
            }
            _ => Decision::Keep(()),
        })
    })
    .await
}

/// Creates the instance of `schedule`'s tick at `at` (manual run
/// `manual`) unless it exists, tagged `schedule=<name>`, and gives it a
/// driver. Does not wait for durability.
pub(crate) async fn start_tick(
    runner: &Arc<Runner>,
    schedule: &Declaration,
    at: i64,
    manual: u32,
) -> Result<InstanceId> {
    let tick = schedule.tick(at, manual);
    let id = tick.instance_id();
    let input = schedule.target.input(&runner.core, &tick)?;
    let tags = [("schedule".to_owned(), schedule.name.to_string())];
    runner
        .core
        .journal
        .create_then(
            &id,
            schedule.target.workflow_name(),
            input,
            None,
            true,
            |state, created| {
                // It exists: the tick was started before (by another
                // worker, or before a crash). Its input is what it was.
                if !created {
                    return Ok((None, ()));
                }
                let described = crate::journal::tags::described(&id, state, None, &tags)?;
                Ok((described, ()))
            },
        )
        .await?;
    runner.spawn_driver_if_runnable_soon(&id);
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Definition, TimingSpec};

    /// Every 15 minutes from 0, next tick 900, with `overlap`, catching up
    /// all (at most 10) and `jitter_ms`.
    fn quarterly(overlap: Overlap, jitter_ms: u64) -> (Timing, ScheduleState) {
        let spec = TimingSpec::Every {
            every: 900,
            offset: 0,
        };
        let definition = Definition {
            timing: spec.clone(),
            catch_up: CatchUp::All { at_most: 10 },
            overlap,
            workflow: "w".into(),
            jitter_ms,
            input: None,
        };
        let mut state = ScheduleState::new(definition, Some(900));
        state.last_tick = Some(0);
        (spec.timing().unwrap(), state)
    }

    #[test]
    fn queue_one_keeps_the_latest_due_tick_once_and_skips_the_rest() {
        let (timing, state) = quarterly(Overlap::QueueOne, 0);
        // Three ticks due at 00:45 while 00:00 runs: the latest is kept.
        let kept = decide(&timing, "s", &state, 2700 * 1000, true);
        assert_eq!((kept.kept, kept.pending.clone()), (Some(2700), vec![]));
        assert_eq!((kept.next, kept.last_tick), (3600, Some(0)));
        // 01:00, still running: the kept one stays, 01:00 is skipped.
        let skipped = decide(&timing, "s", &kept, 3600 * 1000, true);
        assert_eq!((skipped.kept, skipped.next), (Some(2700), 4500));
        assert!(skipped.pending.is_empty());
        // It ended: the kept tick starts, and is the last tick.
        let started = decide(&timing, "s", &skipped, 3700 * 1000, false);
        assert_eq!((started.kept, started.pending.clone()), (None, vec![2700]));
        assert_eq!((started.next, started.last_tick), (4500, Some(2700)));
        // It ended as 01:15 fell due: the kept one starts, 01:15 is kept.
        let both = decide(&timing, "s", &skipped, 4500 * 1000, false);
        assert_eq!((both.kept, both.pending), (Some(4500), vec![2700]));
    }

    #[test]
    fn a_jittered_tick_is_due_at_its_fire_time_and_keeps_its_time() {
        let (timing, state) = quarterly(Overlap::Allow, 600_000);
        let fires = state.definition.fires_at("s", 900);
        assert!((900_000..1_500_000).contains(&fires), "{fires}");
        let early = decide(&timing, "s", &state, fires - 1, false);
        assert_eq!(early, state);
        let due = decide(&timing, "s", &state, fires, false);
        assert_eq!((due.pending, due.next), (vec![900], 1800));
    }
}
