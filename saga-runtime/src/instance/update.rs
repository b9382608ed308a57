//! Sending an update to a running workflow and awaiting its reply
//! (`Instance::update`): the request travels as an event with the
//! update's id as its event id (see `workflow::updates`), the reply is
//! read from the instance's records.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::Payload;
use crate::error::{Error, Result};
use crate::instance::Instance;
use crate::instance::published::next_event_of;
use crate::instance::send::{EventSender, check_event_id};
use crate::model::status::Status;
use crate::workflow::updates::{UpdateRequest, check_update, update_event_type};

/// What the instance's state says of an update before it is sent.
struct Before {
    workflow: String,
    reply: Option<Payload>,
    status: Status,
}

impl Instance {
    /// Sends the update `name` with `request` to the instance and waits for
    /// the workflow's reply ([`ctx.take_update`](crate::WorkflowContext::take_update),
    /// then [`Update::reply`](crate::context::Update::reply)), which it returns
    /// decoded as `R`. The update gets a new id: to retry a call safely,
    /// give one with [`update_with_id`](Instance::update_with_id).
    ///
    /// Refused at once, with nothing sent: an instance that ended
    /// ([`Error::InvalidState`]); a name its workflow does not declare
    /// ([`Error::UpdateNotDeclared`], when this engine registers the
    /// workflow). [`Error::UpdateNotAnswered`] when the instance ends
    /// without replying. It waits as long as the workflow takes to reply:
    /// bound it with `tokio::time::timeout` if needed.
    ///
    /// # Cancel safety
    ///
    /// The request is stored at the first poll (once, by its id); dropping
    /// the future after that gives up waiting for the reply, not the
    /// update: the workflow still handles it, once. Retry with
    /// [`update_with_id`](Instance::update_with_id) to get its reply.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn approve(engine: saga_runtime::Engine) -> saga_runtime::Result<()> {
    /// let order = engine.instance("order-7").await?;
    /// let total: u64 = order.update_with_id("approve", "approval-7", &10u64).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn update<R: DeserializeOwned, Q: Serialize + ?Sized>(
        &self,
        name: &str,
        request: &Q,
    ) -> Result<R> {
        let random = &self.runner.core.random;
        let update_id = format!(
            "update-{:016x}{:016x}",
            random.next_u64(),
            random.next_u64()
        );
        self.update_with_id(name, &update_id, request).await
    }

    /// [`update`](Instance::update) with the update's id (1–200
    /// characters, scoped to the instance, shared with event ids): a call
    /// retried with the same id and an equal request is handled once, and
    /// gets the same reply, even after the instance ended. The same id
    /// with another request is [`Error::EventIdConflict`].
    ///
    /// # Cancel safety
    ///
    /// As [`update`](Instance::update): dropping the future at any await
    /// and calling again with the same id gets the one reply.
    pub async fn update_with_id<R: DeserializeOwned, Q: Serialize + ?Sized>(
        &self,
        name: &str,
        update_id: &str,
        request: &Q,
    ) -> Result<R> {
        crate::names::check_name("update name", name).map_err(Error::InvalidArgument)?;
        check_event_id(update_id)?;
        let before = self.before_update(update_id).await?;
        // Checked here when this engine knows the workflow; otherwise by
        // the owner as it takes the request from its inbox.
        let registered = self.runner.workflow(&before.workflow);
        let value = serde_json::to_value(request).map_err(|e| {
            Error::InvalidArgument(format!("the request of update {name:?} is not JSON: {e}"))
        })?;
        check_update(
            registered.as_deref(),
            &self.id,
            &before.workflow,
            name,
            Some(&value),
        )?;
        if before.status.is_terminal() && before.reply.is_none() {
            return Err(Error::InvalidState {
                id: self.id.to_string(),
                status: before.status,
                operation: "send an update",
            });
        }
        // Sent again when answered already: the send tells a retry (the
        // same request) from a conflict (another request under the id).
        let request = UpdateRequest {
            update_id: update_id.to_owned(),
            request,
        };
        EventSender::new(&self.runner, &self.id, &update_event_type(name))
            .id(update_id)
            .send(&request)
            .await?;
        self.wait_for_reply(update_id).await
    }

    /// The instance's workflow, the reply to `update_id` if there is one,
    /// and its status.
    async fn before_update(&self, update_id: &str) -> Result<Before> {
        self.journal()
            .read_durable(&self.id, |state| Before {
                workflow: state.workflow.clone(),
                reply: state.update_replies.get(update_id).cloned(),
                status: state.status,
            })
            .await
    }

    /// Waits until the workflow replies to `update_id`, or the instance
    /// ends without a reply.
    async fn wait_for_reply<R: DeserializeOwned>(&self, update_id: &str) -> Result<R> {
        let core = &self.runner.core;
        // Subscribed before the first read, so no reply after it is missed.
        let mut events = self.journal().subscribe_events();
        let mut ended = self.journal().subscribe_ends();
        let mut told = self.journal().changes(crate::store::Told::Stops);
        loop {
            ended.borrow_and_update();
            let before = self.before_update(update_id).await?;
            if let Some(reply) = before.reply {
                return self.decode_reply(update_id, reply);
            }
            if before.status.is_terminal() {
                return Err(Error::UpdateNotAnswered {
                    id: self.id.to_string(),
                    update_id: update_id.to_owned(),
                    status: before.status,
                });
            }
            if core.is_closed() {
                return Err(Error::Closed);
            }
            let owned = self.journal().owns(&self.id);
            tokio::select! {
                // Biased: a simulated run picks the same on every replay of its seed.
                biased;
                changed = ended.changed() => if changed.is_err() {
                    return Err(Error::Closed);
                },
                // This engine writes its journal: told of each record.
                told_here = next_event_of(&mut events, &self.id), if owned => if !told_here {
                    return Err(Error::Closed);
                },
                // Another worker writes it: look again when told, or after a while.
                Some(()) = crate::journal::told_of_change(&mut told), if !owned => {}
                () = tokio::time::sleep(core.poll), if !owned => {}
            }
        }
    }

    fn decode_reply<R: DeserializeOwned>(&self, update_id: &str, reply: Payload) -> Result<R> {
        let what = || format!("reply to update {update_id:?} of instance {:?}", self.id);
        if let Some(key) = reply.sealed_key() {
            return Err(crate::seal::missing_key(what(), key));
        }
        reply.decode::<R>().map_err(|detail| Error::Decode {
            what: what(),
            type_name: std::any::type_name::<R>(),
            detail,
        })
    }
}
