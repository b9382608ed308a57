//! The child process: opens the store, (re)starts the scenario's instances,
//! sends their events, and reports on stdout each step it saw complete
//! (`ACK <key>`, printed once the step's future resolved, which is after
//! the flush that made its output durable).
//!
//! Lines it prints: `OPENING`, `OPENED`, `STARTED`, `ACK <key>`, then
//! `IDLE` when every instance ended (a non-final run then waits to be
//! killed), or, in the final run, `FINAL <id> <status>` per instance and
//! `DONE`. `ERROR <what>` and a non-zero exit on anything unexpected.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saga_runtime::context::StepFuture;
use saga_runtime::prelude::*;
use saga_runtime::{BoxFuture, Error};

use super::{ChildEnv, EVENT_TYPE, EventPlan, Plan, Scenario, StepId, forward_key, program};

/// How long the final run waits for every instance to end.
const FINAL_PATIENCE_ENV: &str = "SAGA_CRASH_CHILD_PATIENCE_MS";

/// The fake callee: logs every call before acting, applies each key at
/// most once, and answers as the scenario says.
pub struct Callee {
    scenario: Scenario,
    run: u32,
    applied: PathBuf,
    log: Mutex<(File, HashMap<String, u32>)>,
}

impl Callee {
    fn open(dir: &Path, scenario: Scenario, run: u32) -> std::io::Result<Self> {
        let applied = dir.join("applied");
        std::fs::create_dir_all(&applied)?;
        let path = dir.join("calls.log");
        let mut calls = HashMap::new();
        if path.exists() {
            for line in BufReader::new(File::open(&path)?).lines() {
                let line = line?;
                let fields: Vec<&str> = line.split(' ').collect();
                if let [_, "F" | "R", _, _, _, key] = fields[..] {
                    *calls.entry(key.to_owned()).or_insert(0) += 1;
                }
            }
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(Callee {
            scenario,
            run,
            applied,
            log: Mutex::new((file, calls)),
        })
    }

    /// Appends one fsynced line; returns how many calls of `key` came before.
    fn record(&self, kind: &str, instance: &str, step: StepId, key: &str) -> u32 {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let line = format!(
            "{} {kind} {instance} {} {} {key}\n",
            self.run, step.name, step.occurrence
        );
        log.0
            .write_all(line.as_bytes())
            .expect("append to calls.log");
        log.0.sync_data().expect("fsync calls.log");
        if kind == "A" {
            return 0;
        }
        let count = log.1.entry(key.to_owned()).or_insert(0);
        *count += 1;
        *count - 1
    }

    /// Applies the side effect of `key` unless it was applied before.
    fn apply(&self, key: &str) {
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.applied.join(key))
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => panic!("callee could not apply {key}: {e}"),
        }
    }

    fn forward(&self, instance: &str, step: StepId, key: &str) -> Result<u64, StepError> {
        let before = self.record("F", instance, step, key);
        let answer = self.scenario.answer(key, true);
        if answer.fatal {
            return Err(StepError::fatal(format!("the callee declines {key}")));
        }
        if before < answer.flaky {
            return Err(StepError::retryable(format!("the callee is busy ({key})")));
        }
        self.apply(key);
        Ok(answer.value)
    }

    fn rollback(&self, instance: &str, step: StepId, key: &str) -> Result<(), StepError> {
        let before = self.record("R", instance, step, key);
        if before < self.scenario.answer(key, false).flaky {
            return Err(StepError::retryable(format!("the callee is busy ({key})")));
        }
        self.apply(key);
        Ok(())
    }

    /// The workflow saw the step complete: log it, then tell the parent.
    fn ack(&self, instance: &str, step: StepId) {
        let key = forward_key(instance, &step);
        self.record("A", instance, step, &key);
        println!("ACK {key}");
    }
}

/// The workflow every instance runs; its shape comes from its input.
pub fn saga_workflow(
    callee: Arc<Callee>,
) -> impl Workflow<Input = Plan, Output = u64> + Clone + use<> {
    workflow_fn("crash-saga", move |ctx: WorkflowContext, plan: Plan| {
        run_plan(ctx, callee.clone(), plan)
    })
}

