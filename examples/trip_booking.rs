//! Books trips as nested sagas: a trip books a flight and a hotel as child
//! workflows (each a saga of its own, run side by side), then charges the
//! card. When the card is declined, the trip rolls back, and so does each
//! child, by its own compensations, at its place in the trip's reverse
//! start order: the card's authorization is released, the hotel room
//! cancelled, the ticket voided and the seat released.
//!
//! `cargo run --example trip_booking`; it ends with `saga show` of the
//! declined trip (the command embedded in the example), whose rollback
//! shows the children's compensations inside the parent's.

use std::collections::BTreeMap;
use std::sync::Mutex;

use saga_runtime::prelude::*;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Trip {
    traveller: String,
    flight: String,
    hotel: String,
    nights: u32,
    card: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Itinerary {
    ticket: String,
    room: String,
    payment: String,
}

/// The providers a trip talks to; each applies an idempotency key once,
/// as real booking and payment APIs do.
#[derive(Default)]
struct Providers {
    ledger: Mutex<BTreeMap<String, String>>,
}

impl Providers {
    /// Applies `what` under `key` once; answers what the key holds.
    fn apply(&self, key: &str, what: String) -> String {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        let held = ledger.entry(key.to_owned()).or_insert(what);
        println!("  {key}: {held}");
        held.clone()
    }
}

#[derive(Debug)]
struct Declined(String);

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "card {} declined", self.0)
    }
}

impl std::error::Error for Declined {}

/// A declined card stays declined: no retry.
impl saga_runtime::Permanent for Declined {}

#[step(name = "reserve-seat", rollback = release_seat)]
async fn reserve_seat(
    key: IdempotencyKey,
    p: Service<Providers>,
    trip: Trip,
) -> Result<String, StepError> {
    Ok(p.apply(
        key.as_str(),
        format!("seat on {} for {}", trip.flight, trip.traveller),
    ))
}

#[rollback]
async fn release_seat(
    ctx: RollbackContext<'_, String>,
    p: Service<Providers>,
) -> Result<(), StepError> {
    p.apply(ctx.key().as_str(), format!("released {:?}", ctx.output()));
    Ok(())
}

#[step(name = "issue-ticket", rollback = void_ticket)]
async fn issue_ticket(
    key: IdempotencyKey,
    p: Service<Providers>,
    seat: String,
) -> Result<String, StepError> {
    Ok(p.apply(key.as_str(), format!("ticket for {seat}")))
}

#[rollback]
async fn void_ticket(
    ctx: RollbackContext<'_, String>,
    p: Service<Providers>,
) -> Result<(), StepError> {
    p.apply(ctx.key().as_str(), format!("voided {:?}", ctx.output()));
    Ok(())
}

/// A child workflow: a seat, then a ticket.
#[workflow(name = "book-flight")]
async fn book_flight(ctx: WorkflowContext, trip: Trip) -> Result<String, WorkflowError> {
    let seat = reserve_seat(&ctx, trip).await?;
    Ok(issue_ticket(&ctx, seat).await?)
}

#[step(name = "reserve-room", rollback = cancel_room)]
async fn reserve_room(
    key: IdempotencyKey,
    p: Service<Providers>,
    trip: Trip,
) -> Result<String, StepError> {
    Ok(p.apply(
        key.as_str(),
        format!(
            "{} nights at {} for {}",
            trip.nights, trip.hotel, trip.traveller
        ),
    ))
}

#[rollback]
async fn cancel_room(
    ctx: RollbackContext<'_, String>,
    p: Service<Providers>,
) -> Result<(), StepError> {
    p.apply(ctx.key().as_str(), format!("cancelled {:?}", ctx.output()));
    Ok(())
}

/// A child workflow: one room.
#[workflow(name = "book-hotel")]
async fn book_hotel(ctx: WorkflowContext, trip: Trip) -> Result<String, WorkflowError> {
    Ok(reserve_room(&ctx, trip).await?)
}

#[step(name = "charge-card", rollback = refund_card)]
async fn charge_card(
    key: IdempotencyKey,
    p: Service<Providers>,
    trip: Trip,
) -> Result<String, Declined> {
    if trip.card.ends_with("0000") {
        p.apply(key.as_str(), format!("declined {}", trip.card));
        return Err(Declined(trip.card));
    }
    Ok(p.apply(key.as_str(), format!("charged {}", trip.card)))
}

#[rollback]
async fn refund_card(
    ctx: RollbackContext<'_, String>,
    p: Service<Providers>,
    trip: Trip,
) -> Result<(), StepError> {
    // Declined before it was stored: only the authorization is released.
    let what = match ctx.output() {
        Some(charge) => format!("refunded {charge:?}"),
        None => format!("released the authorization on {}", trip.card),
    };
    p.apply(ctx.key().as_str(), what);
    Ok(())
}

/// The parent: the flight and the hotel at once, each a saga of its own,
/// then the payment.
#[workflow(name = "trip-booking")]
async fn trip_booking(ctx: WorkflowContext, trip: Trip) -> Result<Itinerary, WorkflowError> {
    let (ticket, room) = tokio::join!(
        ctx.child("flight", book_flight, trip.clone()),
        ctx.child("hotel", book_hotel, trip.clone()),
    );
    let (ticket, room) = (ticket?, room?);
    let payment = charge_card(&ctx, trip).await?;
    Ok(Itinerary {
        ticket,
        room,
        payment,
    })
}

fn trip(traveller: &str, card: &str) -> Trip {
    Trip {
        traveller: traveller.into(),
        flight: "LH 1234".into(),
        hotel: "Hotel Adlon".into(),
        nights: 3,
        card: card.into(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engine = Engine::builder()
        .provide(Providers::default())
        .register(trip_booking)
        .register(book_flight)
        .register(book_hotel)
        .temporary()?;
    for (id, trip) in [
        ("trip-1", trip("ada", "4242 4242 4242 4242")),
        ("trip-2", trip("grace", "4000 0000 0000 0000")),
    ] {
        println!(
            "{id}: {} flies {} and stays at {}",
            trip.traveller, trip.flight, trip.hotel
        );
        let run = engine.start(trip_booking, id, trip).await?;
        match run.result().await {
            Ok(itinerary) => println!("  booked: {itinerary:?}\n"),
            Err(saga_runtime::Error::WorkflowFailed { failure, .. }) => {
                println!("  not booked: {failure}; the flight and the hotel were undone\n");
            }
            Err(other) => return Err(other.into()),
        }
    }
    for child in engine.list(&ListFilter::all().parent("trip-2")).await? {
        println!("{} ({}) is {}", child.id, child.workflow, child.status);
    }
    println!("\n$ saga show trip-2");
    let mut out = std::io::stdout();
    saga_cli::run(&engine, ["show", "trip-2"], &mut out).await?;
    engine.close().await;
    Ok(())
}
