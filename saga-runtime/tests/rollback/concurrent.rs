//! A workflow marked `rollback = "concurrent"` compensates in reverse
//! happens-before order; its tests prove the overlap with a barrier that
//! opens only when both compensations run at once.

use super::*;

/// What the concurrent rollback tests' steps (and the approved trip's, in
/// `order`) share: the order their
/// compensations began and ended in, a barrier the overlapping ones meet
/// at (it opens only if both run at once), and a gate.
pub(super) struct Overlap {
    pub(super) log: Mutex<Vec<String>>,
    pub(super) barrier: tokio::sync::Barrier,
    pub(super) gate: Notify,
}

impl Overlap {
    pub(super) fn write(&self, line: String) {
        self.log.lock().unwrap().push(line);
    }

    pub(super) fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

#[step(name = "book", rollback = unbook)]
pub(super) async fn book(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Ok(())
}

#[rollback]
async fn unbook(ctx: RollbackContext<'_, ()>, o: Service<Overlap>) -> Result<(), StepError> {
    o.write(format!("undo book ({})", ctx.key()));
    Ok(())
}

#[step(name = "flight", rollback = unfly)]
async fn flight(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Ok(())
}

#[rollback]
async fn unfly(ctx: RollbackContext<'_, ()>, o: Service<Overlap>) -> Result<(), StepError> {
    o.write("undo flight begins".into());
    // Opens only when the hotel's compensation is here too.
    o.barrier.wait().await;
    o.write(format!("undo flight ends ({})", ctx.key()));
    Ok(())
}

#[step(name = "hotel", rollback = unstay)]
async fn hotel(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Ok(())
}

#[rollback]
async fn unstay(ctx: RollbackContext<'_, ()>, o: Service<Overlap>) -> Result<(), StepError> {
    o.write("undo hotel begins".into());
    o.barrier.wait().await;
    o.write(format!("undo hotel ends ({})", ctx.key()));
    Ok(())
}

#[step(name = "pay", rollback = unpay)]
pub(super) async fn pay_refused(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Err(StepError::fatal("card declined"))
}

#[rollback]
async fn unpay(ctx: RollbackContext<'_, ()>, o: Service<Overlap>) -> Result<(), StepError> {
    o.write(format!("undo pay ({})", ctx.key()));
    Ok(())
}

/// `book`; then `flight` and `hotel` together; then `pay`, refused.
#[workflow(name = "concurrent-trip", rollback = "concurrent")]
async fn concurrent_trip(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    book(&ctx).await?;
    let (f, h) = tokio::join!(flight(&ctx), hotel(&ctx));
    f?;
    h?;
    pay_refused(&ctx).await?;
    Ok(())
}

pub(super) async fn overlap_world(overlap: &Arc<Overlap>) -> Engine {
    helpers::fresh(
        Engine::builder()
            .clock(TestClock::auto_advancing())
            .provide_arc(overlap.clone()),
    )
    .await
}

#[tokio::test]
async fn a_concurrent_rollback_runs_overlapping_compensations_at_once_in_reverse_happens_before_order()
 {
    let overlap = Arc::new(Overlap {
        log: Mutex::default(),
        barrier: tokio::sync::Barrier::new(2),
        gate: Notify::new(),
    });
    let engine = overlap_world(&overlap).await;
    let run = engine.start(concurrent_trip, "ct-1", ()).await.unwrap();
    within("the rollback", run.result()).await.unwrap_err();
    let lines = overlap.lines();
    // `pay` began after both ended: undone first. `flight` and `hotel`
    // overlapped: both began before either ended (the barrier needs both).
    // `book` ended before both began: undone last.
    assert_eq!(lines[0], "undo pay (ct-1:rollback:pay)");
    let mut middle: Vec<&str> = lines[1..3].iter().map(String::as_str).collect();
    middle.sort();
    assert_eq!(middle, ["undo flight begins", "undo hotel begins"]);
    let mut ends: Vec<&str> = lines[3..5].iter().map(String::as_str).collect();
    ends.sort();
    assert_eq!(
        ends,
        [
            "undo flight ends (ct-1:rollback:flight)",
            "undo hotel ends (ct-1:rollback:hotel)"
        ]
    );
    assert_eq!(lines[5], "undo book (ct-1:rollback:book)");
    assert_eq!(lines.len(), 6);
    let tail = rollback_tail(&kinds(&run).await);
    assert!(tail.contains(&EventKind::RollbackCompleted), "{tail:?}");
}

#[step(name = "flight", rollback = unfly_refused)]
async fn flight_then_refund_fails(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Ok(())
}

#[rollback(retries = 0)]
async fn unfly_refused(ctx: RollbackContext<'_, ()>, o: Service<Overlap>) -> Result<(), StepError> {
    let _ = ctx.key();
    o.write("undo flight gives up".into());
    Err(StepError::fatal("the airline refuses the refund"))
}

#[step(name = "hotel", rollback = unstay_slowly)]
async fn hotel_slow_undo(key: IdempotencyKey) -> Result<(), StepError> {
    let _ = key;
    Ok(())
}

#[rollback]
async fn unstay_slowly(ctx: RollbackContext<'_, ()>, o: Service<Overlap>) -> Result<(), StepError> {
    let _ = ctx.key();
    o.write("undo hotel begins".into());
    // Let go once the flight's compensation gave up.
    o.gate.notified().await;
    o.write("undo hotel ends".into());
    Ok(())
}

#[workflow(name = "concurrent-give-up", rollback = "concurrent")]
async fn concurrent_give_up(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    book(&ctx).await?;
    let (f, h) = tokio::join!(flight_then_refund_fails(&ctx), hotel_slow_undo(&ctx));
    f?;
    h?;
    pay_refused(&ctx).await?;
    Ok(())
}

#[tokio::test]
async fn in_a_concurrent_rollback_a_compensation_that_gives_up_stops_those_not_begun_and_the_rest_finish()
 {
    let overlap = Arc::new(Overlap {
        log: Mutex::default(),
        barrier: tokio::sync::Barrier::new(2),
        gate: Notify::new(),
    });
    let engine = overlap_world(&overlap).await;
    let run = engine.start(concurrent_give_up, "cg-1", ()).await.unwrap();
    helpers::wait_until("the flight's compensation gave up", || async {
        overlap.lines().iter().any(|l| l == "undo flight gives up")
            && overlap.lines().iter().any(|l| l == "undo hotel begins")
    })
    .await;
    overlap.gate.notify_waiters();
    let error = within("the rollback", run.result()).await.unwrap_err();
    let Error::WorkflowFailed {
        rollback_failure: Some(gave_up),
        ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert!(gave_up.message().contains("\"flight\""), "{gave_up}");
    let lines = overlap.lines();
    // The hotel's compensation, under way, finished and was recorded; the
    // booking's, not begun, never ran.
    assert!(lines.contains(&"undo hotel ends".to_owned()), "{lines:?}");
    assert!(
        !lines.iter().any(|l| l.starts_with("undo book")),
        "{lines:?}"
    );
    let tail = rollback_tail(&kinds(&run).await);
    assert!(tail.contains(&completed("hotel")), "{tail:?}");
    assert!(!tail.contains(&started("book")), "{tail:?}");
}
