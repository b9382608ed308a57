//! Durable waits and recorded values: sleeps whose wake time is stored,
//! waits for events sent with `Engine::send_event`, and `now()`/`random()`
//! whose values replay sees again.

use std::future::{Future, pending};
use std::sync::Arc;
use std::time::SystemTime;

use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::codec::Payload;
use crate::error::failure::WaitError;
use crate::journal::{Change, SlotKind, SlotState};
use crate::time::clock::{add_millis, from_millis, to_millis};
use crate::time::duration::IntoDuration;
use crate::workflow::compensation::{BoxFuture, Registered, RollbackRegistration};
use crate::workflow::context::{Ctx, Mode, RunScope, Slot, WorkflowContext};
use crate::workflow::macro_support::{RollbackAttribute, RollbackHandler, register_rollback};

impl WorkflowContext {
    /// Sleeps durably for `duration` (a [`Duration`](std::time::Duration) or a
    /// string such as `"7 days"`). The wake time is stored: a process that
    /// restarts before it sleeps for the rest, one that restarts after it
    /// goes on at once. `name` is the sleep's cache key; its length is not,
    /// so changing the duration does not break replay.
    pub fn sleep(
        &self,
        name: &'static str,
        duration: impl IntoDuration,
    ) -> impl Future<Output = Result<(), WaitError>> + Send + 'static {
        let duration = duration.into_duration();
        let slot = self.run.take_slot(SlotKind::Sleep, name);
        let shared = self.run.scope.clone();
        async move {
            let duration = duration?;
            let wake_at = move |now: u64| add_millis(now, duration);
            sleep_in_slot(shared, slot, name, wake_at).await
        }
    }

    /// Sleeps durably until `time`; see [`sleep`](WorkflowContext::sleep).
    pub fn sleep_until(
        &self,
        name: &'static str,
        time: SystemTime,
    ) -> impl Future<Output = Result<(), WaitError>> + Send + 'static {
        let slot = self.run.take_slot(SlotKind::Sleep, name);
        let shared = self.run.scope.clone();
        let at = to_millis(time);
        sleep_in_slot(shared, slot, name, move |_| at)
    }

    /// Waits for an event of `event_type` sent to this instance with
    /// `Engine::send_event`, for at most `timeout`. An event sent before
    /// the workflow gets here is kept and delivered. A timeout is
    /// [`WaitError::Timeout`], which the workflow may catch.
    ///
    /// A wait may register a compensation of the event it received, to run
    /// at its place in reverse start order if the workflow rolls back (tell
    /// the approver that the trip they approved was cancelled):
    /// [`EventWaitCall::on_rollback`] with a `#[rollback]` handler whose
    /// context holds the event's payload, or
    /// [`EventWaitCall::on_rollback_with`]. A wait that timed out has
    /// nothing to undo.
    pub fn wait_for_event<T: DeserializeOwned + Send + 'static>(
        &self,
        name: &'static str,
        event_type: &str,
        timeout: impl IntoDuration,
    ) -> EventWaitCall<T> {
        EventWaitCall {
            begun: Some(WaitBegun {
                run: self.run.clone(),
                slot: self.run.take_slot(SlotKind::Event, name),
                name,
                event_type: event_type.to_owned(),
                timeout: timeout.into_duration(),
                rollback: None,
                strict: false,
            }),
            running: None,
        }
    }

    /// The current time, recorded: replay gets the same value. Use it
    /// instead of `SystemTime::now()` in workflow code.
    pub fn now(&self) -> impl Future<Output = SystemTime> + Send + 'static {
        let recorded = self.recorded_value(SlotKind::Now, |shared| shared.core.now_millis());
        async move { from_millis(recorded.await) }
    }

    /// A random number, recorded: replay gets the same value. Use it
    /// instead of `rand` in workflow code. Not for cryptography.
    pub fn random(&self) -> impl Future<Output = u64> + Send + 'static {
        self.recorded_value(SlotKind::Random, |shared| shared.core.random.next_u64())
    }

    /// Takes a slot for a value computed once and replayed after.
    fn recorded_value(
        &self,
        kind: SlotKind,
        compute: impl FnOnce(&RunScope) -> u64 + Send + 'static,
    ) -> impl Future<Output = u64> + Send + 'static {
        let slot = self.run.take_slot(kind, kind.value_name());
        let shared = self.run.scope.clone();
        async move {
            let Some(slot) = slot else {
                return pending().await;
            };
            if let Some(SlotState::Value { value }) = slot.recorded.as_ref().map(|r| &r.state) {
                return *value;
            }
            if shared.mode != Mode::Forward || slot.recorded.is_some() {
                return pending().await;
            }
            let value = compute(&shared);
            shared
                .record(Change::ValueRecorded {
                    slot: slot.index,
                    kind,
                    value,
                })
                .await;
            value
        }
    }
}

