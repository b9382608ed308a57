//! `start_with`: a start with options (tags, a parent); `start_on`: a
//! start on a queue, with a key and a priority.

use std::future::{Future, IntoFuture};
use std::pin::Pin;

use crate::engine::Engine;
use crate::error::Result;
use crate::instance::{Instance, Run};
use crate::journal::queued::Enqueue;
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
    /// values are at most [`MAX_TAG_VALUE_BYTES`](crate::inspect::MAX_TAG_VALUE_BYTES)
    /// bytes; an instance holds at most [`MAX_TAGS`](crate::inspect::MAX_TAGS).
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
        // On the default queue, unless it is a child (which never waits
        // behind its parent's slot).
        let enqueue = match runner.queues.default_queue() {
            Some(queue) if options.parent.is_none() => Some(Enqueue {
                queue: queue.to_owned(),
                key: None,
                priority: 0,
            }),
            _ => None,
        };
        crate::instance::send::start(runner, workflow, id, input, enqueue.as_ref(), |state| {
            let parent = options.parent.as_deref();
            match crate::journal::tags::described(id, state, parent, &options.tags) {
                // An instance that ended keeps the tags it had.
                Err(crate::Error::InvalidState { .. }) => Ok((None, ())),
                described => Ok((described?, ())),
            }
        })
        .await?;
        runner.core.journal.flush().await?;
        if enqueue.is_some() {
            crate::run::dequeue::note_started(runner, id).await;
            runner.queues.poke();
        }
        Ok(Run::new(Instance::new(runner.clone(), id)))
    }
}

/// A start on a queue, made by [`Engine::start_on`]: give it a key and a
/// priority, then `.await` it.
#[must_use = "nothing is started until the start is awaited"]
pub struct StartOn<'a, W: Workflow> {
    engine: &'a Engine,
    workflow: W,
    id: String,
    input: W::Input,
    enqueue: Enqueue,
}

impl<W: Workflow> StartOn<'_, W> {
    /// The instance's key (a customer, an account): at most the queue's
    /// [`per_key`](crate::queue::Queue::per_key) instances with one key hold a
    /// slot at once, and within a priority keys take turns. The
    /// instance-id grammar: 1-100 characters of `[A-Za-z0-9_-]`, not
    /// starting with `-` ([`Error::InvalidQueueKey`](crate::Error::InvalidQueueKey)
    /// otherwise, before anything is stored).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.enqueue.key = Some(key.into());
        self
    }

    /// Its priority (default 0): a waiting instance of a higher priority
    /// takes a free slot before any of a lower one.
    pub fn priority(mut self, priority: i32) -> Self {
        self.enqueue.priority = priority;
        self
    }

    async fn start(self) -> Result<Run<W::Output>> {
        let runner = self.engine.runner();
        runner.queues.queue(&self.enqueue.queue)?;
        if let Some(key) = &self.enqueue.key {
            crate::queue::check_key(key)?;
        }
        let id = self.id.as_str();
        crate::instance::send::start(
            runner,
            self.workflow,
            id,
            self.input,
            Some(&self.enqueue),
            |_| Ok((None, ())),
        )
        .await?;
        runner.core.journal.flush().await?;
        crate::run::dequeue::note_started(runner, id).await;
        runner.queues.poke();
        Ok(Run::new(Instance::new(runner.clone(), id)))
    }
}

impl<'a, W: Workflow> IntoFuture for StartOn<'a, W> {
    type Output = Result<Run<W::Output>>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.start())
    }
}

impl Engine {
    /// Starts an instance of `workflow` on the declared queue `queue`
    /// (see [`EngineBuilder::queue`](crate::EngineBuilder::queue)): it is
    /// stored `Queued` and gets a driver only when it takes a slot of the
    /// queue, which it holds until it ends (paused, it keeps it). Give it
    /// a [`key`](StartOn::key) and a [`priority`](StartOn::priority), then
    /// await it. On a store shared by workers, any worker with room that
    /// runs `workflow` takes it.
    ///
    /// As for [`Engine::start`], an id that exists returns that instance
    /// (same workflow, equal input), wherever it runs. An undeclared
    /// queue is [`Error::UnknownQueue`](crate::Error::UnknownQueue), a bad
    /// key [`Error::InvalidQueueKey`](crate::Error::InvalidQueueKey), both
    /// before anything is stored. Child workflows (`ctx.child`) are never
    /// queued: they run outside their parent's queue.
    ///
    /// # Cancel safety
    ///
    /// The instance is stored, waiting in its queue, at the first poll;
    /// dropping the future after that leaves it queued, and a start
    /// again with the same id and input returns it.
    ///
    /// # Examples
    ///
    /// ```
    /// # use saga_runtime::prelude::*;
    /// # use saga_runtime::queue::Queue;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), saga_runtime::Error> {
    /// let transfer = workflow_fn("transfer", |_ctx: WorkflowContext, cents: u64| async move {
    ///     Ok::<_, WorkflowError>(cents)
    /// });
    /// let engine = Engine::builder()
    ///     .queue(Queue::new("bank-api").concurrency(10).per_key(1))
    ///     .temporary()?;
    /// let run = engine
    ///     .start_on("bank-api", transfer, "transfer-1", 500)
    ///     .key("customer-42")
    ///     .priority(5)
    ///     .await?;
    /// assert_eq!(run.result().await?, 500);
    /// # Ok(()) }
    /// ```
    pub fn start_on<W: Workflow>(
        &self,
        queue: &str,
        workflow: W,
        id: &str,
        input: W::Input,
    ) -> StartOn<'_, W> {
        StartOn {
            engine: self,
            workflow,
            id: id.to_owned(),
            input,
            enqueue: Enqueue {
                queue: queue.to_owned(),
                key: None,
                priority: 0,
            },
        }
    }
}
