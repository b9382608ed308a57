//! Control calls on an instance (pause, resume, terminate, restart,
//! retry a rollback), acted on here when this engine drives it, posted to
//! the worker that does otherwise, and passed on to its children.

use crate::error::failure::{Failure, FailureKind};
use crate::error::{Error, Result};
use crate::instance::post::{Answer, post_and_wait};
use crate::instance::send::{EventSender, Sent};
use crate::journal::command::{Admit, Command, admits, restart_slot};
use crate::journal::{Change, End, InstanceState, SlotState};
use crate::model::status::Status;
use crate::workflow::live::Interrupt;

use super::Instance;

impl Instance {
    /// Every call on the instance: acted on here when this engine drives
    /// it; otherwise posted to the worker that does (or that claims it),
    /// answering once that worker did what it asks (the call's own
    /// promise: paused, terminated ...), or with its refusal, or
    /// [`Error::NotAnswered`] past the store timeout.
    pub(crate) async fn command(&self, command: Command) -> Result<Answer> {
        let journal = self.journal();
        if journal.owns(&self.id) {
            let answer = self.act(command.clone(), None).await;
            // It went back to its queue as the call began (its wait was
            // over, on a store shared by workers): nothing was written,
            // and the worker that takes it from the queue answers.
            if matches!(answer, Err(Error::ReadOnly { .. })) && !journal.owns(&self.id) {
                return self.post(command).await;
            }
            // Restarted or resumed back into its queue: on a store shared
            // by workers, any worker with room takes it (a post's is put
            // back once answered, by the inbox).
            if let Err(e) = journal.disown_if_queued(&self.id).await {
                tracing::warn!(instance = %self.id, error = %e, "could not put a queued instance back in its queue");
            }
            return answer;
        }
        // An unknown instance is refused here, not posted.
        journal.read(&self.id, |_| ()).await?;
        self.post(command).await
    }

    /// Posts `command` to the worker that drives the instance (which
    /// exists) and answers what it did: its refusal is the error it
    /// refused with.
    pub(crate) async fn post(&self, command: Command) -> Result<Answer> {
        let journal = self.journal();
        match post_and_wait(journal, &self.id, &command, journal.patience()).await? {
            Answer::Refused(refusal) => Err(refusal.into_error(&self.id)),
            answer => Ok(answer),
        }
    }

    /// Acts on `command` in this engine, which drives the instance: a
    /// call of its own, or post `post` taken from its inbox (an event
    /// posted without an id is stored once by the post's).
    ///
    /// Boxed: a command to a parent passes on to its children, which may
    /// be driven here too (the future is its own great-grandchild).
    pub(crate) fn act(
        &self,
        command: Command,
        post: Option<i64>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Answer>> + Send + '_>> {
        Box::pin(self.act_here(command, post))
    }

    async fn act_here(&self, command: Command, post: Option<i64>) -> Result<Answer> {
        let for_children = command.for_children();
        match command {
            Command::Event {
                event_type,
                payload,
                event_id,
            } => {
                let mut sender = EventSender::new(&self.runner, &self.id, &event_type);
                if let Some(event_id) = event_id.or_else(|| post.map(|n| format!("inbox-{n}"))) {
                    sender = sender.id(event_id);
                }
                let sent = sender.send_encoded(payload).await?;
                Ok(Answer::Event {
                    delivered: sent != Sent::Duplicate,
                })
            }
            command @ (Command::Pause | Command::ParentPaused) => {
                self.pause_here(&command).await?;
                self.cascade(for_children).await.map(|()| Answer::Done)
            }
            command @ (Command::Resume | Command::ParentResumed) => {
                self.resume_here(&command).await?;
                self.cascade(for_children).await.map(|()| Answer::Done)
            }
            Command::RetryRollback => self.retry_rollback_here().await.map(|()| Answer::Done),
            Command::Terminate { rollback } => {
                let this = self.clone();
                self.in_engine_task(async move {
                    this.end(rollback).await?;
                    this.tell_children(for_children).await;
                    Ok(())
                })
                .await
                .map(|()| Answer::Done)
            }
            Command::Restart { from } => {
                let this = self.clone();
                self.in_engine_task(async move { this.restart_at(from.as_deref()).await })
                    .await
                    .map(|()| Answer::Done)
            }
            Command::ChildEnded { child } => {
                tracing::debug!(instance = %self.id, child, "a child workflow ended");
                self.runner.tell_child_ended(&self.id).await;
                Ok(Answer::Done)
            }
            Command::Recall { cause } => self.recall_here(cause).await.map(|()| Answer::Done),
        }
    }

