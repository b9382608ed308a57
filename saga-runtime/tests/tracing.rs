//! Every step attempt and every compensation attempt runs inside a
//! `tracing` span that carries the instance, workflow, step and attempt, so
//! a user's existing subscriber sees the workflow without extra code.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use saga_runtime::prelude::*;
use saga_runtime::testing::TestClock;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// A span as the subscriber saw it open: its name and fields.
#[derive(Debug, Clone, PartialEq)]
struct SeenSpan {
    name: &'static str,
    fields: Vec<(String, String)>,
}

/// An event as the subscriber saw it: level, message and fields.
#[derive(Debug, Clone, PartialEq)]
struct SeenEvent {
    level: tracing::Level,
    message: String,
    fields: Vec<(String, String)>,
}

/// Records the spans that open and the events; nothing else.
#[derive(Clone, Default)]
struct Recorder {
    spans: Arc<Mutex<Vec<SeenSpan>>>,
    events: Arc<Mutex<Vec<SeenEvent>>>,
    next_id: Arc<AtomicU64>,
}

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = Vec::new();
        span.record(&mut Fields(&mut fields));
        self.spans.lock().unwrap().push(SeenSpan {
            name: span.metadata().name(),
            fields,
        });
        Id::from_u64(self.next_id.fetch_add(1, Ordering::SeqCst) + 1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Vec::new();
        event.record(&mut Fields(&mut fields));
        let message = fields
            .iter()
            .find(|(name, _)| name == "message")
            .map(|(_, value)| value.clone())
            .unwrap_or_default();
        self.events.lock().unwrap().push(SeenEvent {
            level: *event.metadata().level(),
            message,
            fields,
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn field<'a>(span: &'a SeenSpan, name: &str) -> Option<&'a str> {
    span.fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

// A current-thread runtime: every task of the engine runs on this thread,
// where the recorder is the default subscriber.
#[tokio::test(flavor = "current_thread")]
async fn step_and_rollback_attempts_run_in_spans_naming_instance_workflow_step_and_attempt() {
    let recorder = Recorder::default();
    let _default = tracing::subscriber::set_default(recorder.clone());

    let engine = Engine::builder()
        .clock(TestClock::auto_advancing())
        .temporary()
        .unwrap();
    let wf = workflow_fn("traced", |ctx: WorkflowContext, (): ()| async move {
        ctx.step_with_rollback(
            "charge",
            StepConfig::default(),
            |key| async move {
                // The first attempt fails, so there are two attempts.
                static FIRST: std::sync::Once = std::sync::Once::new();
                let mut failed = false;
                FIRST.call_once(|| failed = true);
                if failed {
                    Err(StepError::retryable(format!("flaky ({key})")))
                } else {
                    Ok(7u64)
                }
            },
            RollbackRegistration::new(StepConfig::default(), |input: RollbackInput<u64>| {
                let key = input.context().key().to_string();
                Box::pin(async move {
                    assert!(key.ends_with(":rollback:charge"));
                    Ok(())
                }) as saga_runtime::BoxFuture<Result<(), StepError>>
            }),
        )
        .await?;
        Err::<(), _>(WorkflowError::new("the order was cancelled"))
    });
    let run = engine.start(wf, "trace-1", ()).await.unwrap();
    assert!(run.result().await.is_err());

    let spans = recorder.spans.lock().unwrap().clone();
    let steps: Vec<&SeenSpan> = spans.iter().filter(|s| s.name == "saga.step").collect();
    assert_eq!(steps.len(), 2, "one span per attempt: {spans:?}");
    for (attempt, span) in steps.iter().enumerate() {
        assert_eq!(field(span, "instance"), Some("trace-1"), "{span:?}");
        assert_eq!(field(span, "workflow"), Some("traced"), "{span:?}");
        assert_eq!(field(span, "step"), Some("charge"), "{span:?}");
        let attempt = (attempt + 1).to_string();
        assert_eq!(field(span, "attempt"), Some(attempt.as_str()), "{span:?}");
    }
    let rollbacks: Vec<&SeenSpan> = spans.iter().filter(|s| s.name == "saga.rollback").collect();
    assert_eq!(rollbacks.len(), 1, "{spans:?}");
    assert_eq!(field(rollbacks[0], "instance"), Some("trace-1"));
    assert_eq!(field(rollbacks[0], "workflow"), Some("traced"));
    assert_eq!(field(rollbacks[0], "step"), Some("charge"));
    assert_eq!(field(rollbacks[0], "attempt"), Some("1"));
}

#[step(name = "reserve", rollback = release, retries = 3, delay = "1 second")]
async fn reserve(key: IdempotencyKey, sku: String) -> Result<String, StepError> {
    // The first attempt fails, so a retry shows.
    static FIRST: std::sync::Once = std::sync::Once::new();
    let mut failed = false;
    FIRST.call_once(|| failed = true);
    if failed {
        return Err(StepError::retryable("warehouse busy"));
    }
    Ok(format!("{sku}@{key}"))
}

#[rollback]
async fn release(ctx: RollbackContext<'_, String>) -> Result<(), StepError> {
    let _ = ctx.key().as_str();
    Ok(())
}

#[step(name = "charge")]
async fn charge_card(key: IdempotencyKey) -> Result<(), StepError> {
    Err(StepError::fatal(format!("card declined ({key})")))
}

#[workflow(name = "story")]
async fn story(ctx: WorkflowContext, sku: String) -> Result<(), WorkflowError> {
    reserve(&ctx, sku).await?;
    ctx.sleep("settle", "1 hour").await?;
    let _approved: bool = ctx.wait_for_event("approval", "approved", "1 day").await?;
    charge_card(&ctx).await?;
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn a_run_tells_its_story_in_spans_and_info_and_warn_events() {
    let recorder = Recorder::default();
    let _default = tracing::subscriber::set_default(recorder.clone());
    let engine = Engine::builder()
        .clock(TestClock::auto_advancing())
        .temporary()
        .unwrap();
    let (run, _) = engine
        .event("story-1", "approved")
        .send_with_start(story, "sku-9".to_owned(), &true)
        .await
        .unwrap();
    assert!(run.result().await.is_err());

    let spans = recorder.spans.lock().unwrap().clone();
    let named = |name: &str| -> Vec<SeenSpan> {
        spans.iter().filter(|s| s.name == name).cloned().collect()
    };
    let workflow = named("saga.workflow");
    assert_eq!(workflow.len(), 1, "{spans:?}");
    assert_eq!(field(&workflow[0], "instance"), Some("story-1"));
    assert_eq!(field(&workflow[0], "workflow"), Some("story"));
    let sleep = named("saga.sleep");
    assert_eq!(sleep.len(), 1, "{spans:?}");
    assert_eq!(field(&sleep[0], "name"), Some("settle"));
    assert_eq!(field(&sleep[0], "instance"), Some("story-1"));
    assert_eq!(field(&sleep[0], "occurrence"), Some("0"));
    let wait = named("saga.wait");
    assert_eq!(wait.len(), 1, "{spans:?}");
    assert_eq!(field(&wait[0], "name"), Some("approval"));
    assert_eq!(field(&wait[0], "event_type"), Some("approved"));
    assert_eq!(
        named("saga.step").len(),
        3,
        "two attempts of reserve, one of charge"
    );
    assert_eq!(named("saga.rollback").len(), 1);

    // The story, at info and warn: what a default fmt subscriber prints.
    let events = recorder.events.lock().unwrap().clone();
    let told: Vec<(tracing::Level, &str)> = events
        .iter()
        .filter(|e| e.level <= tracing::Level::INFO)
        .map(|e| (e.level, e.message.as_str()))
        .collect();
    use tracing::Level as L;
    assert_eq!(
        told,
        [
            (L::INFO, "workflow started"),
            (L::WARN, "step attempt failed; retrying"),
            (L::INFO, "step completed"),
            (L::INFO, "event received"),
            (L::WARN, "step failed"),
            (L::INFO, "rollback started"),
            (L::INFO, "compensation started"),
            (L::INFO, "compensation completed"),
            (L::INFO, "rollback completed"),
            (L::WARN, "workflow failed"),
        ],
        "{events:#?}"
    );
    let failed = events.iter().find(|e| e.message == "step failed").unwrap();
    let value = |name: &str| {
        failed
            .fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(value("step"), Some("charge"));
    assert_eq!(value("instance"), Some("story-1"));
    assert_eq!(value("attempts"), Some("1"));
}
