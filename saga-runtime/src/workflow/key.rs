//! Idempotency keys, and what a step body may know about its attempt.

use std::fmt;
use std::sync::Arc;

use crate::error::failure::StepError;
use crate::names::id::InstanceId;
use crate::workflow::service::{Service, Services};

/// The idempotency key of a step or of a rollback handler.
///
/// Deterministic: `"{instance}:{step}"` for a step, and
/// `"{instance}:rollback:{step}"` for its compensation, then `#{occurrence}`
/// from the second call of the same step on, then `@{generation}` after the
/// instance was restarted (`restart()` or `restart_from`) that many times.
/// Every attempt and every replay within a generation gets the same key, so
/// a callee that dedupes on it applies the side effect once; a restart acts
/// again, with new keys. An instance that continued as new
/// (`ctx.continue_as_new`) ends its keys with `~r{run}` from its second
/// run on (`t-1:debit#2@1~r3`): each run acts anew. Keys of run 0 are
/// those of every release before.
///
/// The step name in the key is the one stored in history, so a step
/// renamed with `renamed_from` keeps its old keys.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(Arc<str>);

impl IdempotencyKey {
    /// The key as a string, to pass to the callee.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub(crate) fn forward(
        instance: &str,
        step: &str,
        occurrence: u32,
        generation: u32,
        run: u32,
    ) -> Self {
        IdempotencyKey(suffixed(format!("{instance}:{step}"), occurrence, generation, run).into())
    }

    pub(crate) fn rollback(
        instance: &str,
        step: &str,
        occurrence: u32,
        generation: u32,
        run: u32,
    ) -> Self {
        IdempotencyKey(
            suffixed(
                format!("{instance}:rollback:{step}"),
                occurrence,
                generation,
                run,
            )
            .into(),
        )
    }
}

fn suffixed(mut key: String, occurrence: u32, generation: u32, run: u32) -> String {
    if occurrence > 0 {
        key.push_str(&format!("#{occurrence}"));
    }
    if generation > 0 {
        key.push_str(&format!("@{generation}"));
    }
    if run > 0 {
        key.push_str(&format!("~r{run}"));
    }
    key
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// What a step body may know about the attempt it runs in.
#[derive(Clone, Debug)]
pub struct StepContext {
    pub(crate) key: IdempotencyKey,
    pub(crate) instance: InstanceId,
    pub(crate) step: &'static str,
    pub(crate) occurrence: u32,
    pub(crate) attempt: u32,
    pub(crate) services: Arc<Services>,
}

impl StepContext {
    /// The service of type `T` provided to the engine
    /// ([`EngineBuilder::provide`](crate::EngineBuilder::provide)); a
    /// permanent error naming it when none was, so `?` gives up the step
    /// at once.
    pub fn service<T: Send + Sync + 'static>(&self) -> Result<Service<T>, StepError> {
        self.services.get::<T>()
    }

    /// The step's idempotency key.
    pub fn key(&self) -> IdempotencyKey {
        self.key.clone()
    }

    /// The instance id.
    pub fn instance_id(&self) -> &str {
        &self.instance
    }

    /// The step's name.
    pub fn step_name(&self) -> &str {
        self.step
    }

    /// 0 for the first call of this step in the instance, 1 for the second, ...
    pub fn occurrence(&self) -> u32 {
        self.occurrence
    }

    /// The attempt number, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_occurrence_then_generation() {
        assert_eq!(
            IdempotencyKey::forward("t-1", "debit", 0, 0, 0).as_str(),
            "t-1:debit"
        );
        assert_eq!(
            IdempotencyKey::forward("t-1", "debit", 2, 0, 0).as_str(),
            "t-1:debit#2"
        );
        assert_eq!(
            IdempotencyKey::forward("t-1", "debit", 2, 1, 0).as_str(),
            "t-1:debit#2@1"
        );
        assert_eq!(
            IdempotencyKey::rollback("t-1", "debit", 0, 3, 0).as_str(),
            "t-1:rollback:debit@3"
        );
        // A run after the first (continue-as-new) comes last.
        assert_eq!(
            IdempotencyKey::forward("t-1", "debit", 2, 1, 3).as_str(),
            "t-1:debit#2@1~r3"
        );
        assert_eq!(
            IdempotencyKey::rollback("t-1", "debit", 0, 0, 1).as_str(),
            "t-1:rollback:debit~r1"
        );
    }
}
