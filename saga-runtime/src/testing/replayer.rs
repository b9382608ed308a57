//! Replaying a [`History`] against today's code: a private store seeded
//! with the history's records (under a key of its own: the same history
//! may be replayed twice), a private engine core on a test clock, and
//! the driver's replay mode (`run::replay`), which answers every call from
//! history and stops where history ends.

use std::sync::Arc;

use crate::engine::{Engine, EngineBuilder};
use crate::error::Error;
use crate::error::failure::{Failure, FailureKind};
use crate::journal::Journal;
use crate::names::id::InstanceId;
use crate::run::replay::Replayed as Ran;
use crate::run::runner::Runner;
use crate::seal::{Codec, Sealer};
use crate::store::{IndexRow, SledStore, Store};
use crate::testing::History;
use crate::time::clock::{Clock, TestClock};
use crate::workflow::engine_core::Core;
use crate::workflow::service::Services;
use crate::workflow::{ErasedWorkflow, Workflow};

/// How a replay that found nothing wrong ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Replayed {
    /// The workflow function returned (its output or its error) within
    /// the recorded history: a finished instance's history.
    Returned,
    /// The code reached the end of what history recorded: a call history
    /// never saw, or one still in flight when it was recorded (a step
    /// running, a wait waiting). A live run goes on from there.
    ReachedEnd,
}

/// Why a history does not replay against today's code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// Today's code does not meet the history: a live run would park the
    /// instance `Blocked` with `failure`. A
    /// [`FailureKind::NonDeterminism`] names what history recorded and
    /// what the code calls now ([`ReplayError::non_determinism`]); a
    /// [`FailureKind::Decode`] a stored value that no longer decodes
    /// (give new fields `#[serde(default)]`). Put the change behind
    /// `ctx.patched(..)`, or declare a rename with `renamed_from`.
    #[error("instance {instance:?} would be blocked: {failure}")]
    Diverged {
        /// The instance whose history it is.
        instance: String,
        /// What the instance would be blocked with.
        failure: Failure,
    },
    /// The workflow function panicked on the recorded history; a live run
    /// would end the instance `Errored` and compensate it.
    #[error("instance {instance:?}: the workflow panicked on replay: {message}")]
    Panicked {
        /// The instance whose history it is.
        instance: String,
        /// The panic's message.
        message: String,
    },
    /// The history is of a workflow that is not registered with the
    /// engine ([`Replayer::replay_registered`]), or not the one given.
    #[error(
        "instance {instance:?} runs workflow {workflow:?}, which is not the workflow replayed (or not registered here)"
    )]
    OtherWorkflow {
        /// The instance whose history it is.
        instance: String,
        /// The workflow its history names.
        workflow: String,
    },
    /// The history could not be replayed at all: its records do not read
    /// (a newer release wrote them, [`Error::NewerRelease`]; damage), or
    /// the replay's private store could not be made.
    #[error(transparent)]
    Unusable(#[from] Error),
}

