//! The web dashboard in a real browser (headless Chromium through
//! chromedriver): it loads the list, opens a failed instance and finds its
//! steps and its rollback in the page (the DOM, not pixels), and presses
//! "terminate with rollback" on a waiting instance and sees its status
//! change. Every request sends the token typed in the header; a parent's
//! children are links. Screenshots of the list and of the failed instance go to
//! `target/dashboard-*.png` (the README shows them).

mod support;

use std::time::Duration;

use saga_runtime::prelude::*;
use saga_runtime::queue::Queue;
use saga_runtime::schedule::{Schedule, Tick};
use saga_runtime::{Engine, Status};

use support::webdriver::Browser;
use support::{serve_with_token, wait_until};

const TOKEN: &str = "dashboard-test-token";

#[step(name = "reserve-seat", rollback = release_seat)]
async fn reserve_seat(key: IdempotencyKey) -> Result<String, StepError> {
    // Long enough to draw as a bar on the timeline.
    tokio::time::sleep(Duration::from_millis(40)).await;
    Ok(format!("seat {key}"))
}

#[rollback]
async fn release_seat(ctx: RollbackContext<'_, String>) -> Result<(), StepError> {
    let _ = ctx.key();
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(())
}

#[step(
    name = "charge-card",
    retries = 2,
    delay = "10 ms",
    backoff = "constant"
)]
async fn charge_card(key: IdempotencyKey, card: String) -> Result<String, StepError> {
    let _ = key;
    tokio::time::sleep(Duration::from_millis(30)).await;
    Err(StepError::retryable(format!("card {card} declined")))
}

/// The booking's own error, stored as JSON with the instance.
#[derive(Debug, Serialize, Deserialize)]
enum BookingError {
    Step(String),
    CardDeclined { card: String },
}

impl std::fmt::Display for BookingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BookingError::Step(message) => f.write_str(message),
            BookingError::CardDeclined { card } => write!(f, "card {card} declined"),
        }
    }
}

impl From<StepFailed> for BookingError {
    fn from(failed: StepFailed) -> Self {
        BookingError::Step(failed.to_string())
    }
}

#[workflow(name = "booking")]
async fn booking(ctx: WorkflowContext, card: String) -> Result<String, BookingError> {
    let seat = reserve_seat(&ctx).await?;
    if charge_card(&ctx, card.clone()).await.is_err() {
        return Err(BookingError::CardDeclined { card });
    }
    Ok(seat)
}

#[workflow(name = "approval")]
async fn approval(ctx: WorkflowContext, (): ()) -> Result<bool, WorkflowError> {
    reserve_seat(&ctx).await?;
    ctx.publish("stage", "awaiting approval")?;
    Ok(ctx
        .wait_for_event("wait-approval", "approved", "1 day")
        .await?)
}

#[workflow(name = "inventory")]
async fn inventory(_ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    Ok(3)
}

#[workflow(name = "order")]
async fn order(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    Ok(ctx.child("inventory", inventory, ()).await?)
}

/// Types the admin token into the page's header, as an operator does
/// (the page redraws when it changes).
fn type_token(browser: &Browser) {
    browser.run(&format!(
        "const input = document.getElementById('token'); input.value = '{TOKEN}'; input.dispatchEvent(new Event('change')); return true;"
    ));
}

