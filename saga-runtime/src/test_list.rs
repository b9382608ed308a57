//! The integration tests live in the workspace's `tests/` and are listed
//! as `[[test]]` targets of this crate by hand; this check fails when a
//! file there is not listed, so a new test cannot be skipped silently.

use std::collections::BTreeSet;
use std::path::Path;

#[test]
fn every_file_in_tests_is_a_test_target() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).expect("Cargo.toml");
    let listed: BTreeSet<String> = manifest
        .lines()
        .filter_map(|line| line.trim().strip_prefix("path = \"../tests/"))
        .filter_map(|rest| rest.strip_suffix('"'))
        .map(str::to_owned)
        .collect();
    let files: BTreeSet<String> = std::fs::read_dir(crate_dir.join("../tests"))
        .expect("the tests directory")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".rs"))
        .collect();
    let missing: Vec<_> = files.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "tests/ files without a [[test]] entry in saga-runtime/Cargo.toml: {missing:?}"
    );
}
