//! One seeded run: an engine on a current-thread runtime with paused
//! time, a workload and control calls at moments drawn from the seed,
//! faults and crashes of the simulated store, then a quiet end in which
//! every instance must finish; the checks of `check.rs` after it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use saga_runtime::inspect::Event;
use saga_runtime::testing::TestClock;
use saga_runtime::testing::sim::{Journals, SimDisk, SimFaults, SimRng, TraceHash};
use saga_runtime::{Engine, Status};
use tokio::task::JoinHandle;

use super::check;
use super::workload::{self, Effects, Placement, Plan, QueueSpec, order, shipment};

/// What a run left for the checks and the report.
pub(crate) struct Outcome {
    /// A hash of every write the engine made, in order, and of the trace.
    pub(crate) trace_hash: u64,
    pub(crate) violations: Vec<String>,
    /// What the run did, one line per action.
    pub(crate) trace: Vec<String>,
}

/// What the checks read once the run is over.
pub(crate) struct Finished {
    pub(crate) ids: Vec<String>,
    pub(crate) statuses: BTreeMap<String, Status>,
    pub(crate) histories: BTreeMap<String, Vec<Event>>,
    /// Instances whose index entry disagrees with their journal.
    pub(crate) index_disagrees: Vec<String>,
    pub(crate) effects: Vec<workload::Effect>,
    /// The queue and key of each instance started on a queue.
    pub(crate) queued: BTreeMap<String, (QueueSpec, Option<&'static str>)>,
    /// The durable journals before each crash, and after the run.
    pub(crate) before_crashes: Vec<Journals>,
    pub(crate) durable: Journals,
}

/// Runs `seed` to its end, on a runtime of its own.
pub(crate) fn run(seed: u64) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let outcome = runtime.block_on(World::new(seed).run());
    workload::set_current(None);
    outcome
}

struct World {
    rng: SimRng,
    disk: SimDisk,
    faults: SimFaults,
    clock: TestClock,
    effects: Arc<Effects>,
    engine: Option<Engine>,
    /// The queues every engine of the run declares.
    queues: Vec<QueueSpec>,
    /// Instances planned, then started, in order, and the queue of each
    /// started on one.
    plans: Vec<(String, Plan, Option<Placement>)>,
    started: usize,
    /// Event ids sent so far, some sent again.
    event_ids: Vec<(String, String, bool)>,
    /// Engine calls under way, aborted by a crash.
    calls: Vec<JoinHandle<()>>,
    before_crashes: Vec<Journals>,
    /// Violations seen while the run went on (the others are checked at
    /// its end).
    seen_violations: Vec<String>,
    trace: Vec<String>,
    hash: TraceHash,
    /// Armed crashes that went off and were followed by a reopen.
    armed_handled: u64,
    /// The clock's time when the run began.
    started_at: std::time::SystemTime,
}

impl World {
    fn new(seed: u64) -> World {
        let mut rng = SimRng::new(seed);
        let disk = SimDisk::new(rng.next_u64());
        let faulty = rng.chance(500);
        let faults = if faulty {
            SimFaults {
                failed_write: u32::try_from(rng.below(4)).unwrap_or(0),
                failed_flush: u32::try_from(rng.below(8)).unwrap_or(0),
                slow: u32::try_from(rng.below(200)).unwrap_or(0),
                max_delay: Duration::from_millis(1 + rng.below(3000)),
            }
        } else {
            SimFaults::default()
        };
        let effects = Arc::new(Effects::new(
            rng.fork(),
            u32::try_from(rng.below(400)).unwrap_or(0),
            u32::try_from(rng.below(500)).unwrap_or(0),
        ));
        workload::set_current(Some(effects.clone()));
        let queues = QueueSpec::draw(&mut rng);
        let count = 2 + rng.below(6);
        let plans = (0..count)
            .map(|n| {
                let plan = Plan {
                    ship: rng.chance(500),
                    ship_fails: rng.chance(300),
                    fails_at_end: rng.chance(300),
                };
                (format!("o-{n}"), plan, Placement::draw(&mut rng, &queues))
            })
            .collect();
        let clock = TestClock::new();
        World {
            rng,
            disk,
            faults,
            started_at: saga_runtime::time::Clock::now(&clock),
            armed_handled: 0,
            clock,
            effects,
            engine: None,
            queues,
            plans,
            started: 0,
            event_ids: Vec::new(),
            calls: Vec::new(),
            before_crashes: Vec::new(),
            seen_violations: Vec::new(),
            trace: Vec::new(),
            hash: TraceHash::default(),
        }
    }

