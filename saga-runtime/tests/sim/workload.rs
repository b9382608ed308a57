//! The workflows a simulated run drives, written with the macros as users
//! write them, and the side-effect log their bodies write to: a service
//! outside the store, as a callee's database is, so it outlives crashes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use saga_runtime::prelude::*;
use saga_runtime::testing::sim::SimRng;

/// What a body or a compensation did, or what workflow code saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    /// A step body began an attempt with this key.
    Ran { key: String, attempt: u32 },
    /// Workflow code got the output of the step with this key (so it is
    /// durable: the design stores it before the workflow sees it).
    Seen { key: String },
    /// A compensation's attempt with this key, and whether it succeeded.
    Compensated { key: String, ok: bool },
    /// A step body of instance `id` began (`Ran` says with which key), in
    /// the process of this epoch. A queue's limits bound how many
    /// instances are in one at once.
    Began { id: String, epoch: u64 },
    /// That body returned, or its future was dropped.
    Ended { id: String, epoch: u64 },
    /// The process crashed: the bodies it ran are gone with it, and the
    /// next one runs bodies of the next epoch.
    Crashed { epoch: u64 },
}

/// The side-effect log and the draws of the bodies' failures.
pub(crate) struct Effects {
    log: Mutex<Vec<Effect>>,
    rng: Mutex<SimRng>,
    /// A step's attempt fails (retryably) with this chance in 1,000.
    pub(crate) step_failures: u32,
    /// A compensation's attempt fails with this chance in 1,000.
    pub(crate) compensation_failures: u32,
    /// Crashes so far: a body of an epoch before is not running.
    epoch: Mutex<u64>,
}

impl Effects {
    pub(crate) fn new(rng: SimRng, step_failures: u32, compensation_failures: u32) -> Effects {
        Effects {
            log: Mutex::default(),
            rng: Mutex::new(rng),
            step_failures,
            compensation_failures,
            epoch: Mutex::new(0),
        }
    }

    /// The process crashed (before the next one opens the disk).
    pub(crate) fn crashed(&self) {
        let mut epoch = self.epoch.lock().unwrap();
        *epoch += 1;
        self.push(Effect::Crashed { epoch: *epoch });
    }

    pub(crate) fn log(&self) -> Vec<Effect> {
        self.log.lock().unwrap().clone()
    }

    fn push(&self, effect: Effect) {
        self.log.lock().unwrap().push(effect);
    }

    fn fails(&self, per_mille: u32) -> bool {
        self.rng.lock().unwrap().chance(per_mille)
    }

    /// A step body: logs its attempt, takes a while (on the runtime's
    /// clock, so other instances' bodies may run meanwhile), fails as
    /// drawn, answers its key.
    async fn body(&self, step: &StepContext) -> Result<String, StepError> {
        let key = step.key().to_string();
        self.push(Effect::Ran {
            key: key.clone(),
            attempt: step.attempt(),
        });
        let _inside = Inside::new(self, step.instance_id());
        let takes = self.rng.lock().unwrap().below(20);
        tokio::time::sleep(Duration::from_millis(takes)).await;
        if self.fails(self.step_failures) {
            return Err(StepError::retryable("the callee is down"));
        }
        Ok(key)
    }

    /// A compensation: logs its attempt and whether it failed as drawn.
    fn compensate(&self, key: &IdempotencyKey) -> Result<(), StepError> {
        let ok = !self.fails(self.compensation_failures);
        self.push(Effect::Compensated {
            key: key.to_string(),
            ok,
        });
        if ok {
            Ok(())
        } else {
            Err(StepError::retryable("the refund API is down"))
        }
    }
}

/// A step body under way: logs `Began`, and `Ended` when it is dropped,
/// whether it returned or its future was dropped at its await.
struct Inside<'a> {
    effects: &'a Effects,
    instance: String,
    epoch: u64,
}

