use saga_runtime::prelude::*;

#[step(name = "lookup-price", read_only = true)]
async fn lookup_price(sku: String) -> Result<u64, StepError> {
    Ok(sku.len() as u64)
}

fn main() {}
