//! The store's side of the timer reads (see `timers`): each sent to the
//! store's thread, after this worker's queued writes where it reads the
//! instances this worker writes, and its answer unpacked.

use super::server::{Job, Read, ReadAnswer};
use super::timers::{TimerAnswer, TimerRead};
use crate::error::{Error, Result};
use crate::store::{ActiveSet, Store};

impl super::PgStore {
    /// Runs `read`: after this worker's queued writes when `ordered` (it
    /// reads instances this worker writes), else on the pool.
    async fn timer_read(&self, read: TimerRead, ordered: bool) -> Result<TimerAnswer> {
        let read = Read::Timers(read);
        let answer = if ordered {
            self.call(|reply| Job::Read { read, reply }).await?
        } else {
            self.read(read).await?
        };
        match answer {
            ReadAnswer::Timers(answer) => Ok(answer),
            other => Err(other.unexpected()),
        }
    }

    /// Whether a live worker of a release that keeps no timers is
    /// registered.
    pub(super) async fn older_workers(&self) -> Result<bool> {
        match self
            .timer_read(TimerRead::older_workers(&self.schema), false)
            .await?
        {
            TimerAnswer::OlderWorkers(alive) => Ok(alive),
            _ => Err(unexpected()),
        }
    }

    /// See `Store::active_entries_by`: this worker's active instances.
    pub(super) async fn active_by(&self, now: u64) -> Result<ActiveSet> {
        match self
            .timer_read(TimerRead::active_by(&self.schema, now), false)
            .await?
        {
            TimerAnswer::ActiveBy(set) => Ok(set),
            _ => Err(unexpected()),
        }
    }

    /// See `Store::timer_of`.
    pub(super) async fn timer(&self, id: &str) -> Result<Option<(u64, bool)>> {
        let read = TimerRead::timer_of(&self.schema, id);
        match self.timer_read(read, self.owns(id)).await? {
            TimerAnswer::Of(timer) => Ok(timer),
            _ => Err(unexpected()),
        }
    }

    /// See `Store::timers_after`: this worker's timers.
    pub(super) async fn timers_from(
        &self,
        after: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Vec<(u64, String, bool)>> {
        let read = TimerRead::after(&self.schema, after, limit);
        match self.timer_read(read, true).await? {
            TimerAnswer::After(timers) => Ok(timers),
            _ => Err(unexpected()),
        }
    }
}

fn unexpected() -> Error {
    Error::Store("the PostgreSQL thread answered another question".into())
}
