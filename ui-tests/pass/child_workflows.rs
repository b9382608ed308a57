//! Child workflow calls: by a plain path and a qualified one, with their
//! builder calls in either order, and by a workflow chosen at run time
//! (not listed in `children()`).

#![deny(warnings)]

use saga_runtime::prelude::*;
use saga_runtime::__private::ChildNeed;

#[workflow(name = "book-flight")]
async fn book_flight(_ctx: WorkflowContext, seats: u32) -> Result<u32, WorkflowError> {
    Ok(seats)
}

mod hotels {
    use saga_runtime::prelude::*;

    #[workflow(name = "book-hotel")]
    pub(crate) async fn book_hotel(
        _ctx: WorkflowContext,
        nights: u32,
    ) -> Result<u32, WorkflowError> {
        Ok(nights)
    }
}

/// Picks the workflow at run time.
struct Flights;

impl Flights {
    fn pick(&self) -> book_flight {
        book_flight
    }
}

#[workflow(name = "book-trip")]
async fn book_trip(ctx: WorkflowContext, seats: u32) -> Result<u32, WorkflowError> {
    let flight = ctx.child("flight-out", book_flight, seats).await?;
    let hotel = ctx
        .child("hotel", hotels::book_hotel, seats)
        .no_rollback()
        .renamed_from("book-hotel")
        .await?;
    let back = ctx
        .child("flight-back", book_flight, seats)
        .renamed_from("return-flight")
        .no_rollback()
        .await?;
    let chosen = ctx.child("flight-chosen", Flights.pick(), seats).await?;
    Ok(flight + hotel + back + chosen)
}

fn main() {
    let need = |call, workflow| ChildNeed { call, workflow };
    assert_eq!(
        book_trip.children(),
        [
            need("flight-out", "book-flight"),
            need("hotel", "book-hotel"),
            need("flight-back", "book-flight"),
        ]
    );
    assert!(book_flight.children().is_empty());
}
