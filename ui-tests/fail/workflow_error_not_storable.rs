use saga_runtime::prelude::*;

struct Refused;

#[workflow(name = "checkout")]
async fn checkout(ctx: WorkflowContext, order: u64) -> Result<u64, Refused> {
    let _ = ctx;
    if order == 0 {
        return Err(Refused);
    }
    Ok(order)
}

fn main() {}