    /// Passes `command` on to the children the instance runs, in a task
    /// of the engine's (a dropped call still reaches them all).
    async fn cascade(&self, command: Option<Command>) -> Result<()> {
        if command.is_none() {
            return Ok(());
        }
        let this = self.clone();
        self.in_engine_task(async move {
            this.tell_children(command).await;
            Ok(())
        })
        .await
    }

    /// Asks `command` of every child of the instance that has not ended:
    /// one that ended meanwhile refuses, which is as good.
    async fn tell_children(&self, command: Option<Command>) {
        let Some(command) = command else { return };
        let children = self
            .journal()
            .read(&self.id, running_children)
            .await
            .unwrap_or_default();
        for child in children {
            let instance = Instance::new(self.runner.clone(), &child);
            if let Err(e) = instance.command(command.clone()).await {
                tracing::debug!(instance = %self.id, child, error = %e, operation = command.operation(), "a child did not take its parent's command");
            }
        }
    }

    async fn pause_here(&self, command: &Command) -> Result<()> {
        let change = match command {
            Command::ParentPaused => Change::PausedWithParent,
            _ => Change::Paused,
        };
        self.journal()
            .write(&self.id, |state| match admits(command, state, &self.id)? {
                Admit::Act => Ok((Some(change), ())),
                Admit::AlreadySo => Ok((None, ())),
            })
            .await?;
        if let Some(live) = self.runner.live(&self.id) {
            live.request_pause(true);
        }
        self.journal().flush().await
    }

    async fn resume_here(&self, command: &Command) -> Result<()> {
        let resumed = self
            .journal()
            .write(&self.id, |state| match admits(command, state, &self.id)? {
                Admit::Act => Ok((Some(Change::Unpaused), true)),
                Admit::AlreadySo => Ok((None, false)),
            })
            .await?;
        // Acted on before the await, so a dropped call still resumes it.
        if resumed {
            match self.runner.live(&self.id) {
                Some(live) => live.request_pause(false),
                None => self.runner.spawn_driver(&self.id),
            }
        }
        self.journal().flush().await
    }

    /// Undoes a completed child: its compensations run in a driver, and
    /// it ends `Compensated` (its parent waits for that).
    async fn recall_here(&self, cause: Failure) -> Result<()> {
        let command = Command::Recall { cause };
        let recalled = self
            .journal()
            .write(&self.id, |state| match admits(&command, state, &self.id)? {
                Admit::Act => {
                    let Command::Recall { cause } = &command else {
                        return Ok((None, false));
                    };
                    let change = Change::Recalled {
                        cause: cause.clone(),
                    };
                    Ok((Some(change), true))
                }
                Admit::AlreadySo => Ok((None, false)),
            })
            .await?;
        // Before any await: a dropped call still compensates.
        if recalled {
            self.runner.spawn_driver(&self.id);
        }
        self.journal().flush().await
    }

    async fn retry_rollback_here(&self) -> Result<()> {
        self.journal()
            .write(&self.id, |state| {
                admits(&Command::RetryRollback, state, &self.id)?;
                Ok((Some(Change::RollbackRetried), ()))
            })
            .await?;
        self.runner.spawn_driver(&self.id);
        self.journal().flush().await?;
        if let Some(live) = self.runner.live(&self.id) {
            self.wait_stopped(&live).await?;
        }
        Ok(())
    }

