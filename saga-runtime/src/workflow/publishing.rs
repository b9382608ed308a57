//! `ctx.publish`: a workflow sets a named value that callers outside read
//! while it runs (`Instance::published`, `Instance::wait_for_published`).

use serde::Serialize;

use crate::error::{Error, Result};
use crate::journal::Change;
use crate::workflow::context::{Mode, WorkflowContext};

impl WorkflowContext {
    /// Publishes `value` as the latest value of `name`, for callers
    /// outside to read while the instance runs:
    /// [`Instance::published`](crate::Instance::published) reads it,
    /// [`Instance::wait_for_published`](crate::Instance::wait_for_published)
    /// waits for it to be set or to change. A progress bar, a stage, a
    /// running total.
    ///
    /// Each call records the value in the journal (sealed by the engine's
    /// codec, as every user value), durable with the workflow's next
    /// durable call or sooner; the history keeps each, readers see the
    /// latest. It takes no slot: adding a `publish` call to a workflow
    /// with running instances does not break their replay. A replay
    /// publishes nothing again: the `n`th publish of a name in a run of
    /// the workflow function is recorded once (a restart begins anew).
    /// The values belong to the instance's run: a run that continued as
    /// new begins with none.
    ///
    /// Each record counts against
    /// [`max_journal_records`](crate::EngineBuilder::max_journal_records);
    /// publish when the value changes, not in a tight loop. The name is a
    /// string literal the macros check, spelled as step names are
    /// ([`Error::InvalidArgument`] otherwise); a value over the payload
    /// limit is [`Error::PayloadTooLarge`].
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// let import = workflow_fn("import", |ctx: WorkflowContext, rows: u32| async move {
    ///     for done in 0..=rows {
    ///         ctx.publish("progress", &done)?;
    ///     }
    ///     Ok::<_, WorkflowError>(())
    /// });
    /// ```
    pub fn publish<T: Serialize + ?Sized>(&self, name: &'static str, value: &T) -> Result<()> {
        crate::names::check_name("published value", name).map_err(Error::InvalidArgument)?;
        let scope = &self.run.scope;
        let value = scope
            .core
            .encode_limited(value, || format!("the published value {name:?}"))?;
        let occurrence = self.run.count_publish(name);
        if scope.mode != Mode::Forward {
            return Ok(());
        }
        scope.write(|state| {
            let recorded = state
                .published
                .get(name)
                .map_or(0, |p| p.published_in(scope.generation));
            if occurrence < recorded {
                // A replay: this publish is in the journal already.
                return Ok((None, ()));
            }
            let change = Change::Published {
                name: name.to_owned(),
                value,
            };
            Ok((Some(change), ()))
        })
    }
}