    fn note(&mut self, line: String) {
        let at = saga_runtime::time::Clock::now(&self.clock)
            .duration_since(self.started_at)
            .unwrap_or_default();
        let line = format!("[{:>7}s] {line}", at.as_secs());
        self.hash.add(line.as_bytes());
        self.trace.push(line);
    }

    fn engine(&self) -> Engine {
        self.engine.clone().expect("an open engine")
    }

    /// Opens an engine on the disk as it is now; faults are off while it
    /// opens (an engine opens on a store that answers at once).
    fn open(&mut self) {
        self.disk.set_faults(SimFaults::default());
        self.disk.disarm();
        let mut builder = Engine::builder();
        for queue in &self.queues {
            builder = builder.queue(queue.queue());
        }
        let engine = builder
            .clock(self.clock.clone())
            .random_seed(self.rng.next_u64())
            .retention(Duration::from_secs(3650 * 24 * 3600))
            .provide_arc(self.effects.clone())
            .register(order)
            .register(shipment)
            .open_store(Arc::new(self.disk.open()));
        match engine {
            Ok(engine) => self.engine = Some(engine),
            Err(e) => panic!("the engine did not open on the simulated disk: {e}"),
        }
        self.disk.set_faults(self.faults);
    }

    /// Lets every task run until none can, and the runtime's clock move
    /// past the timers due within `for_a_while`.
    async fn settle(&self, for_a_while: Duration) {
        tokio::time::sleep(for_a_while).await;
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
    }

    /// Runs an engine call as a task of its own, as a caller elsewhere
    /// would: it may wait long, and a crash cuts it off.
    fn call<F>(&mut self, what: String, call: impl FnOnce(Engine) -> F)
    where
        F: std::future::Future<Output = saga_runtime::Result<()>> + Send + 'static,
    {
        let future = call(self.engine());
        self.note(what);
        self.calls.push(tokio::spawn(async move {
            let _ = future.await;
        }));
    }

    /// Starts the next planned instance, on its queue if it has one.
    fn start_next(&mut self) {
        let (id, plan, placement) = self.plans[self.started].clone();
        self.started += 1;
        let Some(placement) = placement else {
            self.call(format!("start {id} {plan:?}"), move |e| async move {
                e.start(order, &id, plan).await.map(|_| ())
            });
            return;
        };
        let queue = self.queues[placement.queue].name;
        self.call(
            format!("start {id} {plan:?} on {queue} {placement:?}"),
            move |e| async move {
                let start = e.start_on(queue, order, &id, plan);
                let start = match placement.key {
                    Some(key) => start.key(key),
                    None => start,
                };
                start.priority(placement.priority).await.map(|_| ())
            },
        );
    }

    fn some_started(&mut self) -> Option<String> {
        let n = self.rng.below(self.started as u64);
        (self.started > 0).then(|| self.plans[n as usize].0.clone())
    }

    async fn act(&mut self) {
        match self.rng.below(100) {
            0..=24 if self.started < self.plans.len() => self.start_next(),
            0..=39 => {
                let Some(id) = self.some_started() else {
                    return;
                };
                let again = self.rng.chance(300) && !self.event_ids.is_empty();
                let (event_id, approved) = if again {
                    let (_, event_id, approved) =
                        self.rng.pick(&self.event_ids).cloned().expect("one");
                    (event_id, approved)
                } else {
                    let event_id = format!("ev-{}", self.event_ids.len());
                    let approved = self.rng.chance(700);
                    self.event_ids
                        .push((id.clone(), event_id.clone(), approved));
                    (event_id, approved)
                };
                self.call(
                    format!("event {id} {event_id} {approved}"),
                    move |e| async move {
                        e.event(&id, "approval")
                            .id(event_id)
                            .send(&approved)
                            .await
                            .map(|_| ())
                    },
                );
            }
            40..=59 => {
                let Some(id) = self.some_started() else {
                    return;
                };
                let what = *self
                    .rng
                    .pick(&[
                        "pause",
                        "resume",
                        "terminate",
                        "terminate_with_rollback",
                        "restart_from",
                        "retry_rollback",
                    ])
                    .expect("one");
                self.call(format!("{what} {id}"), move |e| async move {
                    let instance = e.instance(&id).await?;
                    match what {
                        "pause" => instance.pause().await,
                        "resume" => instance.resume().await,
                        "terminate" => instance.terminate().await,
                        "terminate_with_rollback" => instance.terminate_with_rollback().await,
                        "restart_from" => instance.restart_from("charge").await,
                        _ => instance.retry_rollback().await,
                    }
                });
            }
            60..=89 => {
                let by = *self
                    .rng
                    .pick(&[1, 5, 60, 1800, 3600, 4000, 86_400, 90_000])
                    .expect("one");
                self.note(format!("advance {by}s"));
                self.clock.advance(Duration::from_secs(by));
            }
            _ => self.crash().await,
        }
    }

