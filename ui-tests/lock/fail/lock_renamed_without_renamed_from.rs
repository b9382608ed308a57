// saga.lock recorded the function `inspect` as the step `check-parcel`.
use saga_runtime::prelude::*;

#[step(name = "inspect-parcel", read_only)]
async fn inspect(parcel: u64) -> Result<bool, StepError> {
    Ok(parcel > 0)
}

fn main() {}
