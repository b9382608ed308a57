//! The invariants of issue 6, checked after the last run of a seed against
//! the callee's log, its applied keys, the parent's acks and the store.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use saga_runtime::inspect::{Event, EventKind, ListFilter};
use saga_runtime::prelude::*;

use super::{Plan, Scenario, StepId, forward_key, program, rollback_key};

/// One line of the callee's log.
#[derive(Clone, Debug)]
struct Call {
    run: u32,
    /// `F` forward call, `R` rollback call, `A` ack.
    kind: String,
    instance: String,
    step: String,
    occurrence: u32,
    key: String,
}

/// How the instances of a seed ended.
#[derive(Default, Debug)]
pub struct Ended {
    pub complete: usize,
    pub errored: usize,
}

/// What the store says about one instance.
struct Stored {
    status: Status,
    history: Vec<Event>,
    output: Option<u64>,
}

/// Checks invariants 1–4, 6 and 7 (5 is the final run ending, checked by
/// the caller); `Err` lists every violation found.
pub async fn verify(
    scenario: &Scenario,
    dir: &Path,
    acks: &[(u32, String)],
) -> Result<Ended, String> {
    let stored = read_store(scenario, &dir.join("store")).await?;
    let calls = read_log(&dir.join("calls.log"))?;
    let applied: HashSet<String> = std::fs::read_dir(dir.join("applied"))
        .map_err(|e| format!("applied dir: {e}"))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut v = Violations::default();
    acknowledged_steps_never_start_again(&calls, acks, &mut v);
    keys_are_stable_and_unique(scenario, &calls, &mut v);
    effects_applied_once(scenario, &stored, &calls, &applied, &mut v);
    let mut ended = Ended::default();
    for plan in &scenario.plans {
        let s = &stored[&plan.id];
        history_is_whole(plan, s, &mut v);
        match s.status {
            Status::Complete => ended.complete += 1,
            Status::Errored => ended.errored += 1,
            _ => {}
        }
        ends_as_planned_and_compensates(scenario, plan, s, &calls, &applied, &mut v);
    }
    v.into_result().map(|()| ended)
}

#[derive(Default)]
struct Violations(Vec<String>);

impl Violations {
    fn add(&mut self, invariant: &str, detail: String) {
        self.0.push(format!("invariant {invariant}: {detail}"));
    }

    fn into_result(self) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0.join("\n"))
        }
    }
}

/// Invariant 7 first: the store opens (with no workflow registered, so
/// nothing moves) and lists exactly the scenario's instances.
async fn read_store(scenario: &Scenario, path: &Path) -> Result<HashMap<String, Stored>, String> {
    let fail = |what: String| format!("invariant 7 (the store reopens cleanly): {what}");
    let engine = Engine::open(path).map_err(|e| fail(format!("Engine::open: {e}")))?;
    let listed = engine
        .list(&ListFilter::all())
        .await
        .map_err(|e| fail(format!("list: {e}")))?;
    let mut ids: Vec<&str> = listed.iter().map(|i| i.id.as_str()).collect();
    let mut planned: Vec<&str> = scenario.plans.iter().map(|p| p.id.as_str()).collect();
    ids.sort_unstable();
    planned.sort_unstable();
    if ids != planned {
        return Err(fail(format!(
            "list() gives {ids:?}, the scenario started {planned:?}"
        )));
    }
    let mut stored = HashMap::new();
    for plan in &scenario.plans {
        let instance = engine
            .instance(&plan.id)
            .await
            .map_err(|e| fail(format!("instance({}): {e}", plan.id)))?;
        let status = instance
            .status()
            .await
            .map_err(|e| fail(format!("status of {}: {e}", plan.id)))?;
        let history = instance
            .history()
            .await
            .map_err(|e| fail(format!("history of {}: {e}", plan.id)))?;
        let output = match status {
            Status::Complete => Some(
                instance
                    .result::<u64>()
                    .await
                    .map_err(|e| fail(format!("result of {}: {e}", plan.id)))?,
            ),
            _ => None,
        };
        stored.insert(
            plan.id.clone(),
            Stored {
                status,
                history,
                output,
            },
        );
    }
    engine.close().await;
    Ok(stored)
}

