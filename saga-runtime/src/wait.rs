//! Durable waits and recorded values: sleeps whose wake time is stored,
//! waits for events sent with `Engine::send_event`, and `now()`/`random()`
//! whose values replay sees again.

use std::future::{Future, pending};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::SystemTime;

use serde::de::DeserializeOwned;

use crate::clock::{add_millis, from_millis, to_millis};
use crate::codec::{decode_payload, encode_payload};
use crate::context::{Mode, Shared, Slot, WorkflowContext};
use crate::duration::IntoDuration;
use crate::engine::Txn;
use crate::error::Result;
use crate::failure::WaitError;
use crate::history::EventKind;
use crate::record::{SlotKind, SlotRecord, SlotState};
use crate::status::Status;
use crate::store::Op;

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
        let slot = self.ctx.take_slot(SlotKind::Sleep, name);
        let shared = self.ctx.shared.clone();
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
        let slot = self.ctx.take_slot(SlotKind::Sleep, name);
        let shared = self.ctx.shared.clone();
        let at = to_millis(time);
        sleep_in_slot(shared, slot, name, move |_| at)
    }

    /// Waits for an event of `event_type` sent to this instance with
    /// `Engine::send_event`, for at most `timeout`. An event sent before
    /// the workflow gets here is kept and delivered. A timeout is
    /// [`WaitError::Timeout`], which the workflow may catch.
    pub fn wait_for_event<T: DeserializeOwned + Send + 'static>(
        &self,
        name: &'static str,
        event_type: &str,
        timeout: impl IntoDuration,
    ) -> impl Future<Output = Result<T, WaitError>> + Send + 'static {
        let timeout = timeout.into_duration();
        let slot = self.ctx.take_slot(SlotKind::Event, name);
        let shared = self.ctx.shared.clone();
        let event_type = event_type.to_owned();
        async move {
            let timeout = timeout?;
            let Some(slot) = slot else {
                return pending().await;
            };
            let wait = EventWait {
                shared,
                slot,
                name,
                event_type,
            };
            let payload = wait.run(timeout).await?;
            decode_payload::<T>(&payload).map_err(|detail| WaitError::Decode {
                name: name.to_owned(),
                type_name: std::any::type_name::<T>(),
                detail,
            })
        }
    }

    /// The current time, recorded: replay gets the same value. Use it
    /// instead of `SystemTime::now()` in workflow code.
    pub fn now(&self) -> impl Future<Output = SystemTime> + Send + 'static {
        let recorded = self.recorded_value(SlotKind::Now, |shared| shared.engine.now_millis());
        async move { from_millis(recorded.await) }
    }

    /// A random number, recorded: replay gets the same value. Use it
    /// instead of `rand` in workflow code. Not for cryptography.
    pub fn random(&self) -> impl Future<Output = u64> + Send + 'static {
        self.recorded_value(SlotKind::Random, |_| {
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u128(std::time::Instant::now().elapsed().as_nanos());
            hasher.finish()
        })
    }

    /// Takes a slot for a value computed once and replayed after.
    fn recorded_value(
        &self,
        kind: SlotKind,
        compute: impl FnOnce(&Shared) -> u64 + Send + 'static,
    ) -> impl Future<Output = u64> + Send + 'static {
        let slot = self.ctx.take_slot(kind, kind_name(kind));
        let shared = self.ctx.shared.clone();
        async move {
            let Some(slot) = slot else {
                return pending().await;
            };
            if let Some(SlotState::Value { value }) = slot.recorded.as_ref().map(|r| &r.state) {
                match decode_payload::<u64>(value) {
                    Ok(value) => return value,
                    Err(detail) => {
                        shared.fail(crate::failure::Failure::new(
                            crate::failure::FailureKind::Decode,
                            format!(
                                "the recorded value of {} does not decode: {detail}",
                                kind.describe("")
                            ),
                        ));
                        return pending().await;
                    }
                }
            }
            if shared.mode == Mode::Rebuild || slot.recorded.is_some() {
                return pending().await;
            }
            let value = compute(&shared);
            let state = SlotState::Value {
                value: encode_payload(&value).unwrap_or_default(),
            };
            let written = shared.write(|txn| {
                put_slot(txn, &shared, &slot, kind, kind_name(kind), state);
                Ok(())
            });
            match written {
                Ok(()) => match shared.engine.flush().await {
                    Ok(()) => value,
                    Err(e) => stall(&shared, e).await,
                },
                Err(e) => stall(&shared, e).await,
            }
        }
    }
}