    /// An armed crash went off: the process is gone, a new one opens the
    /// disk.
    async fn reopen_after_armed_crash(&mut self) {
        self.note("crash (armed, at a write)".into());
        self.effects.crashed();
        self.before_crashes.push(self.disk.durable_journals());
        for call in self.calls.drain(..) {
            call.abort();
        }
        self.engine = None;
        self.settle(Duration::from_millis(10)).await;
        self.open();
    }

    /// The process dies where it stands, and a new one opens the disk.
    async fn crash(&mut self) {
        self.before_crashes.push(self.disk.durable_journals());
        let (kept, lost) = self.disk.crash();
        self.effects.crashed();
        self.note(format!("crash (kept {kept} unflushed writes, lost {lost})"));
        for call in self.calls.drain(..) {
            call.abort();
        }
        self.engine = None;
        self.settle(Duration::from_millis(10)).await;
        self.open();
    }

    async fn run(mut self) -> Outcome {
        self.open();
        for queue in self.queues.clone() {
            self.note(format!("queue {queue:?}"));
        }
        let actions = 20 + self.rng.below(60);
        let mut faults_seen = 0;
        for _ in 0..actions {
            self.act().await;
            if self.rng.chance(100) {
                // A crash at an arbitrary await point: after a few polls of
                // whatever the last action set going.
                for _ in 0..self.rng.below(40) {
                    tokio::task::yield_now().await;
                }
                self.crash().await;
            } else if self.rng.chance(150) {
                // A crash at an arbitrary write: between any two records.
                let n = self.rng.below(12);
                self.note(format!("crash armed at write {n}"));
                self.disk.crash_at_write(n);
            }
            if self.rng.chance(400) {
                // The next action comes while this one is under way: a
                // few polls of the engine's tasks, not all of them.
                for _ in 0..self.rng.below(30) {
                    tokio::task::yield_now().await;
                }
                continue;
            }
            let wait = Duration::from_millis(self.rng.below(2000));
            self.settle(wait).await;
            if self.disk.armed_crashes() > self.armed_handled {
                self.armed_handled = self.disk.armed_crashes();
                self.reopen_after_armed_crash().await;
                continue;
            }
            // A store that failed leaves the engine stalled until an
            // operator restarts it, as a real one would.
            if self.disk.faults_injected() > faults_seen {
                faults_seen = self.disk.faults_injected();
                self.crash().await;
                continue;
            }
            // Checked once no slow store call can still be on its way.
            if wait > self.faults.max_delay {
                let found = self.seen_violations.len();
                self.no_alarm_left_behind().await;
                self.no_wait_misses_its_event().await;
                // A fault meanwhile may have stalled what was checked.
                if self.disk.faults_injected() > faults_seen {
                    self.seen_violations.truncate(found);
                }
            }
        }
        self.quiet_end().await;
        let finished = self.finish().await;
        let mut violations = check::all(&finished);
        violations.append(&mut self.seen_violations);
        self.hash.add(&self.disk.trace_hash().to_le_bytes());
        Outcome {
            trace_hash: self.hash.value(),
            violations,
            trace: self.trace,
        }
    }

    /// Once every instance ended, nothing sleeps on the clock: an alarm
    /// left behind would wake an instance that has ended.
    async fn no_alarm_left_behind(&mut self) -> bool {
        let Some(engine) = self.engine.clone() else {
            return false;
        };
        let Ok(listed) = engine
            .list(&saga_runtime::inspect::ListFilter::default())
            .await
        else {
            return false;
        };
        if listed.is_empty() || listed.iter().any(|info| !info.status.is_terminal()) {
            return false;
        }
        let (sleepers, waits) = (self.clock.sleepers(), self.clock.event_waits());
        if sleepers + waits > 0 {
            self.seen_violations.push(format!(
                "{sleepers} sleeps and {waits} event waits left on the clock once every instance ended"
            ));
        }
        true
    }

