//! Attempts and retries, one loop for steps and compensations alike.
//!
//! An attempt is bounded by its timeout on the engine's clock, and a panic
//! in it is a failed attempt. Between attempts the loop records when the
//! next one is due (the caller's `record_retry`) before it sleeps, so a
//! crash between retries resumes at that time instead of waiting the whole
//! delay again.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::failure::StepError;
use crate::panic::{CatchUnwind, catch};
use crate::time::clock::{Clock, add_millis, from_millis, to_millis};
use crate::workflow::config::StepConfig;

/// How a run of attempts ended.
pub(crate) enum Retried<T> {
    /// An attempt succeeded, after `attempts` in all.
    Done(T, u32),
    /// The error was fatal or the retries ran out.
    GaveUp(StepError, u32),
}

/// Where a run of attempts starts: after `attempts` failed ones, the next
/// due at `retry_at`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Resume {
    pub(crate) attempts: u32,
    pub(crate) retry_at: Option<u64>,
}

/// Runs `attempt(n)` for n = 1, 2, … as `config` allows.
/// `record_retry(attempt, error, retry_at, delay)` stores the next retry
/// time; an error from it stops the loop with that error.
pub(crate) async fn retry<T, Fut, E>(
    clock: &Arc<dyn Clock>,
    config: &StepConfig,
    resume: Resume,
    mut attempt: impl FnMut(u32) -> Fut,
    mut record_retry: impl FnMut(u32, &StepError, u64, Duration) -> Result<(), E>,
) -> Result<Retried<T>, E>
where
    Fut: Future<Output = Result<T, StepError>>,
{
    if let Some(at) = resume.retry_at {
        clock.sleep_until(from_millis(at)).await;
    }
    let mut attempts = resume.attempts;
    loop {
        attempts = attempts.saturating_add(1);
        // User code may run (and panic) while the attempt's future is made
        // (a hand-written closure, an input's `Clone`): a failed attempt too.
        let outcome = match catch(|| attempt(attempts)) {
            Ok(future) => run_attempt(clock, config.timeout, future).await,
            Err(panic) => Err(StepError::retryable(format!(
                "the attempt panicked: {panic}"
            ))),
        };
        match outcome {
            Ok(value) => return Ok(Retried::Done(value, attempts)),
            Err(error) if error.is_retryable() && config.allows_retry_after(attempts) => {
                let delay = config.delay_after(attempts);
                let at = add_millis(to_millis(clock.now()), delay);
                record_retry(attempts, &error, at, delay)?;
                clock.sleep_until(from_millis(at)).await;
            }
            Err(error) => return Ok(Retried::GaveUp(error, attempts)),
        }
    }
}

/// One attempt, bounded by `timeout`; a panic is a failed attempt.
async fn run_attempt<T, Fut>(
    clock: &Arc<dyn Clock>,
    timeout: Duration,
    attempt: Fut,
) -> Result<T, StepError>
where
    Fut: Future<Output = Result<T, StepError>>,
{
    let deadline = from_millis(add_millis(to_millis(clock.now()), timeout));
    let timed_out = clock.timeout_at(deadline);
    tokio::select! {
        biased;
        result = CatchUnwind::new(attempt) => result.unwrap_or_else(|panic| {
            Err(StepError::retryable(format!("the attempt panicked: {panic}")))
        }),
        () = timed_out => Err(StepError::retryable(format!(
            "the attempt timed out after {timeout:?}"
        ))),
    }
}
