//! Moves money between two banks, as in Cloudflare's saga-rollback post:
//! debit bank A, credit bank B, let the transfer settle for 7 days, wait for
//! an approval, notify. When the credit fails for good, the debit is
//! refunded: the compensation runs in reverse step-start order, durably.
//!
//! Both fake banks apply each idempotency key once, as real payment APIs do.
//! The engine runs on a simulated clock, so the 7-day settlement passes at
//! once; `Engine::open(dir)` with the default clock would really wait.
//!
//! `cargo run --example bank_transfer`

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex};

use saga_runtime::prelude::*;
use saga_runtime::{EventKind, TestClock};

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Transfer {
    from: String,
    to: String,
    amount: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Receipt {
    debit: String,
    credit: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Approval {
    approved: bool,
}

/// A bank whose ledger applies each idempotency key at most once.
struct Bank {
    name: &'static str,
    ledger: Mutex<BTreeMap<String, (String, i64)>>,
}

impl Bank {
    const fn new(name: &'static str) -> Self {
        Bank {
            name,
            ledger: Mutex::new(BTreeMap::new()),
        }
    }

    fn post(&self, account: &str, delta: i64, key: &str) -> Result<String, StepError> {
        if account == "mallory" {
            return Err(StepError::fatal(format!(
                "{} closed account {account}",
                self.name
            )));
        }
        let mut ledger = self.ledger.lock().map_err(StepError::fatal)?;
        ledger
            .entry(key.to_owned())
            .or_insert((account.to_owned(), delta));
        Ok(format!("{}:{key}", self.name))
    }

    fn balance(&self, account: &str) -> i64 {
        let ledger = self.ledger.lock().expect("ledger lock");
        ledger
            .values()
            .filter(|(a, _)| a == account)
            .map(|(_, d)| d)
            .sum()
    }
}

static BANK_A: LazyLock<Bank> = LazyLock::new(|| Bank::new("bank-a"));
static BANK_B: LazyLock<Bank> = LazyLock::new(|| Bank::new("bank-b"));

#[step(name = "debit-bank-a", rollback = refund_bank_a, retries = 10,
       delay = "1 second", backoff = "exponential", timeout = "30 seconds")]
async fn debit_bank_a(key: IdempotencyKey, t: Transfer) -> Result<String, StepError> {
    BANK_A.post(&t.from, -(t.amount as i64), key.as_str())
}

#[rollback(
    retries = 10,
    delay = "30 seconds",
    backoff = "exponential",
    timeout = "2 minutes"
)]
async fn refund_bank_a(ctx: RollbackContext<'_, String>, t: Transfer) -> Result<(), StepError> {
    println!(
        "  compensating debit {:?} because: {}",
        ctx.output(),
        ctx.cause()
    );
    BANK_A
        .post(&t.from, t.amount as i64, ctx.key().as_str())
        .map(drop)
}

#[step(name = "credit-bank-b", rollback = reverse_credit_b, retries = 3, delay = "1 second")]
async fn credit_bank_b(key: IdempotencyKey, t: Transfer) -> Result<String, StepError> {
    BANK_B.post(&t.to, t.amount as i64, key.as_str())
}

#[rollback]
async fn reverse_credit_b(ctx: RollbackContext<'_, String>, t: Transfer) -> Result<(), StepError> {
    // The credit failed before it was stored: nothing to take back.
    if ctx.output().is_none() {
        println!(
            "  credit never landed; nothing to reverse (key {})",
            ctx.key()
        );
        return Ok(());
    }
    BANK_B
        .post(&t.to, -(t.amount as i64), ctx.key().as_str())
        .map(drop)
}

#[step(name = "notify", read_only)]
async fn notify(t: Transfer) -> Result<(), StepError> {
    println!("  notify: {} sent {} to {}", t.from, t.amount, t.to);
    Ok(())
}

#[workflow(name = "bank-transfer")]
async fn bank_transfer(ctx: WorkflowContext, t: Transfer) -> Result<Receipt, WorkflowError> {
    let debit = debit_bank_a(&ctx, t.clone()).await?;
    let credit = credit_bank_b(&ctx, t.clone()).await?;
    ctx.sleep("settle", "7 days").await?;
    let approval: Approval = ctx
        .wait_for_event("wait-approval", "approval", "7 days")
        .await?;
    if !approval.approved {
        return Err(WorkflowError::new("the transfer was not approved"));
    }
    notify(&ctx, t).await?;
    Ok(Receipt { debit, credit })
}

async fn transfer(engine: &Engine, id: &str, to: &str) -> Result<(), saga_runtime::Error> {
    println!("{id}: alice -> {to}, 100");
    let input = Transfer {
        from: "alice".into(),
        to: to.into(),
        amount: 100,
    };
    let run = engine.start(bank_transfer, id, input).await?;
    engine
        .send_event(id, "approval", &Approval { approved: true })
        .await?;
    match run.result().await {
        Ok(receipt) => println!("  complete: {receipt:?}"),
        Err(e) => println!("  {e}"),
    }
    for event in run.history().await? {
        if !matches!(event.kind, EventKind::InstanceResumed) {
            println!("    {event}");
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // The error as a person reads it, not its Debug form.
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), saga_runtime::Error> {
    let dir = saga_examples::StoreDir::for_example("bank_transfer");
    let engine = Engine::builder()
        .clock(TestClock::auto_advancing())
        .open(&dir.path)?;
    engine.register(bank_transfer)?;

    transfer(&engine, "transfer-42", "bob").await?;
    transfer(&engine, "transfer-43", "mallory").await?;

    println!(
        "balances: alice {} (bank A), bob {} (bank B)",
        BANK_A.balance("alice"),
        BANK_B.balance("bob")
    );
    engine.close().await;
    Ok(())
}