fn read_log(path: &Path) -> Result<Vec<Call>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("calls.log: {e}"))?;
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            match f[..] {
                [run, kind, instance, step, occurrence, key] => Ok(Call {
                    run: run.parse().map_err(|_| format!("bad log line {line:?}"))?,
                    kind: kind.to_owned(),
                    instance: instance.to_owned(),
                    step: step.to_owned(),
                    occurrence: occurrence
                        .parse()
                        .map_err(|_| format!("bad log line {line:?}"))?,
                    key: key.to_owned(),
                }),
                _ => Err(format!("bad log line {line:?}")),
            }
        })
        .collect()
}

/// Invariant 1: after a step was acknowledged (in the log, or on the
/// child's stdout in run r), no call of its key follows (nor in a later run).
fn acknowledged_steps_never_start_again(
    calls: &[Call],
    acks: &[(u32, String)],
    v: &mut Violations,
) {
    let mut acked: HashMap<&str, (usize, u32)> = HashMap::new();
    for (at, call) in calls.iter().enumerate() {
        match call.kind.as_str() {
            "A" => {
                acked.entry(&call.key).or_insert((at, call.run));
            }
            "F" => {
                if let Some((line, run)) = acked.get(call.key.as_str()) {
                    v.add(
                        "1 (an acknowledged step never starts again)",
                        format!(
                            "step {} was acknowledged at log line {} (run {run}) and called again at line {} (run {})",
                            call.key,
                            line + 1,
                            at + 1,
                            call.run
                        ),
                    );
                }
            }
            _ => {}
        }
    }
    for (run, key) in acks {
        if !calls
            .iter()
            .any(|c| c.kind == "A" && c.run == *run && c.key == *key)
        {
            v.add(
                "1 (an acknowledged step never starts again)",
                format!("the parent saw ACK {key} in run {run}, the log has no such ack"),
            );
        }
        if let Some(late) = calls
            .iter()
            .find(|c| c.kind == "F" && c.key == *key && c.run > *run)
        {
            v.add(
                "1 (an acknowledged step never starts again)",
                format!(
                    "the parent saw ACK {key} in run {run}; run {} called the step again",
                    late.run
                ),
            );
        }
    }
}

/// Invariant 2: every call of one step (forward or rollback) carries the
/// same, documented key, and no two steps share a key.
fn keys_are_stable_and_unique(scenario: &Scenario, calls: &[Call], v: &mut Violations) {
    let steps = all_steps(scenario);
    let mut owners: HashMap<&str, HashSet<(&str, &str, &str, u32)>> = HashMap::new();
    for call in calls.iter().filter(|c| c.kind != "A") {
        let owner = (
            call.kind.as_str(),
            call.instance.as_str(),
            call.step.as_str(),
            call.occurrence,
        );
        owners.entry(&call.key).or_default().insert(owner);
        let expected = steps
            .get(&(call.instance.clone(), call.step.clone(), call.occurrence))
            .map(|step| match call.kind.as_str() {
                "F" => forward_key(&call.instance, step),
                _ => rollback_key(&call.instance, step),
            });
        if expected.as_deref() != Some(call.key.as_str()) {
            v.add(
                "2 (one stable key per step)",
                format!(
                    "a {} call of {}/{}#{} carried key {:?}, expected {expected:?}",
                    call.kind, call.instance, call.step, call.occurrence, call.key
                ),
            );
        }
    }
    for (key, owners) in owners {
        if owners.len() > 1 {
            v.add(
                "2 (one stable key per step)",
                format!("key {key} was given to several steps: {owners:?}"),
            );
        }
    }
}

