//! Attribute macros for `saga-runtime`; they arrive in a later commit.

use proc_macro::TokenStream;

/// Marks an `async fn` as a workflow (not implemented yet).
#[proc_macro_attribute]
pub fn workflow(_args: TokenStream, input: TokenStream) -> TokenStream {
    input
}

/// Marks an `async fn` as a durable step (not implemented yet).
#[proc_macro_attribute]
pub fn step(_args: TokenStream, input: TokenStream) -> TokenStream {
    input
}

/// Marks an `async fn` as a rollback handler (not implemented yet).
#[proc_macro_attribute]
pub fn rollback(_args: TokenStream, input: TokenStream) -> TokenStream {
    input
}
