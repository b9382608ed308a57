//! One attempt of a step body or rollback handler: bounded by its timeout
//! on the engine's clock, with a panic counted as a failed attempt.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, add_millis, from_millis, to_millis};
use crate::failure::StepError;
use crate::panic::CatchUnwind;

pub(crate) async fn run_attempt<T, Fut>(
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
