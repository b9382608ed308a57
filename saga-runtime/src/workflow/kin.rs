//! What the engine does for child workflows, as the code below it sees
//! it: the runner implements [`Kin`]; a workflow's child calls
//! (`workflow::child`) and the engine's core reach it through a
//! [`KinCell`], set once as the engine is built.

use std::sync::Arc;

use crate::codec::Payload;
use crate::journal::command::Command;
use crate::names::id::InstanceId;
use crate::workflow::compensation::BoxFuture;

/// What the engine does for child workflows, for code below it (the
/// runner implements it; see the module docs).
pub(crate) trait Kin: Send + Sync {
    /// Whether workflow `name` is registered here.
    fn registered(&self, name: &str) -> bool;

    /// Creates child `child` of `parent`, running `workflow` with `input`,
    /// unless it exists; answers once the creation is durable.
    fn start_child(
        &self,
        parent: &InstanceId,
        child: &InstanceId,
        workflow: &str,
        input: Payload,
    ) -> BoxFuture<crate::Result<()>>;

    /// Asks `command` of instance `id`, here or of the worker that drives
    /// it; answers once it was acted on.
    fn command(&self, id: &InstanceId, command: Command) -> BoxFuture<crate::Result<()>>;
}

/// Keeps the engine's [`Kin`] for the code below it (set once, as the
/// engine is built).
#[derive(Default)]
pub(crate) struct KinCell(std::sync::OnceLock<Arc<dyn Kin>>);

impl KinCell {
    pub(crate) fn set(&self, kin: Arc<dyn Kin>) {
        let _ = self.0.set(kin);
    }

    pub(crate) fn get(&self) -> Option<Arc<dyn Kin>> {
        self.0.get().cloned()
    }
}
