//! Moves money between two banks; when the credit fails for good, the debit
//! is refunded. Both fake banks dedupe on idempotency keys.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use saga_runtime::prelude::*;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Transfer {
    from: String,
    to: String,
    amount: u64,
}

/// A bank that applies each idempotency key once.
#[derive(Clone, Default)]
struct Bank {
    applied: Arc<Mutex<HashMap<String, i64>>>,
    fail_credits: bool,
}

impl Bank {
    fn apply(&self, key: &str, delta: i64) -> Result<u64, StepError> {
        if self.fail_credits && delta > 0 {
            return Err(StepError::fatal("bank B rejects the account"));
        }
        let mut applied = self.applied.lock().expect("bank lock");
        let n = applied.len() as u64;
        applied.entry(key.to_owned()).or_insert(delta);
        Ok(n)
    }
    fn balance(&self) -> i64 {
        self.applied.lock().expect("bank lock").values().sum()
    }
}

#[tokio::main]
async fn main() -> Result<(), saga_runtime::Error> {
    let bank_a = Bank::default();
    let bank_b = Bank {
        fail_credits: true,
        ..Bank::default()
    };
    let (a, b) = (bank_a.clone(), bank_b.clone());
    let transfer = workflow_fn("bank-transfer", move |ctx: WorkflowContext, t: Transfer| {
        let (a, b) = (a.clone(), b.clone());
        async move {
            let (amount, refund_bank) = (t.amount as i64, a.clone());
            let debit = ctx
                .step_with_rollback(
                    "debit-bank-a",
                    StepConfig::default(),
                    move |key| {
                        let a = a.clone();
                        async move { a.apply(key.as_str(), -amount) }
                    },
                    RollbackRegistration::new(
                        StepConfig::default(),
                        move |input: RollbackInput<u64>| {
                            let bank = refund_bank.clone();
                            Box::pin(async move {
                                bank.apply(input.context().key().as_str(), amount)
                                    .map(|_| ())
                            })
                        },
                    ),
                )
                .await?;
            let credit = ctx
                .step(
                    "credit-bank-b",
                    StepConfig::default().retries(2),
                    move |key| {
                        let b = b.clone();
                        async move { b.apply(key.as_str(), amount) }
                    },
                )
                .await?;
            Ok::<_, WorkflowError>((debit, credit))
        }
    });
    let dir = std::env::temp_dir().join(format!("saga-bank-transfer-{}", std::process::id()));
    let engine = Engine::open(&dir)?;
    let t = Transfer {
        from: "alice".into(),
        to: "bob".into(),
        amount: 100,
    };
    let run = engine.start(transfer, "transfer-42", t).await?;
    match run.result().await {
        Ok(receipt) => println!("transfer done: {receipt:?}"),
        Err(e) => println!("transfer failed: {e}"),
    }
    for event in run.history()? {
        println!("  #{:<2} {:?}", event.seq, event.kind);
    }
    println!(
        "bank A balance change: {}, bank B: {}",
        bank_a.balance(),
        bank_b.balance()
    );
    engine.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
