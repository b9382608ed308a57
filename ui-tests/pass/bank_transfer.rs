//! The shape of DESIGN.md §2: steps with a rollback handler, a read-only
//! step, a durable sleep and an event wait, registered and started.

#![deny(warnings)]

use saga_runtime::prelude::*;

#[derive(Clone, Serialize, Deserialize)]
struct Transfer {
    id: String,
    from: String,
    to: String,
    amount: u64,
}

#[derive(Clone, Serialize, Deserialize)]
struct DebitId(String);

#[derive(Clone, Serialize, Deserialize)]
struct CreditId(String);

#[derive(Serialize, Deserialize)]
struct Receipt {
    debit: DebitId,
    credit: CreditId,
}

#[derive(Serialize, Deserialize)]
struct Approval {
    approved: bool,
}

#[derive(Debug)]
struct BankDown;

impl std::fmt::Display for BankDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the bank is down")
    }
}

struct Bank;

impl Bank {
    async fn debit(&self, account: &str, amount: u64, key: &str) -> Result<DebitId, BankDown> {
        Ok(DebitId(format!("{account}:{amount}:{key}")))
    }

    async fn credit(&self, account: &str, amount: u64, key: &str) -> Result<CreditId, BankDown> {
        Ok(CreditId(format!("{account}:{amount}:{key}")))
    }
}

fn bank_a() -> Bank {
    Bank
}

fn bank_b() -> Bank {
    Bank
}

#[step(name = "debit-bank-a", rollback = refund_bank_a, retries = 10,
       delay = "1 second", backoff = "exponential", timeout = "30 seconds")]
async fn debit_bank_a(key: IdempotencyKey, t: Transfer) -> Result<DebitId, StepError> {
    bank_a().debit(&t.from, t.amount, key.as_str()).await.map_err(StepError::retryable)
}

#[rollback(retries = 10, delay = "30 seconds", backoff = "exponential", timeout = "2 minutes")]
async fn refund_bank_a(ctx: RollbackContext<'_, DebitId>, t: Transfer) -> Result<(), StepError> {
    let _debit: Option<&DebitId> = ctx.output();
    let _cause: &saga_runtime::Failure = ctx.cause();
    bank_a()
        .credit(&t.from, t.amount, ctx.key().as_str())
        .await
        .map(drop)
        .map_err(StepError::retryable)
}

#[step(name = "credit-bank-b", rollback = debit_back_bank_b)]
async fn credit_bank_b(key: IdempotencyKey, t: Transfer) -> Result<CreditId, StepError> {
    bank_b().credit(&t.to, t.amount, key.as_str()).await.map_err(StepError::retryable)
}

#[rollback]
async fn debit_back_bank_b(ctx: RollbackContext<'_, CreditId>, t: Transfer) -> Result<(), StepError> {
    bank_b()
        .debit(&t.to, t.amount, ctx.key().as_str())
        .await
        .map(drop)
        .map_err(StepError::fatal)
}

#[step(name = "notify", read_only)] // no side effect worth a key
async fn notify(t: Transfer) -> Result<(), StepError> {
    println!("transfer {} done", t.id);
    Ok(())
}

#[workflow(name = "bank-transfer")]
async fn bank_transfer(ctx: WorkflowContext, t: Transfer) -> Result<Receipt, WorkflowError> {
    let debit = debit_bank_a(&ctx, t.clone()).await?;
    let credit = credit_bank_b(&ctx, t.clone()).await?;
    ctx.sleep("settle", "7 days").await?;
    let ok: Approval = ctx.wait_for_event("wait-approval", "approval", "7 days").await?;
    if !ok.approved {
        return Err(WorkflowError::new("transfer not approved"));
    }
    notify(&ctx, t).await?;
    Ok(Receipt { debit, credit })
}

#[allow(dead_code)]
async fn run(input: Transfer) -> Result<(), saga_runtime::Error> {
    let engine = Engine::open("./saga-data")?;
    engine.register(bank_transfer).unwrap();
    let run = engine.start(bank_transfer, "transfer-42", input).await?;
    let _receipt: Receipt = run.result().await?;
    Ok(())
}

fn main() {
    // Type-checked only: the workflow value is a `Workflow`.
    fn is_workflow<W: Workflow<Input = Transfer, Output = Receipt> + Copy>(_: W) {}
    is_workflow(bank_transfer);
    assert_eq!(bank_transfer.name(), "bank-transfer");
}
