//! What the engine does for child workflows, as the workflow code below
//! it reaches it (`workflow::kin::Kin`): start a child, and ask a command
//! of an instance here or of the worker that drives it.

use std::sync::Weak;

use crate::codec::Payload;
use crate::error::Result;
use crate::instance::Instance;
use crate::journal::command::Command;
use crate::names::id::InstanceId;
use crate::run::runner::Runner;
use crate::workflow::compensation::BoxFuture;
use crate::workflow::kin::Kin;

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
            crate::run::children::start_child(&runner, &parent, &child, &workflow, input).await
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
