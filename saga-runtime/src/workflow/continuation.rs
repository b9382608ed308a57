//! `ctx.continue_as_new(workflow, input)`: a loop that runs for months
//! (a subscription that bills monthly) ends its run and begins the next,
//! under the same id, with a new input and an empty history, so no
//! journal grows without end. The journal's side is `journal::runs`; the
//! driver hands the run over once the workflow code asked for it.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::codec::Payload;
use crate::error::failure::{Failure, FailureKind};
use crate::workflow::Workflow;
use crate::workflow::context::{Ctx, Mode, WorkflowContext};

impl WorkflowContext {
    /// Ends this run of the instance and begins the next one, under the
    /// same id, with `input` and an empty history: a long loop keeps its
    /// journal short.
    ///
    /// ```ignore
    /// #[workflow(name = "subscription")]
    /// async fn subscription(ctx: WorkflowContext, month: u32) -> Result<u32, WorkflowError> {
    ///     bill(&ctx, month).await?;
    ///     ctx.sleep("until-next-month", "30 days").await?;
    ///     if month == 12 {
    ///         return Ok(month);
    ///     }
    ///     ctx.continue_as_new(subscription, month + 1).await
    /// }
    /// ```
    ///
    /// `workflow` is the instance's own workflow (inside a `#[workflow]`
    /// function, its name), so `input` is checked to be its input type at
    /// compile time; another workflow's value parks the instance
    /// `Blocked`. The future never completes: the run stops where it is
    /// awaited, so it fits any return type (`return ctx.continue_as_new(..).await;`).
    ///
    /// - The hand-over is one durable change: a crash anywhere leaves
    ///   exactly one next run. The status stays `Running`; `result()`
    ///   waits for the run that ends the instance.
    /// - Each run has its own idempotency keys (`~r{run}`) and child ids
    ///   (`~r{run}`), so a new run acts anew; events sent and not taken
    ///   yet, tags, the parent and a queue slot carry over.
    /// - Rollback compensates the current run's steps only: the old runs'
    ///   compensations are not carried over. A workflow that must undo
    ///   earlier runs carries what it needs in `input`, or runs each
    ///   iteration as a child workflow (a child that completed stays
    ///   undoable by its own rollback).
    /// - `restart()` restarts the current run, from its own input.
    pub fn continue_as_new<W: Workflow, T>(
        &self,
        workflow: W,
        input: W::Input,
    ) -> ContinueAsNew<T> {
        let asked = if workflow.name() != &*self.run.scope.workflow {
            Err(Failure::new(
                FailureKind::Workflow,
                format!(
                    "ctx.continue_as_new was given workflow {:?}, and this instance runs {:?}: \
                     an instance continues as its own workflow (start the other as a child)",
                    workflow.name(),
                    self.run.scope.workflow
                ),
            ))
        } else {
            self.run
                .scope
                .core
                .encode_readable(&input, || "input of ctx.continue_as_new".into())
                .map_err(|e| Failure::new(FailureKind::Workflow, e.to_string()))
        };
        ContinueAsNew {
            ctx: self.run.clone(),
            asked: Some(asked),
            output: PhantomData,
        }
    }
}

/// What [`WorkflowContext::continue_as_new`] returns: awaited, it stops
/// the run, which the engine hands over to the next; it never completes.
#[must_use = "the run continues as new only where this is awaited: `return ctx.continue_as_new(..).await;`"]
pub struct ContinueAsNew<T> {
    ctx: Arc<Ctx>,
    asked: Option<Result<Payload, Failure>>,
    output: PhantomData<fn() -> T>,
}

impl<T> Future for ContinueAsNew<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<T> {
        let this = self.get_mut();
        // A rebuild of compensations runs nothing forward: it stops here.
        if this.ctx.scope.mode == Mode::Forward {
            match this.asked.take() {
                Some(Ok(input)) => this.ctx.ask_to_continue(input),
                Some(Err(failure)) => this.ctx.scope.fail(failure),
                None => {}
            }
        }
        Poll::Pending
    }
}