fn kind_name(kind: SlotKind) -> &'static str {
    match kind {
        SlotKind::Now => "now",
        SlotKind::Random => "random",
        SlotKind::Step => "step",
        SlotKind::Sleep => "sleep",
        SlotKind::Event => "event",
    }
}

/// Reports a store failure to the driver and never completes.
async fn stall<T>(shared: &Shared, error: crate::Error) -> T {
    shared.store_failed(error);
    pending().await
}

fn put_slot(
    txn: &mut Txn<'_>,
    shared: &Shared,
    slot: &Slot,
    kind: SlotKind,
    name: &str,
    state: SlotState,
) {
    let history_seq = slot
        .recorded
        .as_ref()
        .map_or_else(|| txn.next_seq(), |r| r.history_seq);
    txn.put(Op::PutSlot(
        shared.id.to_string(),
        slot.index,
        SlotRecord {
            kind,
            name: name.to_owned(),
            occurrence: slot.occurrence,
            has_rollback: false,
            history_seq,
            state,
        },
    ));
}

/// Marks the instance waiting (or running again), unless a user paused it
/// or it is rolling back.
fn set_waiting(txn: &mut Txn<'_>, waiting: bool) -> Result<()> {
    let record = txn.record()?;
    if matches!(
        record.status,
        Status::Queued | Status::Running | Status::Waiting
    ) {
        record.status = if waiting {
            Status::Waiting
        } else {
            Status::Running
        };
    }
    Ok(())
}

async fn sleep_in_slot(
    shared: Arc<Shared>,
    slot: Option<Slot>,
    name: &'static str,
    wake_at: impl FnOnce(u64) -> u64,
) -> Result<(), WaitError> {
    let Some(slot) = slot else {
        return pending().await;
    };
    let wake_at = match slot.recorded.as_ref().map(|r| &r.state) {
        Some(SlotState::Slept) => return Ok(()),
        Some(SlotState::Sleeping { wake_at }) if shared.mode == Mode::Forward => {
            let wake_at = *wake_at;
            if let Err(e) = shared.write(|txn| set_waiting(txn, true)) {
                return stall(&shared, e).await;
            }
            wake_at
        }
        None if shared.mode == Mode::Forward => {
            if shared.pause_here() {
                return pending().await;
            }
            let wake_at = wake_at(shared.engine.now_millis());
            let written = shared.write(|txn| {
                put_slot(
                    txn,
                    &shared,
                    &slot,
                    SlotKind::Sleep,
                    name,
                    SlotState::Sleeping { wake_at },
                );
                txn.event(EventKind::SleepStarted {
                    name: name.to_owned(),
                    wake_at: from_millis(wake_at),
                });
                set_waiting(txn, true)
            });
            if let Err(e) = written {
                return stall(&shared, e).await;
            }
            if let Err(e) = shared.engine.flush().await {
                return stall(&shared, e).await;
            }
            wake_at
        }
        _ => return pending().await,
    };
    shared.engine.clock.sleep_until(from_millis(wake_at)).await;
    let written = shared.write(|txn| {
        put_slot(txn, &shared, &slot, SlotKind::Sleep, name, SlotState::Slept);
        txn.event(EventKind::SleepCompleted {
            name: name.to_owned(),
        });
        set_waiting(txn, false)
    });
    if let Err(e) = written {
        return stall(&shared, e).await;
    }
    Ok(())
}

struct EventWait {
    shared: Arc<Shared>,
    slot: Slot,
    name: &'static str,
    event_type: String,
}

