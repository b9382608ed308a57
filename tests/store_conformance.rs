//! The store conformance suite, against the embedded sled store and (with
//! the `postgres` feature) the PostgreSQL store.

use saga_runtime::{SledStore, run_conformance_suite};

#[test]
fn sled_passes_the_store_conformance_suite() {
    let result = run_conformance_suite(|| SledStore::temporary().expect("a temporary store"));
    if let Err(violations) = result {
        panic!(
            "the sled store violates the Store contract:\n{}",
            violations.join("\n")
        );
    }
}

#[cfg(feature = "postgres")]
#[path = "support/postgres.rs"]
mod postgres;

#[cfg(feature = "postgres")]
#[test]
fn postgres_passes_the_store_conformance_suite() {
    use saga_runtime::{PgOptions, PgStore};

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let schemas = std::cell::RefCell::new(Vec::new());
    let result = run_conformance_suite(|| {
        let schema = runtime.block_on(postgres::fresh_schema("conformance"));
        schemas.borrow_mut().push(schema.clone());
        let mut options = PgOptions::new(&postgres::database_url());
        options.schema = schema;
        runtime
            .block_on(PgStore::connect(options))
            .unwrap_or_else(|e| postgres::missing(e))
    });
    for schema in schemas.take() {
        runtime.block_on(postgres::drop_schema(&schema));
    }
    if let Err(violations) = result {
        panic!(
            "the PostgreSQL store violates the Store contract:\n{}",
            violations.join("\n")
        );
    }
}