    async fn end(&self, rollback: bool) -> Result<()> {
        let _control = self.runner.control(&self.id).await;
        let command = Command::Terminate { rollback };
        if let Some(live) = self.runner.live(&self.id) {
            // The engine's own view, not a user's read: the interrupt must
            // go out at the first poll, before any await.
            self.journal()
                .read(&self.id, |state| admits(&command, state, &self.id))
                .await??;
            live.interrupt(Interrupt::Terminate { rollback });
            self.wait_stopped(&live).await?;
            // The driver may have stopped for a pause it saw first; then
            // ours was not acted on and the end is written below.
            let status = self.journal().read(&self.id, |s| s.status).await?;
            if status.is_terminal() {
                // It may have finished on its own before the interrupt
                // landed (an event came first): then it was not terminated.
                self.journal().durable_so_far().await?;
                return match status {
                    Status::Terminated => Ok(()),
                    status => Err(Error::InvalidState {
                        id: self.id.to_string(),
                        status,
                        operation: command.operation(),
                    }),
                };
            }
        }
        // No driver runs it: write the end (or the start of the rollback)
        // here. One that waits in its queue with nothing to undo (it never
        // took a slot, so it started nothing) ends at once, as `Terminated`
        // with nothing compensated: there is no rollback to run.
        let compensates = self
            .journal()
            .write(&self.id, |state| {
                admits(&command, state, &self.id)?;
                let compensates =
                    rollback && (state.has_anything_to_undo() || !state.waits_in_queue());
                let change = if compensates {
                    Change::RollbackStarted {
                        cause: Failure::new(FailureKind::Workflow, "terminated by user"),
                        then: Status::Terminated,
                    }
                } else {
                    Change::Ended(Box::new(End {
                        status: Status::Terminated,
                        output: None,
                        failure: None,
                        rollback: None,
                    }))
                };
                Ok((Some(change), compensates))
            })
            .await?;
        let rollback = compensates;
        if rollback {
            // Before any await: a dropped call still compensates.
            self.runner.spawn_driver(&self.id);
        } else {
            // Ended: a hibernating instance's timer has nothing to wake.
            self.runner.forget_timer(&self.id);
        }
        self.journal().flush().await?;
        if !rollback {
            // No driver ended it, so none tells its parent.
            self.runner.tell_parent(&self.id).await;
        }
        if let Some(live) = self.runner.live(&self.id) {
            self.wait_stopped(&live).await?;
        }
        Ok(())
    }

    async fn restart_at(&self, step: Option<&str>) -> Result<()> {
        let _control = self.runner.control(&self.id).await;
        let command = Command::Restart {
            from: step.map(str::to_owned),
        };
        // Checked before the driver is stopped, so a refused restart leaves
        // the instance as it was; checked again when the restart is written.
        self.journal()
            .read(&self.id, |state| admits(&command, state, &self.id))
            .await??;
        if let Some(live) = self.runner.live(&self.id) {
            live.interrupt(Interrupt::Stop);
            self.wait_stopped(&live).await?;
        }
        self.journal()
            .write(&self.id, |state| {
                admits(&command, state, &self.id)?;
                let from_slot = restart_slot(state, step, &self.id)?;
                Ok((
                    Some(Change::Restarted {
                        from_slot,
                        from_step: step.map(str::to_owned),
                    }),
                    (),
                ))
            })
            .await?;
        self.runner.spawn_driver(&self.id);
        self.journal().flush().await
    }

    /// Runs `work` (stopping a driver, then writing what replaces it) in a
    /// task of the engine's, so a caller that drops its future leaves it
    /// to finish instead of an instance stopped half way.
    async fn in_engine_task(
        &self,
        work: impl std::future::Future<Output = Result<()>> + Send + 'static,
    ) -> Result<()> {
        let task = self.runner.core.spawn(work);
        match task.await {
            Ok(result) => result,
            // Aborted by shutdown.
            Err(_) => Err(Error::Closed),
        }
    }

    /// Waits until the driver let go of the instance; [`Error::Closed`]
    /// when the engine closes first.
    async fn wait_stopped(&self, live: &crate::workflow::live::Live) -> Result<()> {
        let mut ended = self.journal().subscribe_ends();
        tokio::select! {
            // Stopped first: a driver that let go wins over a close seen in the same poll.
            // Biased: a simulated run picks the same on every replay of its seed.
            biased;
            () = live.wait_stopped() => Ok(()),
            () = async {
                while !self.runner.core.is_closed() {
                    if ended.changed().await.is_err() {
                        break;
                    }
                }
            } => Err(Error::Closed),
        }
    }
}

/// The children of an instance that its records do not show ended.
fn running_children(state: &InstanceState) -> Vec<String> {
    state
        .slots
        .values()
        .filter_map(|slot| match &slot.state {
            SlotState::ChildRunning { child, .. } => Some(child.clone()),
            _ => None,
        })
        .collect()
}
