use saga_runtime::prelude::*;

#[step(name = "charge-card")]
struct ChargeCard {
    amount: u64,
}

fn main() {
    let _ = ChargeCard { amount: 1 }.amount;
}
