use saga_runtime::prelude::*;

struct Price(u64);

#[step(name = "lookup-price", read_only)]
async fn lookup_price(sku: String) -> Result<Price, StepError> {
    Ok(Price(sku.len() as u64))
}

fn main() {}
