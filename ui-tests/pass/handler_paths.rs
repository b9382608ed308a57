//! Handlers and steps in other modules, reached by path; several inputs;
//! a step with no inputs; steps called in a loop (one call site) and from
//! both branches of a helper.

#![deny(warnings)]

use saga_runtime::prelude::*;

mod handlers {
    use saga_runtime::prelude::*;

    /// Releases a seat.
    #[rollback(retries = 3, delay = 250, backoff = "linear", timeout = "1 hour")]
    pub(crate) async fn release_seat(
        ctx: RollbackContext<'_, u32>,
        flight: String,
        passengers: Vec<String>,
    ) -> Result<(), StepError> {
        let release = |seat: &u32| format!("{flight}:{seat}:{}:{}", passengers.len(), ctx.key());
        let _ = ctx.output().map(release);
        Ok(())
    }

    /// Cancels the whole booking.
    #[rollback(backoff = "constant")]
    pub(crate) async fn cancel(ctx: RollbackContext<'_, ()>) -> Result<(), StepError> {
        println!("cancel {}", ctx.key());
        Ok(())
    }
}

pub(crate) mod steps {
    use saga_runtime::prelude::*;

    /// Reserves a seat.
    #[step(name = "reserve-seat", rollback = super::handlers::release_seat)]
    pub(crate) async fn reserve_seat(
        key: IdempotencyKey,
        flight: String,
        passengers: Vec<String>,
    ) -> Result<u32, StepError> {
        Ok(u32::try_from(passengers.len() + flight.len() + key.as_str().len()).unwrap_or(0))
    }
}

#[step(name = "open-booking", rollback = handlers::cancel, timeout = "500 ms")]
async fn open_booking(key: IdempotencyKey) -> Result<(), StepError> {
    println!("open {key}");
    Ok(())
}

#[step(name = "send-reminder", delay = "2 minutes")]
async fn send_reminder(key: IdempotencyKey, day: u32) -> Result<(), StepError> {
    println!("remind {day} with {key}");
    Ok(())
}

#[workflow(name = "book-flight")]
async fn book_flight(ctx: WorkflowContext, input: (String, Vec<String>)) -> Result<u32, WorkflowError> {
    let (flight, passengers) = input;
    open_booking(&ctx).await?;
    let seat = steps::reserve_seat(&ctx, flight, passengers).await?;
    for day in 0..3 {
        send_reminder(&ctx, day).await?;
        ctx.sleep("between-reminders", "1 day").await?;
    }
    Ok(seat)
}

#[workflow(name = "no-input")]
async fn no_input(ctx: WorkflowContext, _: ()) -> Result<(), WorkflowError> {
    ctx.sleep("pause-1", "3 weeks").await?;
    ctx.sleep("s3-upload-retry", "1 h").await?;
    Ok(())
}

fn main() {
    assert_eq!(book_flight.name(), "book-flight");
    assert_eq!(no_input.name(), "no-input");
}

// Items compiled out by a `#[cfg]` below the macro attribute take what the
// macro generates beside them along.
#[rollback]
#[cfg(any())]
async fn compiled_out_handler(ctx: RollbackContext<'_, u8>) -> Result<(), StepError> {
    println!("{}", ctx.key());
    Ok(())
}

#[workflow(name = "compiled-out")]
#[cfg(any())]
async fn compiled_out(ctx: WorkflowContext, _: ()) -> Result<(), WorkflowError> {
    ctx.sleep("never", "1 day").await?;
    Ok(())
}
