//! Retry configuration of steps and rollback handlers.

use std::time::Duration;

/// How the delay between attempts grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backoff {
    /// The same delay every time.
    Constant,
    /// `delay × n` before attempt `n + 1`.
    Linear,
    /// `delay × 2ⁿ⁻¹` before attempt `n + 1`.
    Exponential,
}

/// The most retries a step may have.
pub const MAX_RETRIES: u32 = 10_000;

/// Retries, delay, backoff and per-attempt timeout of a step or of a
/// rollback handler. The defaults: 5 retries, 10 seconds, exponential,
/// 10 minutes.
///
/// None of this is part of a step's identity: changing it does not break
/// replay of running instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepConfig {
    /// Extra attempts after the first (at most [`MAX_RETRIES`]).
    pub retries: u32,
    /// The base delay between attempts.
    pub delay: Duration,
    /// How the delay grows.
    pub backoff: Backoff,
    /// How long one attempt may take before it counts as failed.
    pub timeout: Duration,
}

impl StepConfig {
    /// The defaults.
    pub const fn new() -> Self {
        StepConfig {
            retries: 5,
            delay: Duration::from_secs(10),
            backoff: Backoff::Exponential,
            timeout: Duration::from_secs(600),
        }
    }

    /// With this many retries (capped at [`MAX_RETRIES`]).
    pub const fn retries(mut self, retries: u32) -> Self {
        self.retries = if retries > MAX_RETRIES {
            MAX_RETRIES
        } else {
            retries
        };
        self
    }

    /// With this base delay.
    pub const fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// With this backoff.
    pub const fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// With this per-attempt timeout.
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The delay after failed attempt number `attempt` (1-based).
    pub(crate) fn delay_after(&self, attempt: u32) -> Duration {
        let factor: u32 = match self.backoff {
            Backoff::Constant => 1,
            Backoff::Linear => attempt.max(1),
            Backoff::Exponential => 1u32
                .checked_shl(attempt.saturating_sub(1))
                .unwrap_or(u32::MAX),
        };
        self.delay.saturating_mul(factor)
    }

    /// Whether attempt number `attempt` (1-based) may be followed by another.
    pub(crate) fn allows_retry_after(&self, attempt: u32) -> bool {
        attempt <= self.retries.min(MAX_RETRIES)
    }
}

impl Default for StepConfig {
    fn default() -> Self {
        StepConfig::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_as_configured() {
        let base = StepConfig::new().delay(Duration::from_secs(1));
        let secs = |c: StepConfig| {
            (1..=4)
                .map(|n| c.delay_after(n).as_secs())
                .collect::<Vec<_>>()
        };
        assert_eq!(secs(base.backoff(Backoff::Constant)), [1, 1, 1, 1]);
        assert_eq!(secs(base.backoff(Backoff::Linear)), [1, 2, 3, 4]);
        assert_eq!(secs(base.backoff(Backoff::Exponential)), [1, 2, 4, 8]);
        assert_eq!(
            base.delay_after(200),
            Duration::from_secs(u64::from(u32::MAX))
        );
    }
}
