use saga_runtime::prelude::*;

mod rand {
    pub fn random<T: Default>() -> T {
        T::default()
    }
}

#[workflow(name = "lottery")]
async fn lottery(ctx: WorkflowContext, tickets: u64) -> Result<u64, WorkflowError> {
    let _ = ctx;
    let winner: u64 = rand::random();
    Ok(winner % tickets.max(1))
}

fn main() {}
