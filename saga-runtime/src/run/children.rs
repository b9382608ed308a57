//! The engine's side of child workflows (`workflow::child`): starting a
//! child under its derived id, telling a parent that its child ended, and
//! the commands a child's compensation asks of it. The workflow code below
//! reaches it through `Kin`.

use std::sync::{Arc, Weak};

use crate::codec::Payload;
use crate::error::Result;
use crate::instance::Instance;
use crate::journal::command::Command;
use crate::names::id::InstanceId;
use crate::run::runner::Runner;
use crate::workflow::child::Kin;
use crate::workflow::compensation::BoxFuture;

/// How many parents up a retention sweep looks for one that has not
/// finished (a chain deeper than this is kept as if one had not).
const MAX_ANCESTORS: usize = 64;

/// The runner as child workflows see it; holds it weakly (the runner's
/// core holds this).
pub(crate) struct Family(pub(crate) Weak<Runner>);

impl Kin for Family {
    fn registered(&self, name: &str) -> bool {
        self.0.upgrade().is_some_and(|r| r.is_registered(name))
    }

    fn start_child(
        &self,
        parent: &InstanceId,
        child: &InstanceId,
        workflow: &str,
        input: Payload,
    ) -> BoxFuture<Result<()>> {
        let runner = self.0.upgrade();
        let (parent, child, workflow) = (parent.clone(), child.clone(), workflow.to_owned());
        Box::pin(async move {
            let runner = runner.ok_or(crate::Error::Closed)?;
            start_child(&runner, &parent, &child, &workflow, input).await
        })
    }

    fn command(&self, id: &InstanceId, command: Command) -> BoxFuture<Result<()>> {
        let runner = self.0.upgrade();
        let id = id.clone();
        Box::pin(async move {
            let runner = runner.ok_or(crate::Error::Closed)?;
            Instance::new(runner, &id).command(command).await.map(drop)
        })
    }
}

/// Creates `child` unless it exists, recording `parent` with its creation,
/// and gives it a driver; answers once its creation is durable. The
/// parent's record of the call is made durable first, so no child exists
/// that its parent's journal would not name after a crash.
async fn start_child(
    runner: &Arc<Runner>,
    parent: &InstanceId,
    child: &InstanceId,
    workflow: &str,
    input: Payload,
) -> Result<()> {
    let journal = &runner.core.journal;
    journal.flush().await?;
    journal
        .create_then(child, workflow, input, true, |state, created| {
            // Found by its id: the call was made before a crash.
            if !created {
                return Ok((None, ()));
            }
            let described = crate::journal::tags::described(child, state, Some(parent), &[])?;
            Ok((described, ()))
        })
        .await?;
    runner.spawn_driver_if_runnable_soon(child);
    journal.flush().await
}

impl Runner {
    /// Tells the parent of `id`, if it has one, that `id` ended (or was
    /// compensated): here, or posted to the parent's worker.
    pub(crate) async fn tell_parent(self: &Arc<Self>, id: &str) {
        let read = self
            .core
            .journal
            .read(id, |s| (s.status.is_terminal(), s.parent.clone()))
            .await;
        let Ok((true, Some(parent))) = read else {
            return;
        };
        let command = Command::ChildEnded {
            child: id.to_owned(),
        };
        if let Err(e) = Instance::new(self.clone(), &parent).command(command).await {
            tracing::warn!(instance = %id, parent, error = %e, "could not tell the parent that its child ended; it looks again when it runs next");
        }
    }

    /// A child of `id` ended: the call waiting for it looks again, in the
    /// driver that runs `id` or in one started for it (it hibernated).
    pub(crate) async fn tell_child_ended(self: &Arc<Self>, id: &str) {
        if !self.tell_child(id) {
            self.spawn_driver_if_runnable(id).await;
        }
    }

    /// Whether an unfinished instance above `id` (its parent, the parent's
    /// parent, ...) may still roll back and undo it: then a retention
    /// sweep keeps it.
    pub(crate) async fn has_unfinished_ancestor(&self, id: &str) -> Result<bool> {
        let journal = &self.core.journal;
        let mut at = id.to_owned();
        for _ in 0..MAX_ANCESTORS {
            let parent = match journal.read(&at, |s| s.parent.clone()).await {
                Ok(parent) => parent,
                Err(crate::Error::UnknownInstance { .. }) => return Ok(false),
                Err(e) => return Err(e),
            };
            let Some(parent) = parent else {
                return Ok(false);
            };
            match journal.read(&parent, |s| s.status.is_terminal()).await {
                Ok(false) => return Ok(true),
                Ok(true) => at = parent,
                // Removed already: nothing above can undo it.
                Err(crate::Error::UnknownInstance { .. }) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}
