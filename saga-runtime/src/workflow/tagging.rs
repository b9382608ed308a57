//! `ctx.tag`: a workflow tags its own instance as it runs.

use crate::error::Result;
use crate::workflow::context::{Mode, WorkflowContext};

impl WorkflowContext {
    /// Tags the instance `key` = `value` in its journal, so `list` finds
    /// it by the tag (the same key again replaces the value); the record
    /// is durable with the workflow's next durable call. It takes no slot
    /// in the history: adding a `tag` call to a workflow with running
    /// instances does not break their replay, and on replay a tag the
    /// instance has already records nothing.
    ///
    /// Keys follow the step-name grammar; see
    /// [`StartOptions::tag`](crate::StartOptions::tag) for the limits
    /// ([`Error::InvalidTag`](crate::Error::InvalidTag),
    /// [`Error::TooManyTags`](crate::Error::TooManyTags)).
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// let transfer = workflow_fn("transfer", |ctx: WorkflowContext, customer: String| async move {
    ///     ctx.tag("customer", &customer)?;
    ///     Ok::<_, WorkflowError>(())
    /// });
    /// ```
    pub fn tag(&self, key: &str, value: &str) -> Result<()> {
        crate::journal::tags::check_tag(key, value)?;
        let scope = &self.run.scope;
        if scope.mode != Mode::Forward {
            return Ok(());
        }
        let tags = [(key.to_owned(), value.to_owned())];
        scope.write(|state| {
            let described = crate::journal::tags::described(&scope.id, state, None, &tags)?;
            Ok((described, ()))
        })
    }
}