/// Invariant 3: each key is applied at most once (the callee dedupes by
/// key), only known keys are applied, and every step history says
/// completed was applied, and completed once.
fn effects_applied_once(
    scenario: &Scenario,
    stored: &HashMap<String, Stored>,
    calls: &[Call],
    applied: &HashSet<String>,
    v: &mut Violations,
) {
    let steps = all_steps(scenario);
    let mut known = HashSet::new();
    for plan in &scenario.plans {
        for step in program(plan).concat() {
            known.insert(forward_key(&plan.id, &step));
            known.insert(rollback_key(&plan.id, &step));
        }
    }
    for key in applied {
        if !known.contains(key) || !calls.iter().any(|c| c.kind != "A" && c.key == *key) {
            v.add(
                "3 (effects applied once)",
                format!("key {key} was applied but no step of the scenario called it"),
            );
        }
    }
    for plan in &scenario.plans {
        let mut completed: BTreeMap<(String, u32), usize> = BTreeMap::new();
        for event in &stored[&plan.id].history {
            if let EventKind::StepCompleted {
                step, occurrence, ..
            } = &event.kind
            {
                *completed.entry((step.clone(), *occurrence)).or_default() += 1;
            }
        }
        for ((step, occurrence), times) in completed {
            let Some(step) = steps.get(&(plan.id.clone(), step.clone(), occurrence)) else {
                v.add(
                    "3 (effects applied once)",
                    format!(
                        "history of {} completes unknown step {step}#{occurrence}",
                        plan.id
                    ),
                );
                continue;
            };
            let key = forward_key(&plan.id, step);
            if times != 1 {
                v.add(
                    "3 (effects applied once)",
                    format!("history of {} completes step {key} {times} times", plan.id),
                );
            }
            if !applied.contains(&key) {
                v.add(
                    "3 (effects applied once)",
                    format!("step {key} completed in history but its effect was never applied"),
                );
            }
        }
    }
}

/// Invariant 6: history numbered from 0 without gaps, one terminal event, last.
fn history_is_whole(plan: &Plan, stored: &Stored, v: &mut Violations) {
    let invariant = "6 (history whole, one terminal event, last)";
    for (i, event) in stored.history.iter().enumerate() {
        if event.seq != i as u64 {
            v.add(
                invariant,
                format!(
                    "history of {} has seq {} at position {i}",
                    plan.id, event.seq
                ),
            );
            break;
        }
    }
    let terminal: Vec<usize> = stored
        .history
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind.is_terminal())
        .map(|(i, _)| i)
        .collect();
    if terminal.len() != 1 || terminal[0] + 1 != stored.history.len() {
        v.add(
            invariant,
            format!(
                "history of {} ({} events) has terminal events at {terminal:?}; last: {:?}",
                plan.id,
                stored.history.len(),
                stored.history.last().map(|e| &e.kind)
            ),
        );
    }
    if !stored.status.is_terminal() {
        v.add(
            "5 (every instance ends)",
            format!("{} is {:?} in the store", plan.id, stored.status),
        );
    }
}

/// Invariant 4 (with the planned outcome): a completed instance has the
/// planned output and no compensation; an errored one had exactly its
/// started steps with handlers compensated, once each, in reverse start
/// order, and every applied effect of such a step compensated.
fn ends_as_planned_and_compensates(
    scenario: &Scenario,
    plan: &Plan,
    stored: &Stored,
    calls: &[Call],
    applied: &HashSet<String>,
    v: &mut Violations,
) {
    let invariant = "4 (errored instances compensated in reverse start order, once each)";
    let id = &plan.id;
    let rollback_calls: Vec<&Call> = calls
        .iter()
        .filter(|c| c.kind == "R" && c.instance == *id)
        .collect();
    let rollback_events = stored.history.iter().filter(|e| {
        matches!(
            e.kind,
            EventKind::RollbackStarted { .. }
                | EventKind::RollbackStepStarted { .. }
                | EventKind::RollbackStepCompleted { .. }
                | EventKind::RollbackStepFailed { .. }
                | EventKind::RollbackCompleted
                | EventKind::RollbackFailed { .. }
        )
    });
    match (scenario.predict(plan), stored.status) {
        (Ok(total), Status::Complete) => {
            if stored.output != Some(total) {
                v.add(
                    invariant,
                    format!("{id} completed with {:?}, planned {total}", stored.output),
                );
            }
            if !rollback_calls.is_empty() || rollback_events.count() > 0 {
                v.add(
                    invariant,
                    format!("{id} completed but compensations ran: {rollback_calls:?}"),
                );
            }
        }
        (Err(last_group), Status::Errored) => {
            compensated_as_planned(plan, last_group, stored, &rollback_calls, applied, v);
        }
        (planned, status) => v.add(
            invariant,
            format!("{id} ended {status:?}, the plan says {planned:?} (Ok(output) / Err(last group called))"),
        ),
    }
}

