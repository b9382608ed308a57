//! Every step attempt and every compensation attempt runs inside a
//! `tracing` span that carries the instance, workflow, step and attempt, so
//! a user's existing subscriber sees the workflow without extra code.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use saga_runtime::TestClock;
use saga_runtime::prelude::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// A span as the subscriber saw it open: its name and fields.
#[derive(Debug, Clone, PartialEq)]
struct SeenSpan {
    name: &'static str,
    fields: Vec<(String, String)>,
}

/// Records the spans that open; nothing else.
#[derive(Clone, Default)]
struct Recorder {
    spans: Arc<Mutex<Vec<SeenSpan>>>,
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
    fn event(&self, _: &Event<'_>) {}
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
