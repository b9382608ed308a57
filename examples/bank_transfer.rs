//! Moves money between two banks, as in Cloudflare's saga-rollback post:
//! debit bank A, credit bank B, let the transfer settle for 7 days, wait for
//! an approval, notify. When the credit fails for good, the debit is
//! refunded: the compensation runs in reverse step-start order, durably.
//!
//! The banks are a service provided to the engine (`provide(banks)`), taken
//! by the steps and handlers as `Service<Banks>`; each applies an
//! idempotency key once, as real payment APIs do. A closed account is a
//! permanent error (`Permanent`), so the credit gives up at once instead of
//! retrying. The workflow returns its own error type, `TransferError`,
//! which the caller gets back typed.
//!
//! The transfers go through a queue, `bank-api`: at most 4 at once
//! against the banks, one at a time per account debited (its key) and on
//! each worker. A transfer waits `Queued` until it takes a slot; the
//! worker that takes it says so (`taken by worker pid N`).
//!
//! The engine runs on a simulated clock, so the 7-day settlement passes at
//! once; `Engine::open(dir)` with the default clock would really wait.
//!
//! `cargo run --example bank_transfer`, or with the engine's story:
//! `RUST_LOG=saga_runtime=info cargo run --example bank_transfer`
//!
//! `cargo run --example bank_transfer -- --serve [ADDR]` keeps the engine
//! running after the transfers with its admin endpoint on (default
//! 127.0.0.1:7070), for `saga --url http://127.0.0.1:7070 show transfer-43`.
//!
//! On PostgreSQL (schema `saga_examples`; the URL defaults to
//! `$SAGA_DATABASE_URL`, then the local test database):
//! `cargo run --example bank_transfer -- --postgres [URL]`. There it
//! starts 8 transfers at once from four accounts, and the banks take
//! 150 ms to answer. Run it twice at once (`... & ...`): both are workers
//! taking from the one queue, so each takes transfers the other started
//! (`transfer-3-p4242: taken by worker pid 4243`), and ends with a count
//! of what it took; a transfer whose worker stops is claimed by the other.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use saga_runtime::inspect::EventKind;
use saga_runtime::prelude::*;
use saga_runtime::queue::Queue;
use saga_runtime::testing::TestClock;

/// The queue every transfer goes through.
const BANK_API: &str = "bank-api";

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

/// Why a transfer did not happen: stored with the instance as JSON and
/// given back typed to the caller and to the compensations.
#[derive(Debug, Serialize, Deserialize)]
enum TransferError {
    /// A bank refused a step for good.
    Refused { step: String, reason: String },
    /// The approver said no.
    NotApproved,
}

impl fmt::Display for TransferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransferError::Refused { step, reason } => write!(f, "{step} refused: {reason}"),
            TransferError::NotApproved => f.write_str("the transfer was not approved"),
        }
    }
}

impl From<WaitError> for TransferError {
    fn from(error: WaitError) -> Self {
        match error {
            WaitError::Timeout { .. } => TransferError::NotApproved,
            other => TransferError::Refused {
                step: "wait".into(),
                reason: other.to_string(),
            },
        }
    }
}

impl From<StepFailed> for TransferError {
    fn from(failed: StepFailed) -> Self {
        TransferError::Refused {
            step: failed.step().to_owned(),
            reason: failed.error().to_string(),
        }
    }
}

/// What a bank answers.
#[derive(Debug)]
enum BankError {
    AccountClosed { bank: &'static str, account: String },
    Unavailable,
}

impl fmt::Display for BankError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BankError::AccountClosed { bank, account } => {
                write!(f, "{bank} closed account {account}")
            }
            BankError::Unavailable => f.write_str("the bank is unavailable"),
        }
    }
}

impl std::error::Error for BankError {}

/// A closed account stays closed: no retry. An outage is worth another try.
impl saga_runtime::Permanent for BankError {
    fn is_permanent(&self) -> bool {
        matches!(self, BankError::AccountClosed { .. })
    }
}

/// A bank whose ledger applies each idempotency key at most once.
struct Bank {
    name: &'static str,
    ledger: Mutex<BTreeMap<String, (String, i64)>>,
}

