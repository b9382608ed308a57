//! `start_with`: a start with options (tags now; a parent when child
//! workflows come).

use crate::engine::Engine;
use crate::error::Result;
use crate::instance::{Instance, Run};
use crate::workflow::Workflow;

/// What a start records beside the input: see [`Engine::start_with`].
///
/// ```
/// # use saga_runtime::StartOptions;
/// let options = StartOptions::new().tag("customer", "42").tag("region", "eu");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct StartOptions {
    tags: Vec<(String, String)>,
    parent: Option<String>,
}

impl StartOptions {
    /// No tags, no parent: what [`Engine::start`] does.
    pub fn new() -> StartOptions {
        StartOptions::default()
    }

    /// Tags the instance `key` = `value` (`list` finds it by its tags).
    /// Keys follow the step-name grammar (`[a-z0-9-]`, 1-64 characters);
    /// values are at most [`MAX_TAG_VALUE_BYTES`](crate::MAX_TAG_VALUE_BYTES)
    /// bytes; an instance holds at most [`MAX_TAGS`](crate::MAX_TAGS).
    /// The same key again replaces the value.
    pub fn tag(mut self, key: impl Into<String>, value: impl Into<String>) -> StartOptions {
        self.tags.push((key.into(), value.into()));
        self
    }

    /// Records `parent` as the instance that started this one
    /// (`ListFilter::parent` finds it). Child workflows set it; the id is
    /// not checked against the store.
    pub fn parent(mut self, parent: impl Into<String>) -> StartOptions {
        self.parent = Some(parent.into());
        self
    }
}

impl Engine {
    /// Like [`Engine::start`], recording `options` too: its tags (and
    /// parent) are stored with the instance's creation, before its driver
    /// runs, and its index entry has them from its first record on.
    ///
    /// A start of an instance that exists (same workflow, equal input)
    /// adds the tags it lacks, unless it ended; a tag over the limits is
    /// [`Error::InvalidTag`](crate::Error::InvalidTag) or
    /// [`Error::TooManyTags`](crate::Error::TooManyTags), before anything
    /// is stored for a new instance.
    ///
    /// # Cancel safety
    ///
    /// As [`Engine::start`]: the instance and its tags are stored, under
    /// one lock, at the first poll.
    ///
    /// # Examples
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// # use saga_runtime::StartOptions;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), saga_runtime::Error> {
    /// let echo = workflow_fn("echo", |_ctx: WorkflowContext, n: u64| async move {
    ///     Ok::<_, WorkflowError>(n)
    /// });
    /// let engine = Engine::temporary()?;
    /// let options = StartOptions::new().tag("customer", "42");
    /// let run = engine.start_with(echo, "transfer-1", 7, options).await?;
    /// run.result().await?;
    /// let found = engine.list(&ListFilter::all().tag("customer", "42")).await?;
    /// assert_eq!(found[0].id, "transfer-1");
    /// # Ok(()) }
    /// ```
    pub async fn start_with<W: Workflow>(
        &self,
        workflow: W,
        id: &str,
        input: W::Input,
        options: StartOptions,
    ) -> Result<Run<W::Output>> {
        // Refused before anything is stored (a new instance has no tags
        // yet; an existing one is checked again under its lock).
        let keys: std::collections::BTreeSet<&str> =
            options.tags.iter().map(|(k, _)| k.as_str()).collect();
        for (key, value) in &options.tags {
            crate::journal::tags::check_tag(key, value)?;
        }
        if keys.len() > crate::journal::tags::MAX_TAGS {
            return Err(crate::Error::TooManyTags {
                id: id.to_owned(),
                limit: crate::journal::tags::MAX_TAGS,
            });
        }
        let runner = self.runner();
        crate::instance::send::start(runner, workflow, id, input, |state| {
            let parent = options.parent.as_deref();
            match crate::journal::tags::described(id, state, parent, &options.tags) {
                // An instance that ended keeps the tags it had.
                Err(crate::Error::InvalidState { .. }) => Ok((None, ())),
                described => Ok((described?, ())),
            }
        })
        .await?;
        runner.core.journal.flush().await?;
        Ok(Run::new(Instance::new(runner.clone(), id)))
    }
}
