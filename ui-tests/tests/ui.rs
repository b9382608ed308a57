//! Every diagnostic of the saga macros (`fail/`, one file per diagnostic,
//! with the expected compiler output beside it) and the forms they accept
//! (`pass/`). Re-bless the `.stderr` files with
//! `TRYBUILD=overwrite cargo test -p saga-ui-tests` and read each one.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("fail/*.rs");
    cases.pass("pass/*.rs");
}
