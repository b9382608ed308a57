//! `explore`: a user's workflow under every failure the engine can
//! inject (see [`explore`]), and the report of what each came to.

mod report;
mod scenario;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::engine::{Engine, EngineBuilder};
use crate::error::{Error, Result};
use crate::journal::SlotKind;
use crate::model::history::{Event, EventKind};
use crate::model::status::Status;
use crate::testing::sim::SimDisk;
use crate::time::clock::TestClock;
use crate::workflow::Workflow;
use crate::workflow::fault::{Attempt, FaultPlan, Site, When};
use crate::workflow::service::Services;

pub use self::report::{Explored, Outcome, Report, Unguarded, Verdict};
pub use self::scenario::{Scenario, ScenarioKind};

use self::scenario::Fault;

/// The id of the explored instance.
pub(crate) const INSTANCE: &str = "explored";

/// The seed of every scenario's simulated disk: which unflushed writes a
/// crash keeps.
const DISK_SEED: u64 = 0x5a6a;

/// The most writes a crash series goes through: a workflow that writes
/// more is cut there.
const MAX_CRASH_WRITES: u64 = 5_000;

/// The most times a scenario moves the clock on before it gives up on
/// the instance ending (a workflow that loops on sleeps forever).
const MAX_ROUNDS: usize = 10_000;

type AddService = Arc<dyn Fn(&mut Services) + Send + Sync>;
type Configure = Arc<dyn Fn(EngineBuilder) -> EngineBuilder + Send + Sync>;
type Invariant = Arc<dyn Fn(&Outcome) -> std::result::Result<(), String> + Send + Sync>;

/// An exploration of one workflow with one input, set up by [`explore`]
/// and run by [`run`](Explorer::run).
#[must_use = "nothing is explored until `run()`"]
pub struct Explorer<W: Workflow> {
    workflow: W,
    input: W::Input,
    services: Vec<AddService>,
    configure: Vec<Configure>,
    invariants: Vec<Invariant>,
    events: Vec<(String, std::result::Result<serde_json::Value, String>)>,
}

