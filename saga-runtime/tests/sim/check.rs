//! The invariants a simulated run must keep, checked once it is over.

use std::collections::{BTreeMap, BTreeSet};

use saga_runtime::Status;
use saga_runtime::inspect::EventKind;

use super::run::Finished;
use super::workload::{COMPENSATED, Effect};

/// Every violation of every invariant.
pub(crate) fn all(run: &Finished) -> Vec<String> {
    let mut violations = Vec::new();
    completed_steps_never_run_again(run, &mut violations);
    compensations_match_started_steps(run, &mut violations);
    nothing_stranded(run, &mut violations);
    queue_limits_never_exceeded(run, &mut violations);
    index_agrees_with_journal(run, &mut violations);
    nothing_durable_lost(run, &mut violations);
    violations
}

/// A body whose output workflow code saw (durable by then) never runs
/// again with its key.
fn completed_steps_never_run_again(run: &Finished, violations: &mut Vec<String>) {
    let mut seen = BTreeSet::new();
    for effect in &run.effects {
        match effect {
            Effect::Seen { key } => {
                seen.insert(key.clone());
            }
            Effect::Ran { key, attempt } if seen.contains(key) => violations.push(format!(
                "step {key} ran again (attempt {attempt}) after workflow code saw its output"
            )),
            _ => {}
        }
    }
}

/// Whether an instance waits for an event of a type that came and was
/// not delivered: what a lost wake-up leaves until the wait's deadline.
pub(crate) fn missed_event(history: &[saga_runtime::inspect::Event]) -> Option<String> {
    let (mut received, mut delivered) = (0i64, 0i64);
    let mut waiting = None;
    for event in history {
        match &event.kind {
            EventKind::InstanceRestarted { .. } => (received, delivered, waiting) = (0, 0, None),
            EventKind::EventReceived { .. } => received += 1,
            EventKind::EventDelivered { .. } => {
                delivered += 1;
                waiting = None;
            }
            EventKind::EventWaitStarted { name, .. } => waiting = Some(name.clone()),
            EventKind::EventWaitTimedOut { .. } => waiting = None,
            _ => {}
        }
    }
    let wait = waiting?;
    (received > delivered).then(|| {
        format!(
            "waits in {wait:?} while {} received event(s) were not delivered",
            received - delivered
        )
    })
}

/// What the history of one run of an instance (after its last restart)
/// says of its steps and rollback.
#[derive(Default)]
struct Segment {
    /// Started steps with a compensation, and children, in start order.
    started: Vec<Started>,
    rollback_started: bool,
    rollback_completed: bool,
    /// Steps whose compensation completed, in order.
    compensated: Vec<String>,
    restarted: bool,
}

#[derive(Clone)]
enum Started {
    Step(String),
    Child(String),
}

fn segment(history: &[saga_runtime::inspect::Event]) -> Segment {
    let mut segment = Segment::default();
    for event in history {
        match &event.kind {
            // A restart from a step keeps the steps before it.
            EventKind::InstanceRestarted { from_step } => {
                let from = from_step
                    .as_deref()
                    .map_or(0, |from| rank(&Started::Step(from.into())));
                segment.started.retain(|started| rank(started) < from);
                segment.rollback_started = false;
                segment.rollback_completed = false;
                segment.compensated.clear();
                segment.restarted = true;
            }
            EventKind::StepStarted { step, .. } if COMPENSATED.contains(&step.as_str()) => {
                segment.started.push(Started::Step(step.clone()));
            }
            EventKind::ChildStarted { child, .. } => {
                segment.started.push(Started::Child(child.clone()));
            }
            EventKind::RollbackStarted { .. } => segment.rollback_started = true,
            EventKind::RollbackCompleted => segment.rollback_completed = true,
            EventKind::RollbackStepCompleted { step, .. }
                if COMPENSATED.contains(&step.as_str()) =>
            {
                segment.compensated.push(step.clone());
            }
            _ => {}
        }
    }
    // Start order is call order (a step starts when it is called), which
    // the records keep unless a crash lost some: a step recorded again
    // after it comes later in the journal. The workload calls its steps
    // in one order, so sort by it.
    segment.started.sort_by_key(rank);
    segment
}

