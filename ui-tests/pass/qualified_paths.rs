//! No prelude: the macros and types by their full paths, in a public,
//! documented module.

#![deny(warnings)]

#![deny(missing_docs)]

//! A crate of workflows.

/// The workflows.
pub mod flows {
    /// Charges a card.
    #[saga_runtime::step(name = "charge")]
    pub async fn charge(
        key: saga_runtime::IdempotencyKey,
        cents: u64,
    ) -> Result<u64, saga_runtime::StepError> {
        Ok(cents + key.as_str().len() as u64)
    }

    /// Refunds a card.
    #[saga_runtime::rollback]
    pub async fn refund(
        ctx: saga_runtime::RollbackContext<'_, u64>,
        cents: u64,
    ) -> Result<(), saga_runtime::StepError> {
        let _ = (ctx.key().as_str(), cents);
        Ok(())
    }

    /// Charges with a refund.
    #[saga_runtime::step(name = "charge-with-refund", rollback = refund)]
    pub async fn charge_with_refund(
        key: saga_runtime::IdempotencyKey,
        cents: u64,
    ) -> Result<u64, saga_runtime::StepError> {
        Ok(cents + key.as_str().len() as u64)
    }

    /// Pays.
    #[saga_runtime::workflow(name = "pay")]
    pub async fn pay(
        ctx: saga_runtime::WorkflowContext,
        cents: u64,
    ) -> Result<u64, saga_runtime::WorkflowError> {
        let charged = charge(&ctx, cents).await?;
        Ok(charge_with_refund(&ctx, charged).await?)
    }
}

fn main() {
    use saga_runtime::Workflow;
    assert_eq!(flows::pay.name(), "pay");
}
