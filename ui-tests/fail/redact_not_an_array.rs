use saga_runtime::prelude::*;

#[step(name = "lookup", read_only, redact = "sku")]
async fn lookup(sku: String) -> Result<u64, StepError> {
    Ok(sku.len() as u64)
}

fn main() {}