/// Where a start comes in the order the workload calls its steps.
fn rank(started: &Started) -> usize {
    match started {
        Started::Step(step) => COMPENSATED.iter().position(|s| s == step).unwrap_or(0) * 2,
        Started::Child(_) => 5,
    }
}

/// The step of a compensation's key (`{instance}:rollback:{step}` and
/// suffixes), and its instance.
fn compensated_step(key: &str) -> Option<(&str, &str)> {
    let (instance, rest) = key.split_once(":rollback:")?;
    let end = rest.find(['#', '@', '~']).unwrap_or(rest.len());
    Some((instance, &rest[..end]))
}

/// Compensations run for the started steps only, in reverse start order;
/// a completed child's nest at its place in its parent's.
fn compensations_match_started_steps(run: &Finished, violations: &mut Vec<String>) {
    let segments: BTreeMap<&str, Segment> = run
        .histories
        .iter()
        .map(|(id, history)| (id.as_str(), segment(history)))
        .collect();
    // In the engine's own records.
    for (id, segment) in &segments {
        let steps: Vec<&str> = segment
            .started
            .iter()
            .rev()
            .filter_map(|s| match s {
                Started::Step(step) => Some(step.as_str()),
                Started::Child(_) => None,
            })
            .collect();
        let done: Vec<&str> = segment.compensated.iter().map(String::as_str).collect();
        if !segment.rollback_started && !done.is_empty() {
            violations.push(format!("{id}: compensations {done:?} without a rollback"));
        }
        let whole = segment.rollback_completed;
        if done.len() > steps.len() || done[..] != steps[..done.len()] || whole && done != steps {
            violations.push(format!(
                "{id}: compensated {done:?}, started (reversed) {steps:?}, rollback completed: {whole}"
            ));
        }
    }
    // In the side effects: the first success of each compensation's key.
    let mut first_success: Vec<(&str, &str)> = Vec::new();
    let mut succeeded = BTreeSet::new();
    for effect in &run.effects {
        if let Effect::Compensated { key, ok: true } = effect
            && succeeded.insert(key.as_str())
            && let Some(step) = compensated_step(key)
        {
            first_success.push(step);
        }
    }
    for (id, segment) in &segments {
        if !segment.rollback_completed || segment.restarted || id.contains('.') {
            continue;
        }
        let Some(expected) = expected_compensations(id, &segments, run) else {
            continue;
        };
        let tree: BTreeSet<&str> = expected.iter().map(|(i, _)| *i).collect();
        let actual: Vec<(&str, &str)> = first_success
            .iter()
            .filter(|(instance, _)| tree.contains(instance) || instance == id)
            .copied()
            .collect();
        if actual != expected {
            violations.push(format!(
                "{id}: compensations ran {actual:?}, expected {expected:?}"
            ));
        }
    }
}

/// The compensations a rollback of `id` runs, in order, with the
/// instance each belongs to; `None` when the tree holds what this check
/// does not model (a restarted child, a failed or terminated one).
fn expected_compensations<'a>(
    id: &'a str,
    segments: &'a BTreeMap<&'a str, Segment>,
    run: &Finished,
) -> Option<Vec<(&'a str, &'a str)>> {
    let segment = segments.get(id)?;
    if segment.restarted {
        return None;
    }
    let mut expected = Vec::new();
    for started in segment.started.iter().rev() {
        match started {
            Started::Step(step) => expected.push((id, step.as_str())),
            Started::Child(child) => match run.statuses.get(child.as_str()) {
                Some(Status::Compensated) => {
                    expected.extend(expected_compensations(child, segments, run)?);
                }
                _ => return None,
            },
        }
    }
    Some(expected)
}

