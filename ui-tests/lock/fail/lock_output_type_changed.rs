// saga.lock recorded the step `weigh` with output `u32`.
use saga_runtime::prelude::*;

#[step(name = "weigh", read_only)]
async fn weigh(grams: u64) -> Result<u64, StepError> {
    Ok(grams)
}

fn main() {}