impl Bank {
    fn new(name: &'static str) -> Self {
        Bank {
            name,
            ledger: Mutex::new(BTreeMap::new()),
        }
    }

    fn post(&self, account: &str, delta: i64, key: &str) -> Result<String, BankError> {
        if account == "mallory" {
            return Err(BankError::AccountClosed {
                bank: self.name,
                account: account.to_owned(),
            });
        }
        let mut ledger = self.ledger.lock().map_err(|_| BankError::Unavailable)?;
        ledger
            .entry(key.to_owned())
            .or_insert((account.to_owned(), delta));
        Ok(format!("{}:{key}", self.name))
    }

    /// Whether a posting was made under `key`: what a payment API's
    /// lookup by idempotency key answers.
    fn posted(&self, key: &str) -> bool {
        let ledger = self.ledger.lock().expect("ledger lock");
        ledger.contains_key(key)
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

/// The service the engine hands to steps: both banks' clients, and the
/// transfers this worker took from the queue.
struct Banks {
    a: Bank,
    b: Bank,
    /// How long a bank takes to answer, in real time.
    latency: Duration,
    took: Mutex<BTreeSet<String>>,
}

impl Banks {
    fn new(latency: Duration) -> Self {
        Banks {
            a: Bank::new("bank-a"),
            b: Bank::new("bank-b"),
            latency,
            took: Mutex::new(BTreeSet::new()),
        }
    }

    /// Notes that this worker took `transfer` from the queue: its first
    /// step runs here.
    fn took(&self, transfer: &str) {
        println!("  {transfer}: taken by worker pid {}", std::process::id());
        if let Ok(mut took) = self.took.lock() {
            took.insert(transfer.to_owned());
        }
    }

    /// The time a bank takes to answer.
    async fn call(&self) {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
    }
}

#[step(name = "debit-bank-a", rollback = refund_bank_a, retries = 10,
       delay = "1 second", backoff = "exponential", timeout = "30 seconds")]
async fn debit_bank_a(
    step: StepContext,
    banks: Service<Banks>,
    t: Transfer,
) -> Result<String, BankError> {
    if step.attempt() == 1 {
        banks.took(step.instance_id());
    }
    banks.call().await;
    banks
        .a
        .post(&t.from, -(t.amount as i64), step.key().as_str())
}

#[rollback(
    retries = 10,
    delay = "30 seconds",
    backoff = "exponential",
    timeout = "2 minutes"
)]
async fn refund_bank_a(
    ctx: RollbackContext<'_, String>,
    t: Transfer,
    banks: Service<Banks>,
) -> Result<(), BankError> {
    // The workflow's own error, typed, when it caused the rollback.
    let cause = ctx.cause().downcast::<TransferError>();
    // The bank, not `ctx.output()`, says whether the debit happened: its
    // reply may have been lost (output None, money gone), or a refused
    // debit took nothing (then a refund would make money).
    if !banks.a.posted(ctx.step_key().as_str()) {
        println!("  the debit never landed; nothing to refund");
        return Ok(());
    }
    println!("  compensating debit {:?} because: {cause:?}", ctx.output());
    banks
        .a
        .post(&t.from, t.amount as i64, ctx.key().as_str())
        .map(drop)
}

#[step(name = "credit-bank-b", rollback = reverse_credit_b, retries = 3, delay = "1 second")]
async fn credit_bank_b(
    key: IdempotencyKey,
    banks: Service<Banks>,
    t: Transfer,
) -> Result<String, BankError> {
    banks.call().await;
    banks.b.post(&t.to, t.amount as i64, key.as_str())
}

#[rollback]
async fn reverse_credit_b(
    ctx: RollbackContext<'_, String>,
    t: Transfer,
    banks: Service<Banks>,
) -> Result<(), BankError> {
    // Asked of the bank: a credit whose reply was lost has no output, and
    // still landed.
    if !banks.b.posted(ctx.step_key().as_str()) {
        println!(
            "  credit never landed; nothing to reverse (key {})",
            ctx.key()
        );
        return Ok(());
    }
    banks
        .b
        .post(&t.to, -(t.amount as i64), ctx.key().as_str())
        .map(drop)
}

#[step(name = "notify", read_only)]
async fn notify(t: Transfer) -> Result<(), StepError> {
    println!("  notify: {} sent {} to {}", t.from, t.amount, t.to);
    Ok(())
}