impl EventWait {
    /// The payload of the event this wait takes.
    async fn run(self, timeout: std::time::Duration) -> Result<Vec<u8>, WaitError> {
        let shared = &self.shared;
        let deadline = match self.slot.recorded.as_ref().map(|r| &r.state) {
            Some(SlotState::Received { payload, .. }) => return Ok(payload.clone()),
            Some(SlotState::TimedOut { .. }) => return Err(self.timeout_error()),
            Some(SlotState::Waiting { deadline, .. }) if shared.mode == Mode::Forward => {
                if let Err(e) = shared.write(|txn| set_waiting(txn, true)) {
                    return stall(shared, e).await;
                }
                *deadline
            }
            None if shared.mode == Mode::Forward => {
                if shared.pause_here() {
                    return pending().await;
                }
                let deadline = add_millis(shared.engine.now_millis(), timeout);
                let written = shared.write(|txn| {
                    self.put(
                        txn,
                        SlotState::Waiting {
                            event_type: self.event_type.clone(),
                            deadline,
                        },
                    );
                    txn.event(EventKind::EventWaitStarted {
                        name: self.name.to_owned(),
                        event_type: self.event_type.clone(),
                        deadline: from_millis(deadline),
                    });
                    set_waiting(txn, true)
                });
                if let Err(e) = written {
                    return stall(shared, e).await;
                }
                if let Err(e) = shared.engine.flush().await {
                    return stall(shared, e).await;
                }
                deadline
            }
            _ => return pending().await,
        };
        loop {
            let sent = shared.live.event_sent.notified();
            match self.take_pending() {
                Ok(Some(payload)) => {
                    if let Err(e) = shared.engine.flush().await {
                        return stall(shared, e).await;
                    }
                    return Ok(payload);
                }
                Ok(None) => {}
                Err(e) => return stall(shared, e).await,
            }
            if shared.engine.now_millis() >= deadline {
                let written = shared.write(|txn| {
                    self.put(
                        txn,
                        SlotState::TimedOut {
                            event_type: self.event_type.clone(),
                        },
                    );
                    txn.event(EventKind::EventWaitTimedOut {
                        name: self.name.to_owned(),
                        event_type: self.event_type.clone(),
                    });
                    set_waiting(txn, false)
                });
                if let Err(e) = written {
                    return stall(shared, e).await;
                }
                if let Err(e) = shared.engine.flush().await {
                    return stall(shared, e).await;
                }
                return Err(self.timeout_error());
            }
            tokio::select! {
                () = sent => {}
                () = shared.engine.clock.sleep_until(from_millis(deadline)) => {}
            }
        }
    }

    /// Takes the oldest stored event of this wait's type, if any, in the
    /// same write that records it as this wait's result.
    fn take_pending(&self) -> Result<Option<Vec<u8>>> {
        let shared = &self.shared;
        shared.write(|txn| {
            let pending = shared.engine.store.pending_events(&shared.id)?;
            let Some((seq, event)) = pending
                .into_iter()
                .find(|(_, e)| e.event_type == self.event_type)
            else {
                return Ok(None);
            };
            txn.put(Op::DeletePendingEvent(shared.id.to_string(), seq));
            self.put(
                txn,
                SlotState::Received {
                    event_type: event.event_type.clone(),
                    payload: event.payload.clone(),
                },
            );
            txn.event(EventKind::EventDelivered {
                name: self.name.to_owned(),
                event_type: self.event_type.clone(),
            });
            set_waiting(txn, false)?;
            Ok(Some(event.payload))
        })
    }

    fn put(&self, txn: &mut Txn<'_>, state: SlotState) {
        put_slot(
            txn,
            &self.shared,
            &self.slot,
            SlotKind::Event,
            self.name,
            state,
        );
    }

    fn timeout_error(&self) -> WaitError {
        WaitError::Timeout {
            name: self.name.to_owned(),
            event_type: self.event_type.clone(),
        }
    }
}