/// A `ctx.wait_for_event(..)` call: a future of the event's payload. Its
/// slot is taken when the call is made, in call order; the wait begins
/// when it is first polled.
#[must_use = "a wait begins when it is awaited"]
pub struct EventWaitCall<T> {
    begun: Option<WaitBegun<T>>,
    running: Option<BoxFuture<Result<T, WaitError>>>,
}

/// What a wait knows before it is first polled.
struct WaitBegun<T> {
    run: Arc<Ctx>,
    slot: Option<Slot>,
    name: &'static str,
    event_type: String,
    timeout: Result<std::time::Duration, WaitError>,
    rollback: Option<RollbackRegistration<T>>,
    /// Fail the wait on an event that does not decode, instead of setting
    /// it aside ([`EventWaitCall::fail_on_undecodable`]).
    strict: bool,
}

impl<T: DeserializeOwned + Send + 'static> EventWaitCall<T> {
    /// Registers `H`, a `#[rollback]` handler of this wait
    /// (`async fn(ctx: RollbackContext<'_, T>, ..) -> Result<(), E>`,
    /// services after its context), as the wait's compensation: when the
    /// workflow rolls back after the wait received its event, `H` runs at
    /// the wait's place in reverse start order, with the event's payload as
    /// `ctx.output()` and its own key, `"{instance}:rollback:{wait}"`.
    pub fn on_rollback<H>(self) -> Self
    where
        H: RollbackAttribute + RollbackHandler<T, ()>,
    {
        self.on_rollback_with(register_rollback::<H, T, ()>(|config| config, ()))
    }

    /// Fails the wait with [`WaitError::Decode`] when the event it takes
    /// does not decode as `T`. By default such an event is set aside
    /// instead: recorded as rejected (in the history, `saga show` and
    /// `subscribe()`, with the decode error), no longer pending, while the
    /// wait goes on waiting, its timeout unchanged.
    pub fn fail_on_undecodable(mut self) -> Self {
        if let Some(begun) = &mut self.begun {
            begun.strict = true;
        }
        self
    }

    /// Like [`on_rollback`](EventWaitCall::on_rollback), with a
    /// compensation built by hand.
    pub fn on_rollback_with(mut self, rollback: RollbackRegistration<T>) -> Self {
        if let Some(begun) = &mut self.begun {
            begun.rollback = Some(rollback);
        }
        self
    }
}

impl<T: DeserializeOwned + Send + 'static> Future for EventWaitCall<T> {
    type Output = Result<T, WaitError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        if let Some(begun) = self.begun.take() {
            self.running = Some(Box::pin(begun.wait()));
        }
        match &mut self.running {
            Some(running) => running.as_mut().poll(cx),
            None => std::task::Poll::Pending,
        }
    }
}