fn compensated_as_planned(
    plan: &Plan,
    last_group: usize,
    stored: &Stored,
    rollback_calls: &[&Call],
    applied: &HashSet<String>,
    v: &mut Violations,
) {
    let invariant = "4 (errored instances compensated in reverse start order, once each)";
    let id = &plan.id;
    // Start order is call order: the program's order.
    let order: Vec<StepId> = program(plan).concat();
    let position = |name: &str, occurrence: u32| {
        order
            .iter()
            .position(|s| s.name == name && s.occurrence == occurrence)
    };
    let called: Vec<StepId> = program(plan)[..=last_group].concat();
    let allowed: HashSet<(&str, u32)> = called
        .iter()
        .filter(|s| s.compensated)
        .map(|s| (s.name, s.occurrence))
        .collect();
    let mut started = HashSet::new();
    let mut compensated: Vec<(String, u32)> = Vec::new();
    for event in &stored.history {
        match &event.kind {
            EventKind::StepStarted { step, occurrence } => {
                started.insert((step.clone(), *occurrence));
            }
            EventKind::RollbackStepCompleted { step, occurrence } => {
                compensated.push((step.clone(), *occurrence));
            }
            EventKind::RollbackStepFailed { .. } | EventKind::RollbackFailed { .. } => {
                v.add(invariant, format!("{id}: a compensation failed: {event:?}"));
            }
            _ => {}
        }
    }
    let done: HashSet<(String, u32)> = compensated.iter().cloned().collect();
    if done.len() != compensated.len() {
        v.add(
            invariant,
            format!("{id}: a step was compensated twice: {compensated:?}"),
        );
    }
    for step in called.iter().filter(|s| s.compensated) {
        let here = (step.name.to_owned(), step.occurrence);
        let effect = applied.contains(&forward_key(id, step));
        if (started.contains(&here) || effect) && !done.contains(&here) {
            v.add(
                invariant,
                format!(
                    "{id}: step {}#{} started (effect applied: {effect}) but was not compensated; compensated: {compensated:?}",
                    step.name, step.occurrence
                ),
            );
        }
        if done.contains(&here) && !applied.contains(&rollback_key(id, step)) {
            v.add(
                invariant,
                format!(
                    "{id}: history says {}#{} was compensated, the callee never applied its rollback",
                    step.name, step.occurrence
                ),
            );
        }
    }
    for (name, occurrence) in &compensated {
        if !allowed.contains(&(name.as_str(), *occurrence)) {
            v.add(
                invariant,
                format!("{id}: step {name}#{occurrence} was compensated but never called"),
            );
        }
    }
    let mut reverse = compensated.clone();
    reverse.sort_by_key(|(name, occurrence)| std::cmp::Reverse(position(name, *occurrence)));
    if compensated != reverse {
        v.add(
            invariant,
            format!("{id}: compensations completed in order {compensated:?}, reverse start order is {reverse:?}"),
        );
    }
    let mut first_calls: Vec<(String, u32)> = Vec::new();
    for call in rollback_calls {
        let here = (call.step.clone(), call.occurrence);
        if !first_calls.contains(&here) {
            first_calls.push(here);
        }
    }
    if first_calls != compensated {
        v.add(
            invariant,
            format!("{id}: the callee saw compensations begin in order {first_calls:?}, history completed {compensated:?}"),
        );
    }
}

/// Every step of the scenario by (instance, name, occurrence).
fn all_steps(scenario: &Scenario) -> HashMap<(String, String, u32), StepId> {
    let mut steps = HashMap::new();
    for plan in &scenario.plans {
        for step in program(plan).concat() {
            steps.insert(
                (plan.id.clone(), step.name.to_owned(), step.occurrence),
                step,
            );
        }
    }
    steps
}
