//! `?` in steps, rollback handlers and workflows on the user's own error
//! types: std errors, `anyhow::Error`, `String`, `&str`, a type that
//! declares its permanent errors, and a typed workflow error.

#![deny(warnings)]

use saga_runtime::prelude::*;

#[derive(Debug)]
enum PaymentError {
    Declined,
}

impl std::fmt::Display for PaymentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("declined")
    }
}

impl std::error::Error for PaymentError {}

impl saga_runtime::Permanent for PaymentError {}

fn pay(amount: u64) -> Result<u64, PaymentError> {
    if amount > 100 {
        return Err(PaymentError::Declined);
    }
    Ok(amount)
}

#[step(name = "charge", rollback = refund)]
async fn charge(key: IdempotencyKey, amount: u64) -> Result<u64, PaymentError> {
    let _ = key.as_str();
    Ok(pay(amount)?)
}

#[rollback]
async fn refund(ctx: RollbackContext<'_, u64>, amount: u64) -> anyhow::Result<()> {
    let _ = ctx.key().as_str();
    anyhow::ensure!(amount > 0, "nothing to refund");
    Ok(())
}

#[step(name = "parse", read_only)]
async fn parse(text: String) -> Result<u64, std::num::ParseIntError> {
    Ok(text.parse::<u64>()?)
}

#[step(name = "fetch", read_only)]
async fn fetch(url: String) -> anyhow::Result<String> {
    let port: u16 = "80".parse()?;
    Ok(format!("{url}:{port}"))
}

#[step(name = "label", read_only)]
async fn label(n: u64) -> Result<String, String> {
    if n == 0 {
        return Err(format!("no label for {n}"));
    }
    Ok(n.to_string())
}

#[step(name = "check", read_only)]
async fn check(n: u64) -> Result<(), &'static str> {
    if n == 0 {
        return Err("zero");
    }
    Ok(())
}

#[step(name = "boxed", read_only)]
async fn boxed(n: u64) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
    Ok(n)
}

#[derive(Debug, Serialize, Deserialize)]
enum OrderError {
    OutOfStock,
}

impl std::fmt::Display for OrderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("out of stock")
    }
}

#[workflow(name = "typed")]
async fn typed(ctx: WorkflowContext, text: String) -> Result<u64, OrderError> {
    let n = parse(&ctx, text).await.map_err(|_| OrderError::OutOfStock)?;
    Ok(n)
}

#[workflow(name = "with-anyhow")]
async fn with_anyhow(ctx: WorkflowContext, n: u64) -> anyhow::Result<String> {
    let n = charge(&ctx, n).await?;
    check(&ctx, n).await?;
    let n = boxed(&ctx, n).await?;
    let url = fetch(&ctx, label(&ctx, n).await?).await?;
    Ok(url)
}

#[workflow(name = "with-string")]
async fn with_string(ctx: WorkflowContext, (): ()) -> Result<(), String> {
    let _ = ctx;
    Err("a plain string is a typed error too".to_owned())
}

#[workflow(name = "with-str")]
async fn with_str(ctx: WorkflowContext, (): ()) -> Result<(), &'static str> {
    let _ = ctx;
    Err("a message")
}

#[workflow(name = "with-std")]
async fn with_std(ctx: WorkflowContext, (): ()) -> Result<(), std::io::Error> {
    let _ = ctx;
    Err(std::io::Error::other("disk full"))
}

fn main() {
    fn is_workflow<W: Workflow>(_: W) {}
    is_workflow(typed);
    is_workflow(with_anyhow);
    is_workflow(with_string);
    is_workflow(with_str);
    is_workflow(with_std);
}