/// Explores `workflow` started with `input` under every failure the
/// engine can inject, each outcome checked by the invariants you give.
///
/// It runs your `#[workflow]` as you
/// wrote it, with your services as test doubles, once without failure and
/// then once per failure point that first run showed:
///
/// - each step failing for good at each attempt it ran, once before its
///   body runs and once after (the effect happened, the reply was lost:
///   the case that shows a compensation trusting `output() == None`);
/// - each compensation failing once (before, then after its body ran),
///   during the rollback that runs the most compensations; it is retried
///   by its own retries, or by `retry_rollback()` when it has none;
/// - a crash at every write to the store, during the first run and during
///   that rollback: the process dies there, only the durable part of the
///   store (and a prefix of what was not flushed) survives, and a new
///   process opens it and goes on.
///
/// The failures come from the engine, before or after your step's body:
/// your steps and test doubles stay as they are. Each scenario gets fresh
/// services ([`Explorer::service`]), and keeps them across its crash, as
/// a bank outlives your process. After each scenario the instance has
/// ended (or waits on nothing that can come), and every
/// [`invariant`](Explorer::invariant) is asked about the [`Outcome`].
///
/// The [`Report`] lists every scenario with its [`Verdict`], and every
/// started step with side effects (not `read_only`) and no rollback: an
/// effect that a rollback leaves in place.
///
/// It is deterministic: scenarios run one after the other on a
/// current-thread runtime of their own, on a
/// [`TestClock`](crate::testing::TestClock) moved to each next sleep, retry or
/// deadline, and a simulated store ([`sim`](crate::testing::sim)) that
/// answers at once. No real time passes, and the same workflow and input
/// give the same report. Your test doubles answer at once too: a step
/// body that waits real time (a Tokio sleep) is taken for one that waits
/// on something that never comes.
///
/// ```
/// use std::sync::Mutex;
/// use saga_runtime::prelude::*;
/// use saga_runtime::testing::explore;
///
/// /// A test double: one account, whose ledger applies each key once.
/// #[derive(Default)]
/// struct Wallet(Mutex<Vec<(String, i64)>>);
///
/// impl Wallet {
///     fn post(&self, key: &str, cents: i64) {
///         let mut ledger = self.0.lock().unwrap();
///         if !ledger.iter().any(|(k, _)| k == key) {
///             ledger.push((key.to_owned(), cents));
///         }
///     }
///     fn balance(&self) -> i64 {
///         self.0.lock().unwrap().iter().map(|(_, c)| c).sum()
///     }
/// }
///
/// #[step(name = "charge", rollback = refund)]
/// async fn charge(key: IdempotencyKey, wallet: Service<Wallet>, cents: i64) -> Result<(), StepError> {
///     wallet.post(key.as_str(), -cents);
///     Ok(())
/// }
///
/// #[rollback]
/// async fn refund(ctx: RollbackContext<'_, ()>, cents: i64, wallet: Service<Wallet>) -> Result<(), StepError> {
///     // Asks the wallet, not `ctx.output()`: the charge may have happened
///     // with its reply lost (then its output is `None`), or not at all.
///     let charged = ctx.step_key().as_str();
///     if wallet.0.lock().unwrap().iter().any(|(k, _)| k == charged) {
///         wallet.post(ctx.key().as_str(), cents);
///     }
///     Ok(())
/// }
///
/// #[step(name = "ship", read_only)]
/// async fn ship() -> Result<(), StepError> {
///     Ok(())
/// }
///
/// #[workflow(name = "order")]
/// async fn order(ctx: WorkflowContext, cents: i64) -> Result<(), WorkflowError> {
///     charge(&ctx, cents).await?;
///     ship(&ctx).await?;
///     Ok(())
/// }
///
/// let report = explore(order, 500)
///     .service(Wallet::default)
///     .invariant(|outcome| {
///         let balance = outcome.service::<Wallet>()?.balance();
///         match outcome.status() {
///             Status::Complete if balance == -500 => Ok(()),
///             Status::Errored if balance == 0 => Ok(()),
///             status => Err(format!("{status:?} with a balance of {balance}")),
///         }
///     })
///     .run()
///     .unwrap();
/// println!("{report}");
/// report.assert_ok();
/// ```
pub fn explore<W>(workflow: W, input: W::Input) -> Explorer<W>
where
    W: Workflow + Clone,
    W::Input: Clone,
{
    Explorer {
        workflow,
        input,
        services: Vec::new(),
        configure: Vec::new(),
        invariants: Vec::new(),
        events: Vec::new(),
    }
}

/// What one scenario ran into, for the scenarios drawn from it.
struct Ran {
    verdict: Verdict,
    status: Status,
    /// Every attempt of a step or a compensation, in order.
    seen: Vec<Attempt>,
    /// Whether its armed crash went off.
    crashed: bool,
    /// The started steps with side effects and no rollback.
    unguarded: Vec<String>,
}

/// How a process's part of a scenario ended.
enum Drive {
    /// The armed crash went off: a new process takes over.
    Crashed,
    /// The instance ended, or waits on nothing that can come.
    Stopped,
}