/// After the quiet end every instance ended: one that did not waits on
/// nothing that will come.
fn nothing_stranded(run: &Finished, violations: &mut Vec<String>) {
    for (id, status) in &run.statuses {
        if !status.is_terminal() {
            let queued = run
                .queued
                .get(id)
                .map(|(queue, key)| format!(" (started on {}, key {key:?})", queue.name))
                .unwrap_or_default();
            violations.push(format!(
                "{id} is stranded: {status:?} after the quiet end{queued}"
            ));
        }
    }
    for id in &run.ids {
        if !run.statuses.contains_key(id) {
            violations.push(format!("{id} is listed but its status cannot be read"));
        }
    }
}

fn index_agrees_with_journal(run: &Finished, violations: &mut Vec<String>) {
    violations.extend(run.index_disagrees.iter().map(|d| format!("index: {d}")));
}

/// Every record durable before a crash is still there, the same bytes.
fn nothing_durable_lost(run: &Finished, violations: &mut Vec<String>) {
    for (crash, before) in run.before_crashes.iter().enumerate() {
        for (id, records) in before {
            let now: BTreeMap<u64, &Vec<u8>> = run
                .durable
                .get(id)
                .map(|r| r.iter().map(|(seq, bytes)| (*seq, bytes)).collect())
                .unwrap_or_default();
            for (seq, bytes) in records {
                if now.get(seq) != Some(&bytes) {
                    violations.push(format!(
                        "{id}: record {seq}, durable before crash {crash}, is lost or changed"
                    ));
                }
            }
        }
    }
}

/// At no moment are more instances of one queue inside a step body than
/// its concurrency, nor more of one key than its `per_key`. A body runs
/// only while its instance holds a slot, so this bounds the slots held
/// (an instance that gave its slot back for a wait runs no body). A
/// crash ends every body of the process.
fn queue_limits_never_exceeded(run: &Finished, violations: &mut Vec<String>) {
    // Bodies under way, by instance (concurrent steps of one instance
    // count once), of the process that runs now.
    let mut inside: BTreeMap<&str, u32> = BTreeMap::new();
    let mut epoch = 0;
    let mut reported = BTreeSet::new();
    for effect in &run.effects {
        match effect {
            Effect::Crashed { epoch: next } => {
                inside.clear();
                epoch = *next;
            }
            Effect::Began {
                id: instance,
                epoch: e,
            } if *e == epoch => {
                *inside.entry(instance.as_str()).or_default() += 1;
                let Some((queue, key)) = run.queued.get(instance) else {
                    continue;
                };
                let on_queue = |with_key: bool| -> Vec<&str> {
                    inside
                        .keys()
                        .copied()
                        .filter(|other| {
                            run.queued.get(*other).is_some_and(|(q, k)| {
                                q.name == queue.name && (!with_key || k == key)
                            })
                        })
                        .collect()
                };
                let running = on_queue(false);
                if running.len() > queue.concurrency as usize && reported.insert((queue.name, None))
                {
                    violations.push(format!(
                        "queue {} (concurrency {}) runs step bodies of {running:?} at once",
                        queue.name, queue.concurrency
                    ));
                }
                if let (Some(per_key), Some(key)) = (queue.per_key, key) {
                    let running = on_queue(true);
                    if running.len() > per_key as usize && reported.insert((queue.name, Some(*key)))
                    {
                        violations.push(format!(
                            "queue {} (per_key {per_key}) runs step bodies of {running:?}, all with key {key}, at once",
                            queue.name
                        ));
                    }
                }
            }
            Effect::Ended {
                id: instance,
                epoch: e,
            } if *e == epoch => {
                if let Some(n) = inside.get_mut(instance.as_str()) {
                    *n -= 1;
                    if *n == 0 {
                        inside.remove(instance.as_str());
                    }
                }
            }
            _ => {}
        }
    }
}
