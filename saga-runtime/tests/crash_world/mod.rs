//! The world of the crash tests: a seeded scenario of saga instances, the
//! child process that runs it against a real store and a fake callee, and
//! the parent that kills and restarts the child and then checks the
//! promises of DESIGN.md §3 against what the callee and the store recorded.
//!
//! The callee lives outside the store, in files that survive the kills: an
//! append-only, fsynced log with one line per call (forward or rollback,
//! instance, step, occurrence, idempotency key) and one file per applied
//! idempotency key (created with `O_EXCL`, so it dedupes as a real callee
//! would). Every decision of the callee (fail, fail for good, which value)
//! is a hash of the seed and the key (and the call's number), so it is the
//! same across restarts.

#![allow(dead_code, unreachable_pub)]

pub mod check;
pub mod child;
pub mod parent;

use serde::{Deserialize, Serialize};

/// Environment of a child process.
pub const ENV_DIR: &str = "SAGA_CRASH_CHILD_DIR";
pub const ENV_SEED: &str = "SAGA_CRASH_CHILD_SEED";
pub const ENV_RUN: &str = "SAGA_CRASH_CHILD_RUN";
pub const ENV_FINAL: &str = "SAGA_CRASH_CHILD_FINAL";
pub const ENV_SCENARIO: &str = "SAGA_CRASH_CHILD_SCENARIO";

/// The event a waiting instance is sent.
pub const EVENT_TYPE: &str = "approved";

/// What a child process is told by its parent (`parent::Launch`), read
/// from its environment; `None` when this process is not a child.
pub struct ChildEnv {
    pub dir: std::path::PathBuf,
    pub seed: u64,
    pub run: u32,
    /// The last run, which must end by itself.
    pub last: bool,
    pub scenario: String,
}

impl ChildEnv {
    pub fn read() -> Option<ChildEnv> {
        let dir = std::path::PathBuf::from(std::env::var_os(ENV_DIR)?);
        let number = |var: &str| -> u64 {
            std::env::var(var)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{var} must be set to a number"))
        };
        Some(ChildEnv {
            dir,
            seed: number(ENV_SEED),
            run: number(ENV_RUN) as u32,
            last: std::env::var(ENV_FINAL).is_ok_and(|v| v == "1"),
            scenario: std::env::var(ENV_SCENARIO).unwrap_or_default(),
        })
    }

    /// Runs `child` on the runtime child processes use.
    pub fn run_on_runtime(
        future: impl std::future::Future<Output = std::process::ExitCode>,
    ) -> std::process::ExitCode {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a Tokio runtime")
            .block_on(future)
    }
}

/// The end of a run that is to be killed: says it is idle, and waits for
/// the kill (an error if it never comes).
pub async fn idle_until_killed() -> std::process::ExitCode {
    println!("IDLE");
    tokio::time::sleep(std::time::Duration::from_secs(120)).await;
    println!("ERROR a run that was to be killed was not");
    std::process::ExitCode::from(2)
}

#[path = "../support/rng.rs"]
mod rng;
pub use rng::{Rng, mix};

/// What happens at an instance's event wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventPlan {
    /// No wait at all.
    NoWait,
    /// The child sends the event; the wait gets it.
    Sent,
    /// Nobody sends it; the short wait times out and fails the workflow.
    Missing,
}

/// One instance's shape: the workflow input, so replay sees the same.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub id: String,
    /// How many times step `reserve` runs (occurrences 0..loops).
    pub loops: u32,
    /// `ship-a` and `ship-b` run joined (else one after the other).
    pub parallel: bool,
    pub sleep_ms: u64,
    pub event: EventPlan,
    /// The workflow returns an error after its last step.
    pub fail_at_end: bool,
}

/// One call site of a step in the workflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StepId {
    pub name: &'static str,
    pub occurrence: u32,
    /// Whether it registers a compensation.
    pub compensated: bool,
}

