//! The store conformance suite, against the embedded sled store.

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
