//! Placeholder crate so trybuild cases can depend on saga-runtime.