fn screenshot_path(name: &str) -> std::path::PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .unwrap()
                .join("target")
        });
    target.join(format!("dashboard-{name}.png"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_instances_and_controls_them_in_a_browser() {
    let engine = Engine::builder()
        .register(booking)
        .register(approval)
        .register(inventory)
        .register(order)
        .queue(Queue::new("seats").concurrency(2))
        .schedule(
            Schedule::every("nightly-bookings", "1 day")
                .start(booking, |_: Tick| "4000 0000 0000 0002".to_owned()),
        )
        .temporary()
        .unwrap();
    let failed = engine
        .start(booking, "booking-7", "4000 0000 0000 0002".to_owned())
        .await
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(30), failed.result())
            .await
            .unwrap()
            .is_err()
    );
    let waiting = engine.start(approval, "approval-3", ()).await.unwrap();
    wait_until("the approval's wait", || async {
        waiting.status().await.unwrap() == Status::Waiting
    })
    .await;
    engine
        .send_event("approval-3", "approved", "maybe")
        .await
        .unwrap();
    wait_until("the event set aside", || async {
        !waiting.inspect().await.unwrap().rejected_events.is_empty()
    })
    .await;
    let parent = engine.start(order, "order-4", ()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), parent.result())
        .await
        .unwrap()
        .unwrap();
    let admin = serve_with_token(&engine, TOKEN).await;
    let url = format!("http://{}/", admin.local_addr());

    tokio::task::spawn_blocking(move || {
        let browser = Browser::start();
        // Without the token the page reads nothing, and says how to.
        browser.go(&url);
        let failure = browser.text(&browser.find("#failure"));
        assert!(failure.contains("admin token"), "{failure}");
        // The list, with both instances and their statuses.
        type_token(&browser);
        let row = browser.find("tr[data-id='booking-7']");
        assert!(browser.text(&row).contains("errored"), "{}", browser.text(&row));
        let list = browser.text(&browser.find("#instances"));
        assert!(list.contains("approval-3") && list.contains("waiting"), "{list}");
        // The queues' depth and the schedules, with their controls.
        let queues = browser.text(&browser.find("#queues tr[data-queue='seats']"));
        assert!(queues.contains("seats"), "{queues}");
        // The service declares the queue: its limits are shown.
        assert!(queues.contains("concurrency 2"), "{queues}");
        let schedule = browser.text(&browser.find("#schedules tr[data-schedule='nightly-bookings']"));
        assert!(schedule.contains("active") && schedule.contains("every 86400 s"), "{schedule}");
        std::fs::write(screenshot_path("list"), browser.screenshot()).unwrap();
        browser.click(&browser.find("#schedules tr[data-schedule='nightly-bookings'] button[data-control='pause']"));
        browser.accept_dialog();
        browser.wait_for(
            "the schedule to show paused",
            "document.querySelector(\"#schedules tr[data-schedule='nightly-bookings'] [data-status='paused']\")",
        );
        let row = browser.find("tr[data-id='booking-7']");

        // The failed instance: its steps, its retries, its rollback.
        browser.click(&row);
        browser.find("#rollback");
        let steps = browser.text(&browser.find("#steps"));
        assert!(steps.contains("reserve-seat") && steps.contains("charge-card"), "{steps}");
        assert!(steps.contains("card 4000 0000 0000 0002 declined"), "{steps}");
        let rollback = browser.text(&browser.find("#rollback"));
        assert!(
            rollback.contains("reserve-seat") && rollback.contains("booking-7:rollback:reserve-seat"),
            "{rollback}"
        );
        browser.find("#timeline rect[data-compensates='reserve-seat']");
        browser.find("#timeline rect[data-slot='charge-card'][data-state='failed']");
        let outcome = browser.text(&browser.find("#outcome"));
        assert!(outcome.contains("declined"), "{outcome}");
        // With the workflow's own error, as it stored it.
        assert!(outcome.contains("\"CardDeclined\""), "{outcome}");
        // Only what an errored instance takes can be pressed.
        for (control, enabled) in [("pause", false), ("terminate with rollback", false), ("restart", true), ("retry rollback", false), ("send event", false)] {
            let button = browser.find(&format!("button[data-control='{control}']"));
            assert_eq!(browser.enabled(&button), enabled, "{control}");
        }
        std::fs::write(screenshot_path("failed-instance"), browser.screenshot()).unwrap();
        // A parent's children are links to them.
        browser.go(&format!("{url}#/instance/order-4"));
        let child = browser.find("dl.meta a[href='#/instance/order-4.inventory']");
        assert_eq!(browser.text(&child), "order-4.inventory");
        // Terminate the waiting one with rollback, with the token; the
        // event it set aside (not a bool) is shown.
        browser.go(&format!("{url}#/instance/approval-3"));
        browser.find("[data-status='waiting']");
        let rejected = browser.text(&browser.find("#rejected"));
        assert!(rejected.contains("approved") && rejected.contains("invalid type"), "{rejected}");
        // What it published, the latest value of each name.
        let published = browser.text(&browser.find("#published [data-published='stage']"));
        assert!(published.contains("awaiting approval"), "{published}");
        // Typed again, the token redraws the page: the button is found
        // anew if it was replaced.
        type_token(&browser);
        browser.click_on("button[data-control='terminate with rollback']");
        browser.accept_dialog();
        browser.wait_for(
            "the status to change",
            "document.querySelector(\"#instance-title [data-status='terminated']\")",
        );
    })
    .await
    .unwrap();
    assert_eq!(waiting.status().await.unwrap(), Status::Terminated);
    admin.shutdown().await;
    engine.close().await;
}