impl<W> Explorer<W>
where
    W: Workflow + Clone,
    W::Input: Clone,
{
    /// Gives each scenario a fresh service made by `make`, as
    /// [`EngineBuilder::provide`] would: the test double of a bank, a
    /// mailer, a database. The invariants read it back with
    /// [`Outcome::service`].
    pub fn service<T: Send + Sync + 'static>(
        mut self,
        make: impl Fn() -> T + Send + Sync + 'static,
    ) -> Self {
        self.services
            .push(Arc::new(move |services| services.insert(Arc::new(make()))));
        self
    }

    /// Sets up each scenario's engine further: the child workflows the
    /// explored one starts (`|b| b.register(child)`), a payload limit, a
    /// codec. Its clock and store are the exploration's.
    pub fn configure(
        mut self,
        configure: impl Fn(EngineBuilder) -> EngineBuilder + Send + Sync + 'static,
    ) -> Self {
        self.configure.push(Arc::new(configure));
        self
    }

    /// Sends the event `event_type` with `payload` to the instance right
    /// after it starts, as a caller would (it is kept until the workflow
    /// waits for it). An event not sent makes its wait time out.
    pub fn event<P: Serialize + ?Sized>(mut self, event_type: &str, payload: &P) -> Self {
        let encoded = serde_json::to_value(payload).map_err(|e| {
            format!("the payload of event {event_type:?} does not encode as JSON: {e}")
        });
        self.events.push((event_type.to_owned(), encoded));
        self
    }

    /// Checks `invariant` after every scenario that ended well (completed
    /// or rolled back): `Err(message)` breaks it, and the scenario fails
    /// with the message. "Money is conserved" reads the services with
    /// [`Outcome::service`] and the end with [`Outcome::status`].
    pub fn invariant(
        mut self,
        invariant: impl Fn(&Outcome) -> std::result::Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.invariants.push(Arc::new(invariant));
        self
    }

    /// Runs every scenario, one after the other, on a runtime of its own
    /// (on a thread of its own when called inside a Tokio runtime, so a
    /// `#[tokio::test]` may call it too; call it from a plain `#[test]`).
    ///
    /// # Errors
    ///
    /// What keeps the exploration from running at all: an event payload
    /// that does not encode, a service the workflow needs and was not
    /// given ([`Error::MissingService`]), a workflow that does not
    /// register. A scenario that ends badly is in the report, not an
    /// error. A panic in an invariant is passed on.
    pub fn run(self) -> Result<Report>
    where
        W::Input: Send,
    {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.run_here();
        }
        std::thread::scope(|scope| match scope.spawn(|| self.run_here()).join() {
            Ok(report) => report,
            Err(panic) => std::panic::resume_unwind(panic),
        })
    }

    fn run_here(self) -> Result<Report> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| Error::InvalidArgument(format!("no runtime for explore: {e}")))?;
        runtime.block_on(self.explore())
    }

    /// The scenarios, in order: no failure; each step's each attempt
    /// failing for good, before and after its body; each compensation of
    /// the deepest rollback failing once; a crash at each write of the
    /// first run and of that rollback.
    async fn explore(&self) -> Result<Report> {
        for (event_type, payload) in &self.events {
            if let Err(why) = payload {
                return Err(Error::InvalidArgument(format!(
                    "explore: {why} (event {event_type:?})"
                )));
            }
        }
        let mut report = Tally::default();
        let first = self.scenario(&Fault::None, &mut report).await?;
        // The deepest rollback: the scenario whose rollback ran the most
        // compensations (the later one of a tie: more steps ran first).
        let mut deepest: Option<(Vec<Attempt>, Fault)> = None;
        for at in distinct(&first.seen, Site::Step, false) {
            for when in [When::BeforeBody, When::AfterBody] {
                let fault = Fault::Step {
                    at: at.clone(),
                    when,
                };
                let ran = self.scenario(&fault, &mut report).await?;
                let compensations = distinct(&ran.seen, Site::Compensation, true);
                if ran.status == Status::Errored
                    && deepest
                        .as_ref()
                        .is_none_or(|(most, _)| compensations.len() >= most.len())
                {
                    deepest = Some((compensations, fault));
                }
            }
        }
        if let Some((compensations, during)) = &deepest {
            for at in compensations {
                for when in [When::BeforeBody, When::AfterBody] {
                    let fault = Fault::Compensation {
                        at: at.clone(),
                        when,
                        during: Box::new(during.clone()),
                    };
                    self.scenario(&fault, &mut report).await?;
                }
            }
        }
        let mut crashed_runs = vec![Fault::None];
        crashed_runs.extend(deepest.map(|(_, fault)| fault));
        for during in crashed_runs {
            for write in 0..MAX_CRASH_WRITES {
                let fault = Fault::Crash {
                    write,
                    during: Box::new(during.clone()),
                };
                if !self.scenario(&fault, &mut report).await?.crashed {
                    // Past its last write: the run is the one without a crash.
                    report.take_back();
                    break;
                }
            }
        }
        Ok(report.into_report(self.workflow.name()))
    }

    /// Runs one scenario and adds it to `tally`.
    async fn scenario(&self, fault: &Fault, tally: &mut Tally) -> Result<Ran> {
        let mut services = Services::default();
        for add in &self.services {
            add(&mut services);
        }
        let disk = SimDisk::new(DISK_SEED);
        let clock = TestClock::new();
        let plan = Arc::new(FaultPlan::new(fault.injections()));
        let mut engine = self.open(&disk, &clock, &plan, &services)?;
        if let Some(write) = fault.crash_at() {
            disk.crash_at_write(write);
        }
        let mut crashed = false;
        let mut retried = false;
        loop {
            match self
                .drive(&engine, &disk, &clock, crashed, &mut retried)
                .await?
            {
                Drive::Stopped => break,
                Drive::Crashed => {
                    crashed = true;
                    drop(engine);
                    // The dead process's tasks end (aborted) before the
                    // next one opens the disk.
                    for _ in 0..64 {
                        tokio::task::yield_now().await;
                    }
                    engine = self.open(&disk, &clock, &plan, &services)?;
                }
            }
        }
        let outcome = self.outcome(&engine, services).await?;
        let unguarded = self.unguarded(&engine).await?;
        engine.close().await;
        let verdict = self.verdict(&outcome);
        let ran = Ran {
            verdict: verdict.clone(),
            status: outcome.status,
            seen: plan.seen(),
            crashed,
            unguarded,
        };
        tally.add(
            Scenario {
                fault: fault.clone(),
            },
            &ran,
        );
        Ok(ran)
    }

    /// An engine of a process on `disk`, with the scenario's services and
    /// failures.
    fn open(
        &self,
        disk: &SimDisk,
        clock: &TestClock,
        plan: &Arc<FaultPlan>,
        services: &Services,
    ) -> Result<Engine> {
        let mut builder = Engine::builder();
        for configure in &self.configure {
            builder = configure(builder);
        }
        builder
            .clock(clock.clone())
            .random_seed(DISK_SEED)
            .retention(std::time::Duration::from_secs(3650 * 24 * 3600))
            .provide_all(services)
            .inject(plan.clone())
            .register(self.workflow.clone())
            .open_store(Arc::new(disk.open()))
    }

    /// Starts the instance (again, after a crash: a start of an id that
    /// exists is a no-op), sends the events, and moves the clock on until
    /// the instance ends, waits on nothing that can come, or the armed
    /// crash goes off. A rollback that gives up is retried once.
    async fn drive(
        &self,
        engine: &Engine,
        disk: &SimDisk,
        clock: &TestClock,
        crashed: bool,
        retried: &mut bool,
    ) -> Result<Drive> {
        let crash_went_off = || !crashed && disk.armed_crashes() > 0;
        let started = engine
            .start(self.workflow.clone(), INSTANCE, self.input.clone())
            .await;
        if let Err(e) = started {
            return if crash_went_off() {
                Ok(Drive::Crashed)
            } else {
                Err(e)
            };
        }
        for (n, (event_type, payload)) in self.events.iter().enumerate() {
            let Ok(payload) = payload else { continue };
            // An instance that ended takes no event: that is no failure.
            let sent = engine
                .event(INSTANCE, event_type)
                .id(format!("explore-{n}"))
                .send(payload)
                .await;
            if sent.is_err() && crash_went_off() {
                return Ok(Drive::Crashed);
            }
        }
        for _ in 0..MAX_ROUNDS {
            if settle(engine, &crash_went_off).await {
                return Ok(Drive::Crashed);
            }
            let looked = async {
                let instance = engine.instance(INSTANCE).await?;
                let status = instance.status().await?;
                let history = match status {
                    Status::Errored => instance.history().await?,
                    _ => Vec::new(),
                };
                Ok::<_, Error>((instance, status, history))
            }
            .await;
            let (instance, status, history) = match looked {
                Ok(looked) => looked,
                Err(_) if crash_went_off() => return Ok(Drive::Crashed),
                Err(e) => return Err(e),
            };
            if status == Status::Errored && !*retried && rollback_gave_up(&history) {
                // As an operator would, once the downstream is back.
                *retried = true;
                let retrying = instance.clone();
                let retry = tokio::spawn(async move { retrying.retry_rollback().await });
                // It returns once the compensations ran, which may take the
                // clock moving on: on its way once the instance left
                // `Errored` (the engine drives it from there).
                while !retry.is_finished() && matches!(instance.status().await, Ok(Status::Errored))
                {
                    tokio::task::yield_now().await;
                }
                continue;
            }
            if status.is_terminal() || status == Status::Blocked {
                return Ok(Drive::Stopped);
            }
            if clock.advance_to_next_wake().is_none() {
                return Ok(Drive::Stopped);
            }
        }
        Ok(Drive::Stopped)
    }

    async fn outcome(&self, engine: &Engine, services: Services) -> Result<Outcome> {
        let instance = engine.instance(INSTANCE).await?;
        Ok(Outcome {
            status: instance.status().await?,
            history: instance.history().await?,
            services,
        })
    }

    /// The started steps with no rollback whose step function is not
    /// `read_only` (a `ctx.step` closure counts: the engine cannot tell).
    async fn unguarded(&self, engine: &Engine) -> Result<Vec<String>> {
        let table = self.workflow.steps();
        let journal = &engine.runner().core.journal;
        journal
            .read(INSTANCE, |state| {
                state
                    .slots
                    .values()
                    .filter(|slot| slot.kind == SlotKind::Step && !slot.has_rollback)
                    .filter(|slot| {
                        !table
                            .iter()
                            .any(|step| step.name == slot.name && step.read_only)
                    })
                    .map(|slot| slot.name.clone())
                    .collect()
            })
            .await
    }

    fn verdict(&self, outcome: &Outcome) -> Verdict {
        let verdict = outcome.verdict();
        if !verdict.is_ok() {
            return verdict;
        }
        for invariant in &self.invariants {
            if let Err(message) = invariant(outcome) {
                return Verdict::InvariantBroken(message);
            }
        }
        verdict
    }
}