impl ReplayError {
    /// For a divergence of calls: what history recorded there, and what
    /// the code calls now (`step "charge-card"`, `step "fraud-check"`).
    pub fn non_determinism(&self) -> Option<(&str, &str)> {
        match self {
            ReplayError::Diverged { failure, .. } => match failure.kind() {
                FailureKind::NonDeterminism { expected, found } => Some((expected, found)),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Replays `history` against `workflow` with no side effects; see
/// [`Replayer::replay`]. A history whose values are encrypted needs
/// [`Replayer::codec`].
///
/// # Errors
///
/// [`ReplayError::Diverged`] when an instance with this history would be
/// parked `Blocked` by this code; see [`ReplayError`] for the others.
pub async fn replay<W: Workflow>(workflow: W, history: &History) -> Result<Replayed, ReplayError> {
    Replayer::new().replay(workflow, history).await
}

/// Replays histories against today's workflow code, with no side effects.
///
/// Each replay folds the history's records in a store of the replayer's
/// own (a temporary one, removed with the last clone of it), and runs the workflow function there in
/// the driver's replay mode: every step, child, sleep, wait, `now()` and
/// `random()` is answered from history, so nothing runs for real and
/// nothing is recorded anywhere. `ctx.patched(..)` answers as it would
/// live: false where history went past it, true where history ends
/// before it. The first call history holds no answer for ends the replay
/// ([`Replayed::ReachedEnd`]).
#[derive(Clone, Default)]
pub struct Replayer {
    sealer: Sealer,
    services: Option<Arc<Services>>,
    registered: Option<Arc<Runner>>,
    /// The private store and core, made at the first replay and shared by
    /// the clones: each history is seeded under a key of its own.
    bench: Arc<tokio::sync::OnceCell<Bench>>,
}

/// A private engine core on a temporary store that nothing else sees, on
/// a test clock that never moves.
struct Bench {
    core: Arc<Core>,
    store: Arc<dyn Store>,
    /// The key the next history is seeded under.
    next: std::sync::atomic::AtomicU64,
}

impl Drop for Bench {
    fn drop(&mut self) {
        for task in self.core.close() {
            task.abort();
        }
        self.core.journal.stop();
    }
}

impl std::fmt::Debug for Replayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayer")
            .field("codec", &self.sealer.seals())
            .field("engine", &self.registered.is_some())
            .finish_non_exhaustive()
    }
}

impl Replayer {
    /// A replayer for histories whose values are not encrypted.
    pub fn new() -> Replayer {
        Replayer::default()
    }

    /// A replayer that opens encrypted values with `codec` (the engine's
    /// `Keyring`, or one that holds its keys).
    pub fn codec(mut self, codec: impl Codec) -> Replayer {
        self.sealer = Sealer::new(Arc::new(codec));
        self
    }

    /// [`Replayer::codec`] with a codec shared with an engine.
    pub fn codec_arc(mut self, codec: Arc<dyn Codec>) -> Replayer {
        self.sealer = Sealer::new(codec);
        self
    }

    /// A replayer with `engine`'s codec, for the workflows it registers
    /// ([`Replayer::replay_registered`]): what `saga check --replay` uses.
    pub fn of(engine: &Engine) -> Replayer {
        let runner = engine.runner();
        Replayer {
            sealer: runner.core.journal.sealer().clone(),
            services: Some(runner.core.services.clone()),
            registered: Some(runner.clone()),
            bench: Arc::default(),
        }
    }

    /// Replays `history` against `workflow`.
    ///
    /// # Errors
    ///
    /// [`ReplayError::Diverged`] when an instance with this history would
    /// be parked `Blocked` by this code (with both names for a
    /// non-determinism); [`ReplayError::OtherWorkflow`] for a history of
    /// another workflow; see [`ReplayError`] for the others.
    pub async fn replay<W: Workflow>(
        &self,
        workflow: W,
        history: &History,
    ) -> Result<Replayed, ReplayError> {
        self.replay_erased(Arc::new(workflow), history).await
    }

    /// Replays `history` against the workflow it names, as registered with
    /// the engine of [`Replayer::of`].
    ///
    /// # Errors
    ///
    /// [`ReplayError::OtherWorkflow`] when that workflow is not registered
    /// there (or this replayer has no engine); else as
    /// [`Replayer::replay`].
    pub async fn replay_registered(&self, history: &History) -> Result<Replayed, ReplayError> {
        let workflow = self
            .registered
            .as_ref()
            .and_then(|runner| runner.workflow(history.workflow()));
        match workflow {
            Some(workflow) => self.replay_erased(workflow, history).await,
            None => Err(other_workflow(history)),
        }
    }

    async fn replay_erased(
        &self,
        workflow: Arc<dyn ErasedWorkflow>,
        history: &History,
    ) -> Result<Replayed, ReplayError> {
        if workflow.workflow_name() != history.workflow() {
            return Err(other_workflow(history));
        }
        let id = InstanceId::parse(history.instance())?;
        let bench = self
            .bench
            .get_or_try_init(|| async { self.private_bench() })
            .await?;
        let key = format!(
            "replay-{}",
            bench.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        );
        let ran = replay_on(bench, &key, &workflow, &id, history).await;
        // Its records are no use after; its state leaves the cache in turn.
        if let Err(e) = bench.store.remove(&key) {
            tracing::debug!(error = %e, "could not remove a replayed history from the private store");
        }
        let instance = history.instance().to_owned();
        match ran? {
            Ran::Returned => Ok(Replayed::Returned),
            Ran::ReachedEnd => Ok(Replayed::ReachedEnd),
            Ran::Diverged(failure) => Err(ReplayError::Diverged { instance, failure }),
            Ran::Panicked(message) => Err(ReplayError::Panicked { instance, message }),
        }
    }

    /// The private core: a temporary store, a test clock that never moves,
    /// this replayer's codec (and the engine's services, never used: no
    /// step runs).
    fn private_bench(&self) -> Result<Bench, Error> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let store: Arc<dyn Store> = Arc::new(SledStore::temporary()?);
        let clock: Arc<dyn Clock> = Arc::new(TestClock::new());
        let journal = Journal::new(
            store.clone(),
            clock.clone(),
            EngineBuilder::DEFAULT_STORE_TIMEOUT,
        )?
        .with_sealer(self.sealer.clone());
        let mut core = Core::new(
            journal,
            clock,
            runtime,
            EngineBuilder::DEFAULT_MAX_PAYLOAD_BYTES,
            Services::default(),
            std::time::Duration::from_secs(1),
        );
        if let Some(services) = &self.services {
            core.services = services.clone();
        }
        Ok(Bench {
            core: Arc::new(core),
            store,
            next: std::sync::atomic::AtomicU64::new(0),
        })
    }
}

/// Seeds `bench`'s store with `history`'s records under `key`, and
/// replays them as instance `id`'s.
async fn replay_on(
    bench: &Bench,
    key: &str,
    workflow: &Arc<dyn ErasedWorkflow>,
    id: &InstanceId,
    history: &History,
) -> Result<Ran, Error> {
    let mut records = history.records().iter();
    let first_seq = crate::journal::handover::start(history.run());
    if first_seq == 0 {
        if let Some(first) = records.next() {
            bench
                .store
                .create(key, &IndexRow::opaque(&[]), first)
                .await?;
        }
        for (seq, record) in (1u64..).zip(records) {
            bench.store.append(key, seq, record)?;
        }
    } else {
        // A later run of an instance that continued as new: its records
        // at its own sequence numbers, from its hand-over on.
        for (seq, record) in (first_seq..).zip(records) {
            bench.store.append(key, seq, record)?;
        }
    }
    let state = bench
        .core
        .journal
        .state(key)
        .await?
        .ok_or_else(|| Error::UnknownInstance { id: id.to_string() })?;
    // A damaged journal never runs forward again, whatever the code.
    if state.status == crate::model::status::Status::Blocked
        && let Some(failure) = &state.failure
        && matches!(failure.kind(), FailureKind::Corrupt { .. })
    {
        return Ok(Ran::Diverged(failure.clone()));
    }
    Ok(crate::run::replay::replay(&bench.core, workflow, id, &state).await)
}

fn other_workflow(history: &History) -> ReplayError {
    ReplayError::OtherWorkflow {
        instance: history.instance().to_owned(),
        workflow: history.workflow().to_owned(),
    }
}
