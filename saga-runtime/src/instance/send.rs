//! Sending events to instances: deduplicated by an optional event id, and
//! start-with-event (Temporal's signal-with-start), which creates the
//! instance if needed and delivers the event in one step.

use std::sync::Arc;

use serde::Serialize;

use crate::codec::Payload;
use crate::error::{Error, Result};
use crate::instance::post::Answer;
use crate::instance::{Instance, Run};
use crate::journal::command::{Command, admits_event};
use crate::journal::queued::Enqueue;
use crate::journal::{Change, InstanceState};
use crate::run::runner::Runner;
use crate::workflow::Workflow;
use crate::workflow::updates::{UPDATE_EVENT_PREFIX, UpdateRequest, check_update};

/// What a send did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sent {
    /// The event was stored and will be delivered.
    Delivered,
    /// An event with the same id, type and payload was sent to this
    /// instance before: nothing was stored again.
    Duplicate,
    /// Posted, durably, to the worker that drives the instance (another
    /// process), which did not answer within the store timeout: it stores
    /// and delivers the event (once, by its id) when it takes it, or the
    /// worker that claims the instance does. An owner that answers in time
    /// answers `Delivered`, `Duplicate` or its refusal instead.
    Posted,
}

/// An event about to be sent; made by [`Engine::event`](crate::Engine::event).
///
/// ```
/// # use saga_runtime::prelude::*;
/// # async fn demo(engine: Engine) -> Result<(), saga_runtime::Error> {
/// // A webhook delivered twice is stored once.
/// let payload = serde_json::json!({ "tracking": "1Z999" });
/// let sent = engine.event("order-7", "shipped").id("evt_123").send(&payload).await?;
/// let again = engine.event("order-7", "shipped").id("evt_123").send(&payload).await?;
/// assert_eq!((sent, again), (Sent::Delivered, Sent::Duplicate));
/// # Ok(()) }
/// ```
#[must_use = "nothing is sent until `send` or `send_with_start` is awaited"]
pub struct EventSender<'a> {
    runner: &'a Arc<Runner>,
    instance: String,
    event_type: String,
    event_id: Option<String>,
}

impl<'a> EventSender<'a> {
    pub(crate) fn new(runner: &'a Arc<Runner>, instance: &str, event_type: &str) -> Self {
        EventSender {
            runner,
            instance: instance.to_owned(),
            event_type: event_type.to_owned(),
            event_id: None,
        }
    }

    /// The event's id (1–200 characters, counted as `str::chars` counts
    /// them, so at most 800 bytes), scoped to the instance, across
    /// restarts of the process and of the instance: a second send with
    /// this id and an equal payload (compared as JSON values, so map key
    /// order does not matter) stores nothing and answers
    /// [`Sent::Duplicate`]; with another type or payload it is
    /// [`Error::EventIdConflict`].
    ///
    /// An instance remembers an id for the rest of its run, and until it
    /// is removed once it ended. An instance that continues as new hands
    /// over to its next run only the ids sent within the engine's
    /// [`event_dedup_window`](crate::EngineBuilder::event_dedup_window)
    /// (default 7 days): a send of an older id is a new event.
    pub fn id(mut self, event_id: impl Into<String>) -> Self {
        self.event_id = Some(event_id.into());
        self
    }

    /// Sends the event to the existing instance. It is stored durably
    /// before this returns and delivered to the instance's
    /// `wait_for_event` for its type, now or when the workflow gets there.
    ///
    /// An instance that does not exist yet is [`Error::UnknownInstance`]:
    /// when the event may arrive first (a webhook racing the start), use
    /// [`send_with_start`](EventSender::send_with_start).
    ///
    /// # Cancel safety
    ///
    /// the event is stored and its waiter woken at the first poll; dropping the future after
    /// that only gives up waiting for durability: the event is delivered, once.
    pub async fn send<P: Serialize + ?Sized>(self, payload: &P) -> Result<Sent> {
        let payload = self.checked(payload)?;
        let instance = Instance::new(self.runner.clone(), self.instance.clone());
        Self::sent(instance.command(self.command(payload)).await)
    }

    /// The command that sends this event with `payload`.
    fn command(&self, payload: Payload) -> Command {
        Command::Event {
            event_type: self.event_type.clone(),
            payload,
            event_id: self.event_id.clone(),
        }
    }

