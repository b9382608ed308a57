//! Shared services provided to the engine once and taken by steps and
//! rollback handlers as `Service<T>` parameters; a missing one is an error
//! at `register`/`start`, or a permanent step error where the engine cannot
//! see the need, never a panic.

use std::sync::Mutex;

use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;

/// A payments client that remembers what it did.
#[derive(Default)]
struct Payments {
    log: Mutex<Vec<String>>,
}

impl Payments {
    fn record(&self, what: String) {
        self.log.lock().unwrap().push(what);
    }
}

/// A service no engine here provides.
struct Mailer;

#[step(name = "charge", rollback = refund)]
async fn charge(
    key: IdempotencyKey,
    payments: Service<Payments>,
    cents: u64,
) -> Result<u64, StepError> {
    payments.record(format!("charge {cents} {key}"));
    Ok(cents)
}

// Needs none of the step's inputs: the context and a service are enough.
#[rollback]
async fn refund(
    ctx: RollbackContext<'_, u64>,
    payments: Service<Payments>,
) -> Result<(), StepError> {
    payments.record(format!("refund {:?} {}", ctx.output(), ctx.key()));
    Ok(())
}

#[workflow(name = "checkout")]
async fn checkout(ctx: WorkflowContext, cents: u64) -> Result<u64, WorkflowError> {
    let charged = charge(&ctx, cents).await?;
    if charged > 100 {
        return Err(WorkflowError::new("over the limit"));
    }
    Ok(charged)
}

#[step(name = "email")]
async fn email(key: IdempotencyKey, mailer: Service<Mailer>) -> Result<(), StepError> {
    let _ = (key.as_str(), &*mailer);
    Ok(())
}

#[workflow(name = "notify")]
async fn notify(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    email(&ctx).await?;
    Ok(())
}

fn engine_with(payments: std::sync::Arc<Payments>) -> Engine {
    Engine::builder()
        .clock(TestClock::auto_advancing())
        .provide_arc(payments)
        .temporary()
        .unwrap()
}

#[tokio::test]
async fn steps_and_rollback_handlers_get_the_provided_service() {
    let payments = std::sync::Arc::new(Payments::default());
    let engine = engine_with(payments.clone());
    engine.register(checkout).unwrap();
    let run = engine.start(checkout, "c-1", 40).await.unwrap();
    assert_eq!(run.result().await.unwrap(), 40);
    let run = engine.start(checkout, "c-2", 400).await.unwrap();
    assert!(run.result().await.is_err());
    assert_eq!(
        *payments.log.lock().unwrap(),
        [
            "charge 40 c-1:charge",
            "charge 400 c-2:charge",
            "refund Some(400) c-2:rollback:charge",
        ]
    );
}

#[tokio::test]
async fn a_missing_service_is_an_error_at_register_and_start() {
    let engine = engine_with(Default::default());
    let error = engine.register(notify).unwrap_err();
    assert!(
        matches!(&error, saga_runtime::Error::MissingService { workflow, service }
            if workflow == "notify" && service.ends_with("Mailer")),
        "{error}"
    );
    let error = engine.start(notify, "n-1", ()).await.unwrap_err();
    assert!(
        matches!(error, saga_runtime::Error::MissingService { .. }),
        "{error}"
    );
    // Nothing was stored.
    assert!(matches!(
        engine.instance("n-1").await,
        Err(saga_runtime::Error::UnknownInstance { .. })
    ));
    // A rollback handler's services count too: this engine has no Payments.
    let bare = Engine::builder().temporary().unwrap();
    let error = bare.register(checkout).unwrap_err();
    assert!(error.to_string().contains("Payments"), "{error}");
}

#[tokio::test]
async fn a_hand_written_step_gets_services_from_its_context() {
    let payments = std::sync::Arc::new(Payments::default());
    let engine = engine_with(payments.clone());
    let wf = workflow_fn("by-hand", |ctx: WorkflowContext, (): ()| async move {
        let paid: String = ctx
            .step_with_context("pay", StepConfig::default(), |step| async move {
                let payments = step.service::<Payments>()?;
                payments.record(format!("by hand {}", step.key()));
                Ok("paid".to_owned())
            })
            .await?;
        // Not provided: a permanent error naming the type, no retries.
        let mailed = ctx
            .step_with_context(
                "mail",
                StepConfig::default().retries(5),
                |step| async move {
                    step.service::<Mailer>()?;
                    Ok(())
                },
            )
            .await;
        let failed = mailed.unwrap_err();
        assert_eq!(failed.attempts(), 1);
        assert!(failed.error().message().contains("Mailer"), "{failed}");
        assert!(failed.error().message().contains("provide"), "{failed}");
        Ok::<_, WorkflowError>(paid)
    });
    let run = engine.start(wf, "h-1", ()).await.unwrap();
    assert_eq!(run.result().await.unwrap(), "paid");
    assert_eq!(*payments.log.lock().unwrap(), ["by hand h-1:pay"]);
}