async fn run_plan(
    ctx: WorkflowContext,
    callee: Arc<Callee>,
    plan: Plan,
) -> Result<u64, WorkflowError> {
    let mut total = 0;
    for group in program(&plan) {
        if group[0].name == "capture" {
            ctx.sleep("cool-off", Duration::from_millis(plan.sleep_ms))
                .await?;
            let timeout = match plan.event {
                EventPlan::NoWait => None,
                EventPlan::Sent => Some(Duration::from_secs(120)),
                EventPlan::Missing => Some(Duration::from_millis(30)),
            };
            if let Some(timeout) = timeout {
                let _: String = ctx.wait_for_event("approval", EVENT_TYPE, timeout).await?;
            }
        }
        // Every step of the group starts before any is awaited (a join);
        // the first failure fails the workflow with the others in flight.
        let calls: Vec<_> = group
            .iter()
            .map(|step| (*step, call(&ctx, &callee, &plan.id, *step)))
            .collect();
        for (step, call) in calls {
            total += call.await?;
            callee.ack(&plan.id, step);
        }
    }
    if plan.fail_at_end {
        return Err(WorkflowError::new("the plan fails at the end"));
    }
    Ok(total)
}

fn call(
    ctx: &WorkflowContext,
    callee: &Arc<Callee>,
    instance: &str,
    step: StepId,
) -> StepFuture<u64> {
    let config = StepConfig::default()
        .retries(3)
        .delay(Duration::from_millis(1))
        .backoff(Backoff::Constant)
        .timeout(Duration::from_secs(60));
    let body = {
        let callee = callee.clone();
        let instance = instance.to_owned();
        move |key: IdempotencyKey| {
            let callee = callee.clone();
            let instance = instance.clone();
            async move { callee.forward(&instance, step, key.as_str()) }
        }
    };
    if !step.compensated {
        return ctx.step(step.name, config, body);
    }
    let handler = {
        let callee = callee.clone();
        let instance = instance.to_owned();
        move |input: RollbackInput<u64>| -> BoxFuture<Result<(), StepError>> {
            let callee = callee.clone();
            let instance = instance.clone();
            let key = input.context().key().to_string();
            Box::pin(async move { callee.rollback(&instance, step, &key) })
        }
    };
    let rollback_config = config.retries(5);
    ctx.step_with_rollback(
        step.name,
        config,
        body,
        RollbackRegistration::new(rollback_config, handler),
    )
}

/// Runs the child role when this process is a child; `None` otherwise.
pub fn main_if_child() -> Option<ExitCode> {
    let env = ChildEnv::read()?;
    let scenario = Scenario::by_name(&env.scenario, env.seed);
    Some(ChildEnv::run_on_runtime(child(
        env.dir, scenario, env.run, env.last,
    )))
}

fn error(what: String) -> ExitCode {
    println!("ERROR {}", what.replace('\n', " "));
    ExitCode::from(2)
}

async fn child(dir: PathBuf, scenario: Scenario, run: u32, last: bool) -> ExitCode {
    let callee = match Callee::open(&dir, scenario.clone(), run) {
        Ok(callee) => Arc::new(callee),
        Err(e) => return error(format!("callee: {e}")),
    };
    let workflow = saga_workflow(callee);
    println!("OPENING");
    let engine = match Engine::builder()
        .register(workflow.clone())
        .open(dir.join("store"))
    {
        Ok(engine) => engine,
        Err(e) => return error(format!("open: {e}")),
    };
    println!("OPENED");
    let mut runs = Vec::new();
    for plan in &scenario.plans {
        match engine.start(workflow.clone(), &plan.id, plan.clone()).await {
            Ok(run) => runs.push(run),
            Err(e) => return error(format!("start {}: {e}", plan.id)),
        }
    }
    println!("STARTED");
    for plan in scenario.plans.iter().filter(|p| p.event == EventPlan::Sent) {
        match engine.send_event(&plan.id, EVENT_TYPE, "yes").await {
            Ok(()) | Err(Error::InvalidState { .. }) => {}
            Err(e) => return error(format!("send_event {}: {e}", plan.id)),
        }
    }
    let patience = std::env::var(FINAL_PATIENCE_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(30), Duration::from_millis);
    let all_ended = tokio::time::timeout(patience, async {
        for run in &runs {
            // Errored instances answer with their error: that is an end too.
            let _ = run.result().await;
        }
    })
    .await
    .is_ok();
    if !last {
        return super::idle_until_killed().await;
    }
    let mut stuck = !all_ended;
    for run in &runs {
        match run.status().await {
            Ok(status) => {
                stuck |= !status.is_terminal();
                println!("FINAL {} {status:?}", run.id());
            }
            Err(e) => return error(format!("status {}: {e}", run.id())),
        }
    }
    engine.close().await;
    if stuck {
        return error(format!("not every instance ended within {patience:?}"));
    }
    println!("DONE");
    ExitCode::SUCCESS
}