    /// What a send did, from the answer to its command; [`Sent::Posted`]
    /// when the worker that drives the instance (another process) did not
    /// answer within the store timeout.
    fn sent(answer: Result<Answer>) -> Result<Sent> {
        match answer {
            Ok(Answer::Event { delivered: true }) => Ok(Sent::Delivered),
            Ok(Answer::Event { delivered: false }) => Ok(Sent::Duplicate),
            Ok(_) | Err(Error::NotAnswered { .. }) => Ok(Sent::Posted),
            Err(e) => Err(e),
        }
    }

    /// Posts the event to the worker that drives the instance, which
    /// exists, and answers what it did.
    async fn post(&self, payload: Payload) -> Result<Sent> {
        let instance = Instance::new(self.runner.clone(), &self.instance);
        Self::sent(instance.post(self.command(payload)).await)
    }

    /// Sends a payload encoded already (a posted event, taken by the
    /// worker that drives the instance).
    pub(crate) async fn send_encoded(self, payload: Payload) -> Result<Sent> {
        let journal = &self.runner.core.journal;
        let sent = journal
            .write(&self.instance, |state| self.change(state, payload))
            .await?;
        self.delivered(sent).await
    }

    /// Starts an instance of `workflow` with `input` unless one with this
    /// id exists, and sends the event to it, atomically: the instance's
    /// creation and the event are stored under its write lock before any
    /// driver runs it, so its first `wait_for_event` for the type sees the
    /// event (Temporal's signal-with-start). An existing instance must run
    /// the same workflow with an equal input, as for
    /// [`Engine::start`](crate::Engine::start).
    ///
    /// # Cancel safety
    ///
    /// the instance and the event are stored, and the driver started, at the first poll;
    /// dropping the future after that only gives up waiting for durability.
    pub async fn send_with_start<W: Workflow, P: Serialize + ?Sized>(
        self,
        workflow: W,
        input: W::Input,
        payload: &P,
    ) -> Result<(Run<W::Output>, Sent)> {
        let payload = self.checked(payload)?;
        let runner = self.runner;
        let id = self.instance.as_str();
        let sent = start(runner, workflow, id, input, None, |state| {
            // It existed, and another worker drives it: the payload comes
            // back, to be posted below.
            if !runner.core.journal.owns(id) {
                return Ok((None, Err(payload)));
            }
            self.change(state, payload).map(|(c, s)| (c, Ok(s)))
        })
        .await?;
        let run = Run::new(Instance::new(runner.clone(), id));
        let sent = match sent {
            Ok(sent) => self.delivered(sent).await?,
            Err(payload) => self.post(payload).await?,
        };
        Ok((run, sent))
    }

    /// Validates the arguments and encodes the payload.
    fn checked<P: Serialize + ?Sized>(&self, payload: &P) -> Result<Payload> {
        let (id, event_type) = (&self.instance, &self.event_type);
        crate::names::validate_any_id(id)?;
        crate::names::check_event_type(event_type).map_err(Error::InvalidArgument)?;
        if let Some(event_id) = &self.event_id {
            check_event_id(event_id)?;
        }
        self.runner.core.encode_untyped(payload, || {
            format!("payload of event {event_type:?} for instance {id:?}")
        })
    }

    /// The record that stores the event, or none for a duplicate.
    fn change(&self, state: &InstanceState, payload: Payload) -> Result<(Option<Change>, Sent)> {
        let event_type = self.event_type.clone();
        // An update, posted by a worker that does not know the workflow:
        // refused here if the workflow would never take it.
        if let Some(update) = event_type.strip_prefix(UPDATE_EVENT_PREFIX) {
            let registered = self.runner.workflow(&state.workflow);
            let request = payload.decode::<UpdateRequest<serde_json::Value>>().ok();
            let request = request.as_ref().map(|r| &r.request);
            check_update(
                registered.as_deref(),
                &self.instance,
                &state.workflow,
                update,
                request,
            )?;
        }
        let Some(event_id) = &self.event_id else {
            admits_event(state, &self.instance)?;
            let change = Change::EventReceived {
                event_type,
                payload,
            };
            return Ok((Some(change), Sent::Delivered));
        };
        // A duplicate is answered even after the instance ended: a webhook
        // retried late is still the same webhook.
        if let Some(earlier) = state.event_ids.get(event_id) {
            if earlier.event_type == event_type && same_value(&earlier.payload, &payload) {
                return Ok((None, Sent::Duplicate));
            }
            return Err(Error::EventIdConflict {
                id: self.instance.clone(),
                event_id: event_id.clone(),
            });
        }
        admits_event(state, &self.instance)?;
        let change = Change::EventReceivedWithId {
            event_type,
            payload,
            event_id: event_id.clone(),
        };
        Ok((Some(change), Sent::Delivered))
    }

