//! Reading what a workflow published (`ctx.publish`) from outside: the
//! latest value of a name, or a wait for it to be set or to change.

use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use tokio::sync::broadcast;

use crate::codec::Payload;
use crate::error::{Error, Result};
use crate::instance::Instance;
use crate::model::history::Event;
use crate::time::clock::from_millis;

/// A value a workflow published with
/// [`ctx.publish`](crate::WorkflowContext::publish), as
/// [`Instance::wait_for_published`] returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Published<T> {
    /// The value.
    pub value: T,
    /// Grows with each value published (of any name), across restarts and
    /// runs: pass it back as `after` to wait for the next one.
    pub version: u64,
    /// When it was published, on the engine's clock.
    pub at: SystemTime,
}

/// The latest value of a name, as the instance's state holds it.
struct Latest {
    value: Payload,
    version: u64,
    at: u64,
}

impl Instance {
    /// The latest value the workflow published under `name`
    /// ([`ctx.publish`](crate::WorkflowContext::publish)), or `None` when
    /// it has published none (this run). On PostgreSQL any worker reads
    /// it, the owner or not.
    ///
    /// [`Error::Decode`] when the value does not decode as `T`; a value
    /// sealed with a key this engine's codec lacks says which key.
    ///
    /// # Cancel safety
    ///
    /// A read; dropping the future changes nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn show(engine: saga_runtime::Engine) -> saga_runtime::Result<()> {
    /// let import = engine.instance("import-7").await?;
    /// if let Some(done) = import.published::<u32>("progress").await? {
    ///     println!("{done} rows imported");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn published<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        let (latest, _) = self.latest_published(name, None).await?;
        latest
            .map(|latest| self.decode_published(name, latest).map(|p| p.value))
            .transpose()
    }

    /// Waits until the workflow publishes a value of `name` newer than
    /// version `after` (`None`: any value, so one published already
    /// answers at once), and returns it; `None` when `timeout` passes
    /// first, on the engine's clock, or when the instance finished
    /// without one (it publishes nothing more). Pass the `version` it
    /// returned as the next `after` to follow each change: values
    /// published between two calls are skipped, and the latest returned.
    ///
    /// On PostgreSQL a worker that does not own the instance waits too:
    /// it looks at the store when the instance stops and at every poll
    /// interval ([`EngineBuilder::poll_interval`](crate::EngineBuilder::poll_interval)).
    /// [`Error::Closed`] when the engine closes meanwhile.
    ///
    /// The timeout's deadline is, to a [`TestClock`](crate::testing::TestClock), an
    /// event wait's: [`TestClock::wait_for_event_waits`](crate::testing::TestClock::wait_for_event_waits)
    /// counts it.
    ///
    /// # Cancel safety
    ///
    /// A read; dropping the future changes nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn follow(engine: saga_runtime::Engine) -> saga_runtime::Result<()> {
    /// use std::time::Duration;
    /// let import = engine.instance("import-7").await?;
    /// let mut seen = None;
    /// while let Some(progress) = import
    ///     .wait_for_published::<u32>("progress", seen, Duration::from_secs(60))
    ///     .await?
    /// {
    ///     println!("{} rows imported", progress.value);
    ///     seen = Some(progress.version);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait_for_published<T: DeserializeOwned>(
        &self,
        name: &str,
        after: Option<u64>,
        timeout: Duration,
    ) -> Result<Option<Published<T>>> {
        let core = &self.runner.core;
        let clock = core.clock.clone();
        let mut expired = clock.event_deadline(clock.now() + timeout);
        // Subscribed before the first read, so no change after it is missed.
        let mut events = self.journal().subscribe_events();
        let mut ended = self.journal().subscribe_ends();
        let mut told = self.journal().changes(crate::store::Told::Stops);
        loop {
            ended.borrow_and_update();
            let (latest, finished) = self.latest_published(name, after).await?;
            if let Some(latest) = latest {
                return self.decode_published(name, latest).map(Some);
            }
            if finished {
                return Ok(None);
            }
            if core.is_closed() {
                return Err(Error::Closed);
            }
            let owned = self.journal().owns(&self.id);
            tokio::select! {
                // Biased: a simulated run picks the same on every replay of its seed.
                biased;
                () = &mut expired => return Ok(None),
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

    /// The latest value of `name` if newer than `after`, and whether the
    /// instance finished.
    async fn latest_published(
        &self,
        name: &str,
        after: Option<u64>,
    ) -> Result<(Option<Latest>, bool)> {
        self.journal()
            .read_durable(&self.id, |state| {
                let latest = state
                    .published
                    .get(name)
                    .filter(|p| after.is_none_or(|after| p.seq > after))
                    .map(|p| Latest {
                        value: p.value.clone(),
                        version: p.seq,
                        at: p.at,
                    });
                (latest, state.status.is_terminal())
            })
            .await
    }

    fn decode_published<T: DeserializeOwned>(
        &self,
        name: &str,
        latest: Latest,
    ) -> Result<Published<T>> {
        let what = || format!("value {name:?} published by instance {:?}", self.id);
        if let Some(key) = latest.value.sealed_key() {
            return Err(crate::seal::missing_key(what(), key));
        }
        let value = latest.value.decode::<T>().map_err(|detail| Error::Decode {
            what: what(),
            type_name: std::any::type_name::<T>(),
            detail,
        })?;
        Ok(Published {
            value,
            version: latest.version,
            at: from_millis(latest.at),
        })
    }
}

/// Waits for the next event of instance `id` (or a lag, after which the
/// caller reads again); false when the engine closed.
pub(crate) async fn next_event_of(events: &mut broadcast::Receiver<Event>, id: &str) -> bool {
    loop {
        match events.recv().await {
            Ok(event) if event.instance != id => {}
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => return true,
            Err(broadcast::error::RecvError::Closed) => return false,
        }
    }
}