/// The steps of a plan in call (start) order, grouped by the point of the
/// workflow at which they are called: steps of one group start together
/// (a join), and the wait comes between groups `notify` and `capture`.
pub fn program(plan: &Plan) -> Vec<Vec<StepId>> {
    let step = |name, occurrence, compensated| StepId {
        name,
        occurrence,
        compensated,
    };
    let mut groups = vec![vec![step("debit", 0, true)]];
    for i in 0..plan.loops {
        groups.push(vec![step("reserve", i, true)]);
    }
    if plan.parallel {
        groups.push(vec![step("ship-a", 0, true), step("ship-b", 0, true)]);
    } else {
        groups.push(vec![step("ship-a", 0, true)]);
        groups.push(vec![step("ship-b", 0, true)]);
    }
    groups.push(vec![step("notify", 0, false)]);
    groups.push(vec![step("capture", 0, true)]);
    groups
}

/// The documented forward key: `"{instance}:{step}"`, `#{occurrence}` from the second call.
pub fn forward_key(instance: &str, step: &StepId) -> String {
    with_occurrence(format!("{instance}:{}", step.name), step.occurrence)
}

/// The documented rollback key: `"{instance}:rollback:{step}"`.
pub fn rollback_key(instance: &str, step: &StepId) -> String {
    with_occurrence(
        format!("{instance}:rollback:{}", step.name),
        step.occurrence,
    )
}

fn with_occurrence(key: String, occurrence: u32) -> String {
    if occurrence == 0 {
        key
    } else {
        format!("{key}#{occurrence}")
    }
}

/// How the callee answers calls of one key: the first `flaky` calls fail
/// (retryably), every call fails for good when `fatal`.
#[derive(Clone, Copy, Debug)]
pub struct Answer {
    pub fatal: bool,
    pub flaky: u32,
    pub value: u64,
}

/// The instances of one seed and how the callee treats their keys.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    pub name: &'static str,
    pub plans: Vec<Plan>,
    /// Percent of forward keys that fail for good.
    pub fatal_percent: u64,
}

impl Scenario {
    /// `random`: two to four instances of random shapes.
    pub fn random(seed: u64) -> Self {
        let mut rng = Rng::new(seed ^ 0x5eed);
        let count = 2 + rng.below(3);
        let plans = (0..count)
            .map(|i| Plan {
                id: format!("s{seed}-i{i}"),
                loops: 1 + rng.below(2) as u32,
                parallel: rng.below(2) == 0,
                sleep_ms: rng.below(25),
                event: match rng.below(6) {
                    0 => EventPlan::Missing,
                    1 | 2 => EventPlan::NoWait,
                    _ => EventPlan::Sent,
                },
                fail_at_end: rng.below(8) == 0,
            })
            .collect();
        Scenario {
            seed,
            name: "random",
            plans,
            fatal_percent: 6,
        }
    }

    /// `saga`: one instance that runs every kind of call and then fails,
    /// so its whole rollback runs too (for the exhaustive failpoint test).
    pub fn one_saga(seed: u64) -> Self {
        Scenario {
            seed,
            name: "saga",
            plans: vec![Plan {
                id: "saga-1".into(),
                loops: 2,
                parallel: false,
                sleep_ms: 5,
                event: EventPlan::Sent,
                fail_at_end: true,
            }],
            fatal_percent: 0,
        }
    }

    pub fn by_name(name: &str, seed: u64) -> Self {
        match name {
            "saga" => Scenario::one_saga(seed),
            _ => Scenario::random(seed),
        }
    }

    pub fn answer(&self, key: &str, forward: bool) -> Answer {
        let k = key.as_bytes();
        Answer {
            fatal: forward && mix(self.seed, &[b"fatal", k]) % 100 < self.fatal_percent,
            flaky: (mix(self.seed, &[b"flaky", k]) % 3) as u32,
            value: mix(self.seed, &[b"value", k]) % 1000,
        }
    }

    /// How an instance must end: `Ok(output)`, or `Err(g)` when it fails
    /// after calling the steps of groups `0..=g` of its [`program`].
    pub fn predict(&self, plan: &Plan) -> Result<u64, usize> {
        let groups = program(plan);
        let mut total = 0;
        for (at, group) in groups.iter().enumerate() {
            if group[0].name == "capture" && plan.event == EventPlan::Missing {
                return Err(at - 1);
            }
            for step in group {
                let answer = self.answer(&forward_key(&plan.id, step), true);
                if answer.fatal {
                    return Err(at);
                }
                total += answer.value;
            }
        }
        if plan.fail_at_end {
            return Err(groups.len() - 1);
        }
        Ok(total)
    }
}