    /// Wakes the instance's waits and waits until the event is durable.
    async fn delivered(&self, sent: Sent) -> Result<Sent> {
        // Woken before the await: a dropped call still delivers the event
        // now (the wait that takes it flushes before it returns).
        if sent == Sent::Delivered {
            // Hibernating (or not run here): its driver takes it.
            if !self.runner.tell_event(&self.instance) {
                self.runner.spawn_driver_if_runnable_soon(&self.instance);
            }
        }
        self.runner.core.journal.flush().await?;
        Ok(sent)
    }
}

/// The longest event id, in characters (Unicode scalar values, as
/// `str::chars` counts them). At most 4 bytes each in UTF-8, so an id is
/// at most 800 bytes, which every store keeps.
const MAX_EVENT_ID_CHARS: usize = 200;

pub(crate) fn check_event_id(event_id: &str) -> Result<()> {
    let chars = event_id.chars().count();
    if chars == 0 || chars > MAX_EVENT_ID_CHARS {
        return Err(Error::InvalidArgument(format!(
            "event id {event_id:?} is {chars} characters: it must be 1-{MAX_EVENT_ID_CHARS} characters"
        )));
    }
    Ok(())
}

/// Whether two payloads hold the same value: compared decoded, so JSON map
/// key order and spacing do not matter (bytes when one does not decode).
pub(crate) fn same_value(a: &Payload, b: &Payload) -> bool {
    match (
        a.decode::<serde_json::Value>(),
        b.decode::<serde_json::Value>(),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Creates an instance of `workflow` named `id` unless it exists (then it
/// must run the same workflow with an equal input), and under the same
/// lock appends what `then` decides on. The driver starts after both are
/// stored. Does not wait for durability.
///
/// With `queue`, a new instance waits in that queue for a slot instead
/// (see `Engine::start_on`).
pub(crate) async fn start<W: Workflow, R>(
    runner: &Arc<Runner>,
    workflow: W,
    id: &str,
    input: W::Input,
    queue: Option<&Enqueue>,
    then: impl FnOnce(&InstanceState) -> Result<(Option<Change>, R)>,
) -> Result<R> {
    crate::names::validate_id(id)?;
    let name = workflow.name();
    // Registers it (checking its services), or checks that the name is
    // this workflow's.
    runner.register(Arc::new(workflow))?;
    let input = runner
        .core
        .encode_readable(&input, || format!("input of instance {id:?}"))?;
    let journal = &runner.core.journal;
    // The workflow is registered here, so a new instance gets a driver,
    // even when this call is dropped while a server creates it.
    let cut_short = DriveIfCutShort { runner, id };
    let created = journal
        .create_then(
            id,
            name,
            input.clone(),
            queue,
            queue.is_none(),
            |state, created| {
                if !created {
                    existing_matches(state, id, name, &input)?;
                }
                then(state)
            },
        )
        .await;
    // On a store shared by workers, a queued instance is its creator's
    // until what the start writes with it is written: then it is let go
    // of, before the start returns, for the worker that takes it (a start
    // dropped before then lets go of it in `cut_short`).
    if created.is_ok()
        && queue.is_some()
        && journal.shared()
        && let Err(e) = journal.disown_if_queued(id).await
    {
        tracing::warn!(instance = %id, error = %e, "could not let go of a queued instance; it is taken once this worker stops");
    }
    std::mem::forget(cut_short);
    let (_, answer) = created?;
    // Without waiting (on a store of one process, before this returns),
    // so a caller that drops the future leaves a running instance (its
    // first durable step flushes its creation too); a repeated start
    // drives one that a dropped start left.
    runner.spawn_driver_if_runnable_soon(id);
    Ok(answer)
}

/// Armed while a start waits for the store to create its instance: a
/// start dropped there still leaves the instance a driver.
struct DriveIfCutShort<'a> {
    runner: &'a Arc<Runner>,
    id: &'a str,
}

impl Drop for DriveIfCutShort<'_> {
    fn drop(&mut self) {
        self.runner.spawn_driver_once_written(self.id);
    }
}

/// An instance that exists answers a start only if it runs the same
/// workflow with an equal input.
fn existing_matches(state: &InstanceState, id: &str, name: &str, input: &Payload) -> Result<()> {
    if state.workflow != name {
        return Err(Error::InstanceIdInUse {
            id: id.to_owned(),
            existing: state.workflow.clone(),
            requested: name.to_owned(),
        });
    }
    if !same_value(&state.input, input) {
        return Err(Error::InputMismatch { id: id.to_owned() });
    }
    Ok(())
}
