//! The runner's side of child workflows (`workflow::child`): starting a
//! child under its derived id, telling a parent that its child ended, and
//! whether an ancestor may still undo an instance. The commands go through
//! `Kin` (implemented in `instance::kin`), which the workflow code below
//! reaches too.

use std::sync::Arc;

use crate::codec::Payload;
use crate::error::Result;
use crate::journal::command::Command;
use crate::names::id::InstanceId;
use crate::run::runner::Runner;

/// How many parents up a retention sweep looks for one that has not
/// finished (a chain deeper than this is kept as if one had not).
const MAX_ANCESTORS: usize = 64;

/// Creates `child` unless it exists, recording `parent` with its creation,
/// and gives it a driver; answers once its creation is durable. The
/// parent's record of the call is made durable first, so no child exists
/// that its parent's journal would not name after a crash.
pub(crate) async fn start_child(
    runner: &Arc<Runner>,
    parent: &InstanceId,
    child: &InstanceId,
    workflow: &str,
    input: Payload,
) -> Result<()> {
    let journal = &runner.core.journal;
    journal.flush().await?;
    journal
        .create_then(child, workflow, input, None, true, |state, created| {
            // Found by its id: the call was made before a crash, which may
            // have come between the child's creation and the record that
            // names its parent (two records): the link is written now, even
            // on a child that ended since, before the parent records
            // anything more of the call. Without it the child could not
            // tell its parent that a rollback undid it, and `list
            // --parent` would not find it.
            if !created {
                return Ok((crate::journal::tags::parent_link(state, parent), ()));
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
        let Some(kin) = self.core.kin() else { return };
        if let Err(e) = kin.command(&InstanceId::stored(&parent), command).await {
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
