//! `testing::explore`: a user's saga under every failure the engine can
//! inject. A transfer whose compensations are right conserves money in
//! every scenario; one whose compensation forgets a step is caught, and
//! the report names the scenario and the step without rollback.

use std::collections::BTreeMap;
use std::sync::Mutex;

use saga_runtime::prelude::*;
use saga_runtime::testing::{Outcome, Report, ScenarioKind, Verdict, explore};

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Transfer {
    id: String,
    from: String,
    to: String,
    amount: i64,
}

/// An in-memory bank: postings by idempotency key, each applied once.
#[derive(Default)]
struct Bank {
    /// key -> (transfer id, account, amount)
    ledger: Mutex<BTreeMap<String, (String, String, i64)>>,
}

impl Bank {
    fn post(&self, key: &str, transfer: &str, account: &str, amount: i64) {
        let mut ledger = self.ledger.lock().unwrap();
        ledger
            .entry(key.to_owned())
            .or_insert_with(|| (transfer.to_owned(), account.to_owned(), amount));
    }

    /// Takes back what `transfer` posted on `account`, once (under `key`):
    /// nothing when nothing was posted, whether or not the step's reply
    /// came back.
    fn reverse(&self, key: &str, transfer: &str, account: &str) {
        let posted: i64 = {
            let ledger = self.ledger.lock().unwrap();
            ledger
                .values()
                .filter(|(t, a, _)| t == transfer && a == account)
                .map(|(_, _, amount)| amount)
                .sum()
        };
        if posted != 0 {
            self.post(key, transfer, account, -posted);
        }
    }

    fn total(&self) -> i64 {
        let ledger = self.ledger.lock().unwrap();
        ledger.values().map(|(_, _, amount)| amount).sum()
    }
}

/// The two banks a transfer moves money between.
#[derive(Default)]
struct Banks {
    a: Bank,
    b: Bank,
    /// Notifications sent (a step with side effects and no rollback).
    notified: Mutex<u32>,
}

#[step(name = "debit-a", rollback = refund_a, retries = 2, delay = "1 second")]
async fn debit_a(key: IdempotencyKey, banks: Service<Banks>, t: Transfer) -> Result<(), StepError> {
    banks.a.post(key.as_str(), &t.id, &t.from, -t.amount);
    Ok(())
}

#[rollback(retries = 3, delay = "30 seconds")]
async fn refund_a(
    ctx: RollbackContext<'_, ()>,
    t: Transfer,
    banks: Service<Banks>,
) -> Result<(), StepError> {
    banks.a.reverse(ctx.key().as_str(), &t.id, &t.from);
    Ok(())
}

#[step(name = "credit-b", rollback = reverse_b)]
async fn credit_b(
    key: IdempotencyKey,
    banks: Service<Banks>,
    t: Transfer,
) -> Result<(), StepError> {
    banks.b.post(key.as_str(), &t.id, &t.to, t.amount);
    Ok(())
}

/// No retries of its own: a failure is retried by `retry_rollback()`.
#[rollback(retries = 0)]
async fn reverse_b(
    ctx: RollbackContext<'_, ()>,
    t: Transfer,
    banks: Service<Banks>,
) -> Result<(), StepError> {
    banks.b.reverse(ctx.key().as_str(), &t.id, &t.to);
    Ok(())
}

#[step(name = "confirm", read_only)]
async fn confirm(t: Transfer) -> Result<(), StepError> {
    let _ = t;
    Ok(())
}

#[derive(Debug, Serialize, Deserialize)]
struct Approval {
    approved: bool,
}

#[workflow(name = "explored-transfer")]
async fn move_money(ctx: WorkflowContext, t: Transfer) -> Result<(), WorkflowError> {
    debit_a(&ctx, t.clone()).await?;
    credit_b(&ctx, t.clone()).await?;
    ctx.sleep("settle", "7 days").await?;
    let approval: Approval = ctx
        .wait_for_event("wait-approval", "approval", "7 days")
        .await?;
    if !approval.approved {
        return Err(WorkflowError::new("not approved"));
    }
    confirm(&ctx, t).await?;
    Ok(())
}

/// A step with side effects and no rollback: the partner is told before
/// the credit, and nothing takes it back.
#[step(name = "notify-partner")]
async fn notify_partner(
    key: IdempotencyKey,
    banks: Service<Banks>,
    t: Transfer,
) -> Result<(), StepError> {
    let _ = (key, t);
    *banks.notified.lock().unwrap() += 1;
    Ok(())
}

/// The credit's compensation forgets the debit: `credit-b` has a
/// rollback, `debit-a` (this version) has none.
#[step(name = "debit-a")]
async fn debit_a_without_refund(
    key: IdempotencyKey,
    banks: Service<Banks>,
    t: Transfer,
) -> Result<(), StepError> {
    banks.a.post(key.as_str(), &t.id, &t.from, -t.amount);
    Ok(())
}

