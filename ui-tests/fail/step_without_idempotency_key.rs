use saga_runtime::prelude::*;

#[step(name = "create-approval")]
async fn create_approval(article: u64) -> Result<u64, StepError> {
    // INSERT INTO approvals (id, article) VALUES (uuid(), ?)  -- a retry inserts twice
    Ok(article)
}

fn main() {}