#[workflow(name = "bank-transfer")]
async fn bank_transfer(ctx: WorkflowContext, t: Transfer) -> Result<Receipt, TransferError> {
    let debit = debit_bank_a(&ctx, t.clone()).await?;
    let credit = credit_bank_b(&ctx, t.clone()).await?;
    ctx.sleep("settle", "7 days").await?;
    let approval: Approval = ctx
        .wait_for_event("wait-approval", "approval", "7 days")
        .await?;
    if !approval.approved {
        return Err(TransferError::NotApproved);
    }
    notify(&ctx, t).await?;
    Ok(Receipt { debit, credit })
}

/// Starts a transfer on the queue, approves it, and prints its outcome;
/// with `history`, each event of its history too.
async fn transfer(
    engine: &Engine,
    id: &str,
    input: Transfer,
    history: bool,
) -> Result<(), saga_runtime::Error> {
    println!("{id}: {} -> {}, {}", input.from, input.to, input.amount);
    // Queued until it takes a slot: one at a time per account debited.
    let run = engine
        .start_on(BANK_API, bank_transfer, id, input.clone())
        .key(&input.from)
        .await?;
    // The approval: kept until the transfer waits for it. A webhook retried
    // with the same event id is stored once; a transfer refused before it
    // asked has ended, and takes no event.
    let approval = engine.event(id, "approval").id(format!("approval-{id}"));
    match approval.send(&Approval { approved: true }).await {
        Ok(_) | Err(saga_runtime::Error::InvalidState { .. }) => {}
        Err(e) => return Err(e),
    }
    let outcome = match run.result().await {
        Ok(receipt) => format!("complete: {receipt:?}"),
        Err(saga_runtime::Error::WorkflowFailed { failure, .. }) => {
            match failure.downcast::<TransferError>() {
                Some(TransferError::Refused { step, reason }) => {
                    format!("refused by {step}: {reason}")
                }
                Some(TransferError::NotApproved) => "not approved".to_owned(),
                None => format!("failed: {failure}"),
            }
        }
        Err(e) => e.to_string(),
    };
    if !history {
        println!("{id}: {outcome}");
        return Ok(());
    }
    println!("  {outcome}");
    for event in run.history().await? {
        if !matches!(event.kind, EventKind::InstanceResumed) {
            println!("    {event}");
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // RUST_LOG=saga_runtime=info prints what the engine does.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
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
    let postgres = saga_examples::postgres_url();
    // On PostgreSQL the banks answer slowly, so workers run side by side.
    let latency = Duration::from_millis(if postgres.is_some() { 150 } else { 0 });
    let banks = std::sync::Arc::new(Banks::new(latency));
    let builder = Engine::builder()
        .clock(TestClock::auto_advancing_to_sleeps())
        .provide_arc(banks.clone())
        // At most 4 transfers at once, 1 per account, 1 on each worker (on
        // this clock a settlement jumps 7 days ahead: a step in flight
        // beside it would time out).
        .queue(Queue::new(BANK_API).concurrency(4).per_key(1).per_worker(1));
    let Some(url) = postgres else {
        let engine = builder.open(&dir.path)?;
        engine.register(bank_transfer)?;
        transfer(&engine, "transfer-42", alice_to("bob"), true).await?;
        transfer(&engine, "transfer-43", alice_to("mallory"), true).await?;
        println!(
            "balances: alice {} (bank A), bob {} (bank B)",
            banks.a.balance("alice"),
            banks.b.balance("bob")
        );
        if let Some(addr) = saga_examples::serve_addr() {
            serve(&engine, &addr, "transfer-43").await?;
        }
        engine.close().await;
        return Ok(());
    };

    let me = std::process::id();
    println!("connecting to PostgreSQL (schema saga_examples) as worker pid {me} ...");
    let engine = builder
        .postgres_schema("saga_examples")
        .connect(&url)
        .await?;
    engine.register(bank_transfer)?;
    // The schema keeps earlier runs' transfers, and other workers may run
    // beside this one: this run's ids are its own.
    let suffix = format!("-p{me}");
    let accounts = ["alice", "carol", "dave", "erin"];
    let mut transfers = tokio::task::JoinSet::new();
    for n in 0..8 {
        let engine = engine.clone();
        let to = if n == 7 { "mallory" } else { "bob" };
        let input = Transfer {
            from: accounts[n % accounts.len()].into(),
            to: to.into(),
            amount: 100,
        };
        let id = format!("transfer-{n}{suffix}");
        transfers.spawn(async move { transfer(&engine, &id, input, false).await });
    }
    while let Some(done) = transfers.join_next().await {
        done.map_err(|e| saga_runtime::Error::InvalidArgument(format!("a transfer task: {e}")))??;
    }
    let took = banks.took.lock().map(|t| t.clone()).unwrap_or_default();
    let own = took.iter().filter(|id| id.ends_with(&suffix)).count();
    println!(
        "worker pid {me} took {} transfers from {BANK_API}: {own} of the 8 it started, {} started by other workers",
        took.len(),
        took.len() - own
    );
    if let Some(addr) = saga_examples::serve_addr() {
        serve(&engine, &addr, &format!("transfer-7{suffix}")).await?;
    }
    // This worker may hold transfers the other started: stopping, it lets
    // the steps in flight record their outcome (for up to 10 s), then
    // ends its lease, and the other worker goes on from there. (`close()`
    // would stop them mid-call, and the other worker would call the bank
    // again, with the same idempotency key.)
    engine
        .close_within(std::time::Duration::from_secs(10))
        .await;
    Ok(())
}

/// 100 from alice to `to`.
fn alice_to(to: &str) -> Transfer {
    Transfer {
        from: "alice".into(),
        to: to.into(),
        amount: 100,
    }
}

/// Keeps the engine running with its admin endpoint on `addr` until
/// Ctrl-C, so `saga --url` (and a browser) can look at the transfers.
async fn serve(engine: &Engine, addr: &str, failed: &str) -> Result<(), saga_runtime::Error> {
    let addr = addr.parse().map_err(|e| {
        saga_runtime::Error::InvalidArgument(format!(
            "--serve {addr:?}: give an address such as 127.0.0.1:7070 ({e})"
        ))
    })?;
    let admin = saga_cli::serve(engine, addr).await.map_err(|e| {
        saga_runtime::Error::InvalidArgument(format!("the admin endpoint did not start: {e}"))
    })?;
    let url = format!("http://{}", admin.local_addr());
    println!("\nadmin endpoint on {url} (Ctrl-C stops it); try:");
    if std::env::var_os(saga_cli::TOKEN_VAR).is_some() {
        println!(
            "  SAGA_ADMIN_TOKEN=<the same token> cargo run -p saga-cli -- --url {url} show {failed}"
        );
    } else {
        println!(
            "  it has no token, so it answers every request 401: run this example with \
             SAGA_ADMIN_TOKEN=<a secret> and pass the same to saga --url (or type it in the dashboard)"
        );
    }
    let _ = tokio::signal::ctrl_c().await;
    admin.shutdown().await;
    Ok(())
}

/// `testing::explore` proves the transfer conserves money under every
/// failure the engine can inject: each step failing for good (before and
/// after its body ran), each compensation failing once, a crash at every
/// write. `cargo test -p saga-examples --example bank_transfer`.
#[cfg(test)]
mod explore {
    use super::*;
    use saga_runtime::testing::{ScenarioKind, explore};

    #[test]
    fn a_transfer_conserves_money_under_every_failure() {
        let report = explore(bank_transfer, alice_to("bob"))
            .service(|| Banks::new(Duration::ZERO))
            .event("approval", &Approval { approved: true })
            .invariant(|outcome| {
                let banks = outcome.service::<Banks>()?;
                let (alice, bob) = (banks.a.balance("alice"), banks.b.balance("bob"));
                match outcome.status() {
                    Status::Complete if (alice, bob) == (-100, 100) => Ok(()),
                    Status::Errored if (alice, bob) == (0, 0) => Ok(()),
                    status => Err(format!("{status:?} with alice at {alice} and bob at {bob}")),
                }
            })
            .run()
            .expect("the exploration runs");
        println!("{report}");
        report.assert_ok();
        assert!(report.count(ScenarioKind::Crash) > 0);
        assert!(report.unguarded().is_empty());
    }
}