impl<T: DeserializeOwned + Send + 'static> WaitBegun<T> {
    async fn wait(self) -> Result<T, WaitError> {
        let WaitBegun {
            run,
            slot,
            name,
            event_type,
            timeout,
            rollback,
            strict,
        } = self;
        let shared = run.scope.clone();
        let type_problem = crate::names::check_event_type(&event_type).err();
        let timeout = timeout?;
        let Some(slot) = slot else {
            return pending().await;
        };
        if let Some(problem) = type_problem {
            shared.fail(crate::error::failure::Failure::new(
                crate::error::failure::FailureKind::Workflow,
                problem,
            ));
            return pending().await;
        }
        // Registered as the wait begins (as a step's when it is called):
        // the compensation is the rollback's to run if the wait received.
        let undoable = rollback.is_some();
        if let Some(rollback) = rollback {
            run.register_rollback(Registered::new(
                slot.index,
                &slot.name,
                slot.occurrence,
                slot.generation,
                rollback,
            ));
        }
        drop(run);
        let span = tracing::info_span!(
            "saga.wait",
            instance = %shared.id,
            workflow = %shared.workflow,
            name,
            occurrence = slot.occurrence,
            event_type = %event_type,
        );
        let wait = EventWait {
            scope: shared.clone(),
            slot,
            name,
            event_type,
            undoable,
            decodes: (!strict).then_some(decodes_as::<T> as DecodeCheck),
        };
        let payload = wait.run(timeout).instrument(span).await?;
        // Sealed with a key this engine lacks: not the workflow's error
        // to handle, but the instance's to wait out, parked.
        if let Some(key) = payload.sealed_key() {
            shared.fail(crate::error::failure::Failure::new(
                crate::error::failure::FailureKind::Decode,
                format!(
                    "the event taken by wait {name:?} does not decode: {}",
                    crate::codec::missing_key_detail(key)
                ),
            ));
            return pending().await;
        }
        payload.decode::<T>().map_err(|detail| WaitError::Decode {
            name: name.to_owned(),
            type_name: std::any::type_name::<T>(),
            detail,
        })
    }
}

async fn sleep_in_slot(
    shared: Arc<RunScope>,
    slot: Option<Slot>,
    name: &'static str,
    wake_at: impl FnOnce(u64) -> u64,
) -> Result<(), WaitError> {
    let Some(slot) = slot else {
        return pending().await;
    };
    let span = tracing::info_span!(
        "saga.sleep",
        instance = %shared.id,
        workflow = %shared.workflow,
        name,
        occurrence = slot.occurrence,
    );
    sleep_in_span(shared, slot, name, wake_at)
        .instrument(span)
        .await
}

async fn sleep_in_span(
    shared: Arc<RunScope>,
    slot: Slot,
    name: &'static str,
    wake_at: impl FnOnce(u64) -> u64,
) -> Result<(), WaitError> {
    let wake_at = match slot.recorded.as_ref().map(|r| &r.state) {
        Some(SlotState::Slept) => return Ok(()),
        Some(SlotState::Sleeping { wake_at }) if shared.mode == Mode::Forward => *wake_at,
        None if shared.mode == Mode::Forward => {
            if shared.pause_here() {
                return pending().await;
            }
            let wake_at = wake_at(shared.core.now_millis());
            shared
                .record(Change::SleepStarted {
                    slot: slot.index,
                    name: name.to_owned(),
                    occurrence: slot.occurrence,
                    wake_at,
                })
                .await;
            wake_at
        }
        _ => return pending().await,
    };
    tracing::debug!(wake_at = ?from_millis(wake_at), "sleeping");
    let asleep = shared.asleep_until(slot.index, wake_at);
    shared.core.clock.sleep_until(from_millis(wake_at)).await;
    drop(asleep);
    shared.hold_slot().await;
    tracing::debug!("woke up");
    // Not waited for: the next durable call's flush covers it, and a crash
    // before then sleeps again until the same wake time, which has passed.
    if let Err(e) = shared.append(Change::SleepCompleted { slot: slot.index }) {
        return shared.stall(e).await;
    }
    Ok(())
}

struct EventWait {
    scope: Arc<RunScope>,
    slot: Slot,
    name: &'static str,
    event_type: String,
    /// Whether a compensation is registered for it.
    undoable: bool,
    /// Whether a payload decodes as the wait's type, when an event that
    /// does not is set aside rather than taken.
    decodes: Option<DecodeCheck>,
}

/// Whether a payload decodes as a wait's type; why not when it does not.
type DecodeCheck = fn(&Payload) -> Result<(), String>;

/// Whether `payload` decodes as `T`. One sealed with a key this engine
/// lacks is not rejected here: the wait takes it and parks the instance.
/// It runs under the instance's lock, so a `Deserialize` that panics is
/// caught here and the event is set aside with the panic's message.
fn decodes_as<T: DeserializeOwned>(payload: &Payload) -> Result<(), String> {
    if payload.sealed_key().is_some() {
        return Ok(());
    }
    match crate::panic::catch(|| payload.decode::<T>()) {
        Ok(decoded) => decoded.map(drop),
        Err(panic) => Err(format!("its Deserialize panicked: {panic}")),
    }
}

