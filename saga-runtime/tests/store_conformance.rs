//! The store conformance suite, against the embedded sled store, the
//! simulated store of `testing::sim` and (with the `postgres` feature) the
//! PostgreSQL store.

use saga_runtime::store::{SledStore, run_conformance_suite};
use saga_runtime::testing::sim::SimDisk;

#[tokio::test]
async fn sled_passes_the_store_conformance_suite() {
    let result =
        run_conformance_suite(|| async { SledStore::temporary().expect("a temporary store") })
            .await;
    if let Err(violations) = result {
        panic!(
            "the sled store violates the Store contract:\n{}",
            violations.join("\n")
        );
    }
}

#[tokio::test]
async fn the_simulated_store_passes_the_store_conformance_suite() {
    let result = run_conformance_suite(|| async { SimDisk::new(7).open() }).await;
    if let Err(violations) = result {
        panic!(
            "the simulated store violates the Store contract:\n{}",
            violations.join("\n")
        );
    }
}

#[cfg(feature = "postgres")]
#[path = "support/postgres.rs"]
mod postgres;

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_passes_the_store_conformance_suite() {
    use saga_runtime::store::{PgOptions, PgStore};

    let schemas = std::sync::Mutex::new(Vec::new());
    let result = run_conformance_suite(|| async {
        let schema = postgres::fresh_schema("conformance").await;
        schemas.lock().unwrap().push(schema.clone());
        let mut options = PgOptions::new(&postgres::database_url());
        options.schema = schema;
        PgStore::connect(options)
            .await
            .unwrap_or_else(|e| postgres::missing(e))
    })
    .await;
    let schemas = std::mem::take(&mut *schemas.lock().unwrap());
    for schema in schemas {
        postgres::drop_schema(&schema).await;
    }
    if let Err(violations) = result {
        panic!(
            "the PostgreSQL store violates the Store contract:\n{}",
            violations.join("\n")
        );
    }
}