impl<'a> Inside<'a> {
    fn new(effects: &'a Effects, instance: &str) -> Inside<'a> {
        let epoch = *effects.epoch.lock().unwrap();
        effects.push(Effect::Began {
            id: instance.to_owned(),
            epoch,
        });
        Inside {
            effects,
            instance: instance.to_owned(),
            epoch,
        }
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.effects.push(Effect::Ended {
            id: std::mem::take(&mut self.instance),
            epoch: self.epoch,
        });
    }
}

/// The log of the run under way: workflow code has no services, and a
/// run is one thread's at a time.
static CURRENT: Mutex<Option<Arc<Effects>>> = Mutex::new(None);

pub(crate) fn set_current(effects: Option<Arc<Effects>>) {
    *CURRENT.lock().unwrap() = effects;
}

/// Workflow code saw the output `key` of a step.
fn seen(key: &str) {
    if let Some(effects) = CURRENT.lock().unwrap().as_ref() {
        effects.push(Effect::Seen {
            key: key.to_owned(),
        });
    }
}

/// The steps whose compensations a check expects, by name, in the order
/// the workflows call them (a child comes between "hold" and "pack").
pub(crate) const COMPENSATED: [&str; 4] = ["reserve", "charge", "hold", "pack"];

#[step(name = "reserve", rollback = unreserve, retries = 3, delay = "1 second")]
async fn reserve(step: StepContext, fx: Service<Effects>) -> Result<String, StepError> {
    fx.body(&step).await
}

#[rollback(retries = 2, delay = "1 second")]
async fn unreserve(
    ctx: RollbackContext<'_, String>,
    fx: Service<Effects>,
) -> Result<(), StepError> {
    fx.compensate(ctx.key())
}

#[step(name = "charge", rollback = refund, retries = 2, delay = "1 second")]
async fn charge(step: StepContext, fx: Service<Effects>) -> Result<String, StepError> {
    fx.body(&step).await
}

#[rollback(retries = 2, delay = "1 second")]
async fn refund(ctx: RollbackContext<'_, String>, fx: Service<Effects>) -> Result<(), StepError> {
    fx.compensate(ctx.key())
}

#[step(name = "hold", rollback = release, retries = 2, delay = "1 second")]
async fn hold(step: StepContext, fx: Service<Effects>) -> Result<String, StepError> {
    fx.body(&step).await
}

#[rollback(retries = 2, delay = "1 second")]
async fn release(ctx: RollbackContext<'_, String>, fx: Service<Effects>) -> Result<(), StepError> {
    fx.compensate(ctx.key())
}

#[step(name = "notify", retries = 2, delay = "1 second")]
async fn notify(step: StepContext, fx: Service<Effects>) -> Result<String, StepError> {
    fx.body(&step).await
}

#[step(name = "pack", rollback = unpack, retries = 2, delay = "1 second")]
async fn pack(step: StepContext, fx: Service<Effects>) -> Result<String, StepError> {
    fx.body(&step).await
}

#[rollback(retries = 2, delay = "1 second")]
async fn unpack(ctx: RollbackContext<'_, String>, fx: Service<Effects>) -> Result<(), StepError> {
    fx.compensate(ctx.key())
}

/// A child saga: packs the goods, fails when asked to.
#[workflow(name = "shipment")]
pub(crate) async fn shipment(ctx: WorkflowContext, fail: bool) -> Result<String, WorkflowError> {
    let packed = pack(&ctx).await?;
    seen(&packed);
    if fail {
        return Err(WorkflowError::new("no carrier"));
    }
    Ok(packed)
}

/// What an order does, drawn from the seed.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub(crate) struct Plan {
    /// Ships through a child saga.
    pub(crate) ship: bool,
    /// The child fails.
    pub(crate) ship_fails: bool,
    /// Ends in an error after its approval (so it rolls back).
    pub(crate) fails_at_end: bool,
}

/// A saga of every kind of wait: a step, two concurrent steps, a sleep,
/// an event wait (whose timeout rolls it back), a child, a step without
/// rollback.
#[workflow(name = "order")]
pub(crate) async fn order(ctx: WorkflowContext, plan: Plan) -> Result<u32, WorkflowError> {
    let reserved = reserve(&ctx).await?;
    seen(&reserved);
    let (charged, held) = tokio::join!(charge(&ctx), hold(&ctx));
    let (charged, held) = (charged?, held?);
    seen(&charged);
    seen(&held);
    ctx.sleep("cool-off", "1 hour").await?;
    let approved: bool = ctx.wait_for_event("approval", "approval", "1 day").await?;
    if plan.ship {
        let packed: String = ctx.child("ship", shipment, plan.ship_fails).await?;
        seen(&packed);
    }
    let notified = notify(&ctx).await?;
    seen(&notified);
    if !approved || plan.fails_at_end {
        return Err(WorkflowError::new("not approved"));
    }
    Ok(1)
}

/// A queue a run declares, its limits drawn from the seed.
#[derive(Clone, Debug)]
pub(crate) struct QueueSpec {
    pub(crate) name: &'static str,
    pub(crate) concurrency: u32,
    pub(crate) per_key: Option<u32>,
    pub(crate) release_while_waiting: bool,
}

impl QueueSpec {
    /// The three queues of a run: one that holds its slot, one with a
    /// per-key limit, one that gives its slot back while it waits.
    pub(crate) fn draw(rng: &mut SimRng) -> Vec<QueueSpec> {
        let mut concurrency = || 1 + u32::try_from(rng.below(3)).unwrap_or(0);
        let (hold, keyed, release) = (concurrency(), concurrency(), concurrency());
        let per_key = 1 + u32::try_from(rng.below(2)).unwrap_or(0);
        let release_per_key = rng.chance(300).then_some(1);
        vec![
            QueueSpec {
                name: "q-hold",
                concurrency: hold,
                per_key: None,
                release_while_waiting: false,
            },
            QueueSpec {
                name: "q-key",
                concurrency: keyed,
                per_key: Some(per_key),
                release_while_waiting: false,
            },
            QueueSpec {
                name: "q-release",
                concurrency: release,
                per_key: release_per_key,
                release_while_waiting: true,
            },
        ]
    }

    pub(crate) fn queue(&self) -> Queue {
        let mut queue = Queue::new(self.name).concurrency(self.concurrency);
        if let Some(k) = self.per_key {
            queue = queue.per_key(k);
        }
        if self.release_while_waiting {
            queue = queue.release_while_waiting();
        }
        queue
    }
}

/// Where an instance of the workload waits for a slot, if it is queued.
#[derive(Clone, Debug)]
pub(crate) struct Placement {
    /// An index into the run's queues.
    pub(crate) queue: usize,
    pub(crate) key: Option<&'static str>,
    pub(crate) priority: i32,
}

impl Placement {
    /// None for about half the instances (a plain start); the rest on a
    /// queue, keyed always on the keyed one and sometimes on the others.
    pub(crate) fn draw(rng: &mut SimRng, queues: &[QueueSpec]) -> Option<Placement> {
        if rng.chance(450) {
            return None;
        }
        let queue = usize::try_from(rng.below(queues.len() as u64)).unwrap_or(0);
        let keyed = queues[queue].per_key.is_some() || rng.chance(300);
        let key = if keyed {
            rng.pick(&["k0", "k1"]).copied()
        } else {
            None
        };
        let priority = i32::try_from(rng.below(2)).unwrap_or(0);
        Some(Placement {
            queue,
            key,
            priority,
        })
    }
}