    /// Once every task ran, no instance waits for an event that came: a
    /// received event of the type a waiting instance awaits was delivered.
    async fn no_wait_misses_its_event(&mut self) {
        let Some(engine) = self.engine.clone() else {
            return;
        };
        let Ok(listed) = engine
            .list(&saga_runtime::inspect::ListFilter::default())
            .await
        else {
            return;
        };
        for info in listed.iter().filter(|i| i.status == Status::Waiting) {
            let Ok(instance) = engine.instance(&info.id).await else {
                continue;
            };
            let Ok(history) = instance.history().await else {
                continue;
            };
            if let Some(missed) = check::missed_event(&history) {
                let at = saga_runtime::time::Clock::now(&self.clock);
                self.seen_violations
                    .push(format!("{}: {missed} (clock at {at:?})", info.id));
            }
        }
    }

    /// No more faults or control calls: what is paused resumes, what
    /// waits for an event gets one, and time moves on until every
    /// instance ended (one that does not is stranded).
    async fn quiet_end(&mut self) {
        self.faults = SimFaults::default();
        self.disk.set_faults(self.faults);
        // A stalled store is restarted; an armed crash is taken back (a
        // crash here would heal what a bug left stranded).
        self.disk.disarm();
        if self.disk.faults_injected() > 0 || self.disk.armed_crashes() > self.armed_handled {
            self.crash().await;
        }
        while self.started < self.plans.len() {
            self.start_next();
        }
        self.note("quiet end".into());
        for round in 0..40 {
            self.settle(Duration::from_secs(1)).await;
            // Children too: a restarted parent's children of the generation
            // before stay as they were, paused ones included (as documented).
            let engine = self.engine();
            let listed = engine
                .list(&saga_runtime::inspect::ListFilter::default())
                .await
                .unwrap_or_default();
            for info in listed {
                let id = info.id;
                match info.status {
                    Status::Paused => {
                        self.call(format!("resume {id}"), move |e| async move {
                            e.instance(&id).await?.resume().await
                        });
                    }
                    Status::Waiting if round % 3 == 0 => {
                        let event_id = format!("end-{id}-{round}");
                        self.call(format!("event {id} {event_id} true"), move |e| async move {
                            e.event(&id, "approval")
                                .id(event_id)
                                .send(&true)
                                .await
                                .map(|_| ())
                        });
                    }
                    _ => {}
                }
            }
            self.settle(Duration::from_secs(1)).await;
            if round > 0 && self.no_alarm_left_behind().await {
                break;
            }
            self.clock.advance(Duration::from_secs(86_400 * 2));
        }
        self.settle(Duration::from_secs(5)).await;
    }

    async fn finish(&mut self) -> Finished {
        let engine = self.engine();
        let mut finished = Finished {
            ids: Vec::new(),
            statuses: BTreeMap::new(),
            histories: BTreeMap::new(),
            index_disagrees: Vec::new(),
            effects: self.effects.log(),
            queued: self
                .plans
                .iter()
                .filter_map(|(id, _, placement)| {
                    let placement = placement.as_ref()?;
                    let spec = self.queues[placement.queue].clone();
                    Some((id.clone(), (spec, placement.key)))
                })
                .collect(),
            before_crashes: std::mem::take(&mut self.before_crashes),
            durable: BTreeMap::new(),
        };
        let listed = engine
            .list(&saga_runtime::inspect::ListFilter::default())
            .await
            .unwrap_or_default();
        for info in &listed {
            let Ok(instance) = engine.instance(&info.id).await else {
                continue;
            };
            let status = instance.status().await.ok();
            if status != Some(info.status) {
                finished.index_disagrees.push(format!(
                    "{}: index says {:?}, journal {:?}",
                    info.id, info.status, status
                ));
            }
            let history = instance.history().await.unwrap_or_default();
            finished.ids.push(info.id.clone());
            if let Some(status) = status {
                finished.statuses.insert(info.id.clone(), status);
            }
            finished.histories.insert(info.id.clone(), history);
        }
        for (id, status) in &finished.statuses {
            self.note(format!("end {id} {status:?}"));
        }
        if std::env::var_os("SAGA_SIM_HISTORIES").is_some() {
            for (id, history) in &finished.histories {
                for event in history {
                    self.trace
                        .push(format!("  {id} {}: {:?}", event.seq, event.kind));
                }
            }
        }
        // Everything stored is durable once the engine closes.
        engine.close().await;
        self.engine = None;
        finished.durable = self.disk.durable_journals();
        finished
    }
}
