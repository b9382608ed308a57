//! `rollback = "concurrent"` gives the workflow the concurrent order; the
//! default stays sequential.
use saga_runtime::prelude::*;
use saga_runtime::RollbackOrder;

#[workflow(name = "trip", rollback = "concurrent")]
async fn trip(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let _ = ctx;
    Ok(n)
}

#[workflow(name = "errand", rollback = "sequential")]
async fn errand(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let _ = ctx;
    Ok(n)
}

#[workflow(name = "chore")]
async fn chore(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let _ = ctx;
    Ok(n)
}

fn main() {
    assert_eq!(trip.rollback_order(), RollbackOrder::Concurrent);
    assert_eq!(errand.rollback_order(), RollbackOrder::Sequential);
    assert_eq!(chore.rollback_order(), RollbackOrder::Sequential);
}
