//! `ctx.take_update`: a workflow takes a named request a caller sent with
//! `Instance::update`, and answers it with `Update::reply`; the caller
//! awaits that reply.
//!
//! An update travels as an event (`update_event_type`), sent with the
//! update's id as its event id: it is stored once by that id, held until
//! the workflow takes it (counted against `max_pending_events`), posted
//! to the owner on a store shared by workers, and its taking is the
//! wait's record. The reply is a record of its own (`UpdateReplied`),
//! kept by update id: a replay, or a second `reply`, writes nothing, and
//! a caller that retries with the same id reads the first reply.

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::failure::WaitError;
use crate::error::{Error, Result};
use crate::journal::Change;
use crate::time::duration::IntoDuration;
use crate::workflow::ErasedWorkflow;
use crate::workflow::context::{Ctx, Mode, WorkflowContext};

/// The prefix of the event type an update travels as: `saga:update:` and
/// the update's name. Do not wait for such events with `wait_for_event`.
pub(crate) const UPDATE_EVENT_PREFIX: &str = "saga:update:";

/// The event type the update `name` travels as.
pub(crate) fn update_event_type(name: &str) -> String {
    format!("{UPDATE_EVENT_PREFIX}{name}")
}

/// Refuses the update `name` to instance `id` of `workflow` when the
/// workflow is `registered` here and does not declare the name (it would
/// never take it), or its validator rejects `request` (when the request
/// is at hand, in the clear). An engine without the workflow lets it pass.
pub(crate) fn check_update(
    registered: Option<&dyn ErasedWorkflow>,
    id: &str,
    workflow: &str,
    name: &str,
    request: Option<&serde_json::Value>,
) -> Result<()> {
    let Some(registered) = registered else {
        return Ok(());
    };
    let declared = registered.updates_taken();
    if !declared.contains(&name) {
        return Err(Error::UpdateNotDeclared {
            id: id.to_owned(),
            workflow: workflow.to_owned(),
            update: name.to_owned(),
            declared: declared.iter().map(|d| (*d).to_owned()).collect(),
        });
    }
    if let Some(request) = request
        && let Err(reason) = registered.update_valid(name, request)
    {
        return Err(Error::UpdateRejected {
            id: id.to_owned(),
            update: name.to_owned(),
            reason,
        });
    }
    Ok(())
}

/// What an update's event carries: its id and the caller's request.
#[derive(Serialize, Deserialize)]
pub(crate) struct UpdateRequest<R> {
    pub(crate) update_id: String,
    pub(crate) request: R,
}

/// An update the workflow took with
/// [`ctx.take_update`](WorkflowContext::take_update): the caller's request,
/// and the way to answer it.
#[must_use = "the caller waits for `reply`"]
pub struct Update<T> {
    /// The caller's request.
    pub request: T,
    id: String,
    run: Arc<Ctx>,
}

impl<T> std::fmt::Debug for Update<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Update").field("id", &self.id).finish()
    }
}

impl WorkflowContext {
    /// Takes the next update named `name` that a caller sent with
    /// [`Instance::update`](crate::Instance::update), waiting for at most
    /// `timeout` as [`wait_for_event`](WorkflowContext::wait_for_event)
    /// waits (a timeout is [`WaitError::Timeout`], which the workflow may
    /// catch). An update sent before the workflow gets here is held and
    /// taken now; held updates count against
    /// [`max_pending_events`](crate::EngineBuilder::max_pending_events).
    ///
    /// The workflow answers with [`Update::reply`]; the caller's
    /// `update(..)` returns that reply. Taking it is recorded as an event
    /// wait's result is: a replay takes the same update again and never a
    /// second one, so an update is handled at most once.
    ///
    /// `name` is a string literal the macros check, and the workflow
    /// declares it: `#[workflow(name = "order", updates = ["approve"])]`.
    /// A request that does not decode as `T` is set aside as an event
    /// that does not decode is, and the wait goes on.
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// #[workflow(name = "order", updates = ["approve"])]
    /// async fn order(ctx: WorkflowContext, total: u64) -> Result<u64, WorkflowError> {
    ///     let approval = ctx.take_update::<u64>("approve", "7 days").await?;
    ///     let total = total - approval.request;
    ///     approval.reply(&total).await?;
    ///     Ok(total)
    /// }
    /// ```
    pub fn take_update<T: DeserializeOwned + Send + 'static>(
        &self,
        name: &'static str,
        timeout: impl IntoDuration,
    ) -> impl Future<Output = std::result::Result<Update<T>, WaitError>> + Send + 'static {
        let wait = self.wait_for_event::<UpdateRequest<T>>(name, &update_event_type(name), timeout);
        let run = self.run.clone();
        async move {
            let UpdateRequest { update_id, request } = wait.await?;
            Ok(Update {
                request,
                id: update_id,
                run,
            })
        }
    }
}

impl<T> Update<T> {
    /// The update's id: the caller's, or the one `update` made for it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Answers the update: the caller's `update(..)` returns `reply`. The
    /// reply is recorded (sealed by the engine's codec, as every user
    /// value) and durable when this returns. Only the first reply to an
    /// update counts: a replay, or a second call, records nothing. A reply
    /// over the payload limit is [`Error::PayloadTooLarge`].
    ///
    /// # Cancel safety
    ///
    /// The reply is recorded at the first poll; dropping the future after
    /// that only gives up waiting for durability.
    pub async fn reply<R: Serialize + ?Sized>(&self, reply: &R) -> Result<()> {
        let scope = &self.run.scope;
        let id = &self.id;
        let reply = scope
            .core
            .encode_limited(reply, || format!("the reply to update {id:?}"))?;
        if scope.mode != Mode::Forward {
            return Ok(());
        }
        scope.write(|state| {
            if state.update_replies.contains_key(id) {
                // A replay, or a second reply: the first one stands.
                return Ok((None, ()));
            }
            let change = Change::UpdateReplied {
                update_id: id.clone(),
                reply,
            };
            Ok((Some(change), ()))
        })?;
        scope.core.journal.flush().await
    }
}
