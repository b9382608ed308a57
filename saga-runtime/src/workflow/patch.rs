//! `ctx.patched(name)`: changing a workflow's calls while instances of it
//! are in flight. New instances take the patched branch; an instance whose
//! history already went past the patch's place goes on without it, so its
//! replay meets the calls it recorded.

use crate::workflow::context::WorkflowContext;

impl WorkflowContext {
    /// Whether this instance runs the code of patch `name`:
    ///
    /// ```ignore
    /// if ctx.patched("fraud-check") {
    ///     fraud_check(&ctx, order.clone()).await?;
    /// }
    /// charge_card(&ctx, order).await?;
    /// ```
    ///
    /// True for an instance that reaches the call with nothing in its
    /// history past this point (every new instance, and one that was
    /// waiting before it): that is recorded, and its replays answer true
    /// again. False for an instance whose history already went past this
    /// point without the patch: it recorded the calls of the code before,
    /// and replays them. The call takes no slot in the sequence of durable
    /// calls, so adding it shifts no history, and removing it later (once
    /// no instance from before it runs) raises no non-determinism.
    ///
    /// `name` follows the step-name rules; a name used for two patches of
    /// one workflow means one patch. A rollback's replay of an instance
    /// that was `Blocked` answers from the record alone.
    ///
    /// Retiring a patch takes two releases: the first keeps
    /// `if ctx.patched(..)`; once no instance started before it runs
    /// (`saga list --status running` and friends), the next drops the `if`
    /// and keeps the branch's calls unconditionally.
    pub fn patched(&self, name: &'static str) -> bool {
        self.run.patched(name)
    }
}