/// What a look at the pending events found.
enum Taken {
    Payload(Payload),
    /// An event that does not decode, set aside: look again.
    Rejected,
    None,
}

impl EventWait {
    /// The payload of the event this wait takes.
    async fn run(self, timeout: std::time::Duration) -> Result<Payload, WaitError> {
        let shared = &self.scope;
        let deadline = match self.slot.recorded.as_ref().map(|r| &r.state) {
            Some(SlotState::Received { payload, .. }) => return Ok(payload.clone()),
            Some(SlotState::TimedOut { .. }) => return Err(self.timeout_error()),
            Some(SlotState::Waiting { deadline, .. }) if shared.mode == Mode::Forward => *deadline,
            None if shared.mode == Mode::Forward => {
                if shared.pause_here() {
                    return pending().await;
                }
                let deadline = add_millis(shared.core.now_millis(), timeout);
                let (slot, name) = (self.slot.index, self.name.to_owned());
                let (occurrence, event_type) = (self.slot.occurrence, self.event_type.clone());
                shared
                    .record(if self.undoable {
                        Change::WaitStartedWithRollback {
                            slot,
                            name,
                            occurrence,
                            event_type,
                            deadline,
                        }
                    } else {
                        Change::WaitStarted {
                            slot,
                            name,
                            occurrence,
                            event_type,
                            deadline,
                        }
                    })
                    .await;
                deadline
            }
            _ => return pending().await,
        };
        tracing::debug!(deadline = ?from_millis(deadline), "waiting for an event");
        loop {
            let sent = shared.live.event_sent.notified();
            // Taken (or timed out) only while it holds its queue's slot.
            if shared.gave_slot_back()
                && (self.has_pending() || shared.core.now_millis() >= deadline)
            {
                shared.hold_slot().await;
            }
            match self.take_pending() {
                Ok(Taken::Payload(payload)) => {
                    if let Err(e) = shared.core.journal.flush().await {
                        return shared.stall(e).await;
                    }
                    tracing::info!("event received");
                    return Ok(payload);
                }
                Ok(Taken::Rejected) => continue,
                Ok(Taken::None) => {}
                Err(e) => return shared.stall(e).await,
            }
            if shared.core.now_millis() >= deadline {
                shared
                    .record(Change::WaitTimedOut {
                        slot: self.slot.index,
                    })
                    .await;
                tracing::warn!("event wait timed out");
                return Err(self.timeout_error());
            }
            let asleep = shared.waiting_until(self.slot.index, deadline);
            tokio::select! {
                // The event first: one sent as the deadline comes is delivered
                // (the loop looks for it before it times out).
                // Biased: a simulated run picks the same on every replay of its seed.
                biased;
                () = sent => {}
                () = shared.core.clock.event_deadline(from_millis(deadline)) => {}
            }
            drop(asleep);
        }
    }

    /// Whether an event of this wait's type is pending.
    fn has_pending(&self) -> bool {
        let event_type = &self.event_type;
        self.scope
            .core
            .journal
            .read_kept(&self.scope.id, |s| {
                s.pending.values().any(|e| &e.event_type == event_type)
            })
            .unwrap_or(true)
    }

    /// Takes the oldest stored event of this wait's type, if any, in the
    /// same record that makes it this wait's result; or sets it aside, in
    /// a record of its own, when it does not decode as the wait's type.
    fn take_pending(&self) -> crate::Result<Taken> {
        let slot = self.slot.index;
        self.scope.write(|state| {
            let found = state
                .pending
                .iter()
                .find(|(_, e)| e.event_type == self.event_type);
            let Some((event, pending)) = found else {
                return Ok((None, Taken::None));
            };
            let event = *event;
            if let Some(Err(error)) = self.decodes.map(|decodes| decodes(&pending.payload)) {
                tracing::warn!(event_type = %self.event_type, %error, "an event that does not decode was set aside; the wait goes on");
                return Ok((Some(Change::EventRejected { slot, event, error }), Taken::Rejected));
            }
            Ok((
                Some(Change::EventTaken { slot, event }),
                Taken::Payload(pending.payload.clone()),
            ))
        })
    }

    fn timeout_error(&self) -> WaitError {
        WaitError::Timeout {
            name: self.name.to_owned(),
            event_type: self.event_type.clone(),
        }
    }
}