#[workflow(name = "explored-forgetful-transfer")]
async fn forgetful_transfer(ctx: WorkflowContext, t: Transfer) -> Result<(), WorkflowError> {
    debit_a_without_refund(&ctx, t.clone()).await?;
    notify_partner(&ctx, t.clone()).await?;
    credit_b(&ctx, t.clone()).await?;
    confirm(&ctx, t).await?;
    Ok(())
}

fn alice_to_bob() -> Transfer {
    Transfer {
        id: "t-1".into(),
        from: "alice".into(),
        to: "bob".into(),
        amount: 100,
    }
}

/// Money is conserved: a completed transfer moved exactly its amount, a
/// rolled-back one moved nothing.
fn money_is_conserved(outcome: &Outcome) -> Result<(), String> {
    let banks = outcome.service::<Banks>()?;
    let (a, b) = (banks.a.total(), banks.b.total());
    match outcome.status() {
        Status::Complete if (a, b) == (-100, 100) => Ok(()),
        Status::Errored if (a, b) == (0, 0) => Ok(()),
        status => Err(format!(
            "{status:?} with bank A at {a} and bank B at {b}: money is not conserved"
        )),
    }
}

fn explore_transfer() -> Report {
    explore(move_money, alice_to_bob())
        .service(Banks::default)
        .event("approval", &Approval { approved: true })
        .invariant(money_is_conserved)
        .run()
        .expect("the exploration runs")
}

#[test]
fn a_transfer_conserves_money_under_every_failure() {
    let report = explore_transfer();
    println!("{report}");
    report.assert_ok();
    // 3 steps x 1 attempt x (before, after the body) fail for good.
    assert_eq!(report.count(ScenarioKind::StepFails), 6);
    // The deepest rollback compensates both banks; each compensation fails
    // once before and once after its body.
    assert_eq!(report.count(ScenarioKind::CompensationFailsOnce), 4);
    assert_eq!(report.count(ScenarioKind::NoFailure), 1);
    // A crash at each of the 21 writes of the run without failure, and at
    // each of the 27 of the deepest rollback ("confirm" failing after its
    // body ran). A change of what the engine writes changes these counts.
    assert_eq!(report.count(ScenarioKind::Crash), 21 + 27);
    assert_eq!(report.scenarios().len(), 59);
    assert!(report.unguarded().is_empty(), "{:?}", report.unguarded());
    // Rolled-back scenarios are among them, and so are completed ones.
    let verdicts = |v: Verdict| report.scenarios().iter().filter(|e| e.verdict == v).count();
    assert!(verdicts(Verdict::Completed) > 0);
    assert!(verdicts(Verdict::RolledBack) > 0);
}

#[test]
fn the_same_input_gives_the_same_report() {
    let first = explore_transfer().to_string();
    let second = explore_transfer().to_string();
    assert_eq!(first, second);
}

#[test]
fn a_forgotten_compensation_is_caught() {
    let report = explore(forgetful_transfer, alice_to_bob())
        .service(Banks::default)
        .invariant(money_is_conserved)
        .run()
        .expect("the exploration runs");
    println!("{report}");
    assert!(!report.is_ok());
    // The scenario where the credit fails: bank A keeps the debit.
    let failed = report.failures();
    let credit_fails = failed
        .iter()
        .find(|e| {
            e.scenario.kind() == ScenarioKind::StepFails && e.scenario.step() == Some("credit-b")
        })
        .expect("the credit failing is caught");
    assert!(
        matches!(&credit_fails.verdict, Verdict::InvariantBroken(m) if m.contains("bank A at -100")),
        "{:?}",
        credit_fails.verdict
    );
    // The steps without rollback, named with the rollbacks that left
    // them in place.
    let unguarded: Vec<&str> = report.unguarded().iter().map(|u| u.step.as_str()).collect();
    assert_eq!(unguarded, ["debit-a", "notify-partner"]);
    assert!(
        report
            .unguarded()
            .iter()
            .all(|u| !u.left_in_place.is_empty())
    );
    let shown = report.to_string();
    assert!(
        shown.contains("step \"credit-b\" fails for good at attempt 1"),
        "{shown}"
    );
    assert!(shown.contains("INVARIANT BROKEN"), "{shown}");
    assert!(shown.contains("step \"debit-a\": started in"), "{shown}");
    let panic = std::panic::catch_unwind(|| report.assert_ok()).expect_err("assert_ok panics");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("credit-b"), "{message}");
}

#[tokio::test]
async fn it_runs_inside_a_tokio_test_too() {
    let report = explore_transfer();
    report.assert_ok();
}