/// Lets the engine's tasks run until none can, or the armed crash goes
/// off (`true`). It only yields: the simulated store answers at once, and
/// the engine's time is the scenario's [`TestClock`].
async fn settle(engine: &Engine, crash_went_off: &impl Fn() -> bool) -> bool {
    loop {
        if crash_went_off() {
            return true;
        }
        if engine.is_idle() {
            return false;
        }
        tokio::task::yield_now().await;
    }
}

/// Whether the last rollback of `history` gave up.
fn rollback_gave_up(history: &[Event]) -> bool {
    history
        .iter()
        .rev()
        .find_map(|event| match event.kind {
            EventKind::RollbackFailed { .. } => Some(true),
            EventKind::RollbackCompleted | EventKind::RollbackRetried => Some(false),
            _ => None,
        })
        .unwrap_or(false)
}

/// The attempts at `site` of `seen`, each once, in order; `first_only`
/// keeps the first attempts alone.
fn distinct(seen: &[Attempt], site: Site, first_only: bool) -> Vec<Attempt> {
    let mut out: Vec<Attempt> = Vec::new();
    for at in seen {
        if at.site == site && !(first_only && at.attempt != 1) && !out.contains(at) {
            out.push(at.clone());
        }
    }
    out
}

/// The report as it grows.
#[derive(Default)]
struct Tally {
    explored: Vec<Explored>,
    /// Per step without rollback: the scenarios it started in, and
    /// whether each rolled back.
    unguarded: BTreeMap<String, Vec<(usize, bool)>>,
}

