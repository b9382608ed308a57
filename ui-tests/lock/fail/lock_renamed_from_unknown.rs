// `renamed_from` names a step saga.lock never had.
use saga_runtime::prelude::*;

#[step(name = "pack-parcel", renamed_from = "box-parcel", read_only)]
async fn pack(parcel: u64) -> Result<u64, StepError> {
    Ok(parcel)
}

fn main() {}