impl Tally {
    fn add(&mut self, scenario: Scenario, ran: &Ran) {
        let number = self.explored.len() + 1;
        for step in &ran.unguarded {
            let rolled_back = ran.status == Status::Errored;
            let seen = self.unguarded.entry(step.clone()).or_default();
            if !seen.iter().any(|(n, _)| *n == number) {
                seen.push((number, rolled_back));
            }
        }
        self.explored.push(Explored {
            number,
            scenario,
            verdict: ran.verdict.clone(),
        });
    }

    /// Takes back the last scenario (a crash that never went off).
    fn take_back(&mut self) {
        let Some(last) = self.explored.pop() else {
            return;
        };
        for seen in self.unguarded.values_mut() {
            seen.retain(|(n, _)| *n != last.number);
        }
        self.unguarded.retain(|_, seen| !seen.is_empty());
    }

    fn into_report(self, workflow: &str) -> Report {
        Report {
            workflow: workflow.to_owned(),
            explored: self.explored,
            unguarded: self
                .unguarded
                .into_iter()
                .map(|(step, seen)| Unguarded {
                    step,
                    started: seen.len(),
                    left_in_place: seen
                        .iter()
                        .filter(|(_, rolled_back)| *rolled_back)
                        .map(|(n, _)| *n)
                        .collect(),
                })
                .collect(),
        }
    }
}
