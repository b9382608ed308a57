//! `#[workflow(updates = ["approve"])]`: the updates a workflow takes.
//! Each `ctx.take_update` name of the body is declared, and each declared
//! name is taken there, so `saga.lock`'s `update` lines (the body's
//! `ctx.take_update` names) are the declared list; the runtime refuses an
//! update of any other name (`Workflow::updates`).

use proc_macro2::TokenStream;
use quote::quote;
use syn::{LitStr, Path};

use crate::body::BodySummary;
use crate::errors::Errors;

/// Its kind among the body's literal names (`CONTEXT_CALLS`).
const UPDATE: &str = "update";

/// Checks the declared updates against the body's `ctx.take_update`
/// names, and returns `fn updates(&self)` of the `Workflow` impl (nothing
/// when none is declared: the default takes none).
pub(crate) fn updates_fn(
    declared: &[LitStr],
    validator: Option<&Path>,
    body: &BodySummary,
    errors: &mut Errors,
) -> TokenStream {
    let taken: Vec<&LitStr> = body
        .names
        .iter()
        .filter(|used| used.kind == UPDATE)
        .map(|used| &used.literal)
        .collect();
    for name in &taken {
        if !declared.iter().any(|d| d.value() == name.value()) {
            errors.spanned(
                name,
                format!(
                    "the update {:?} is not declared: list it in the workflow's attribute, \
                     `#[workflow(.., updates = [{:?}])]`, so callers may send it",
                    name.value(),
                    name.value()
                ),
            );
        }
    }
    // A take whose name is not a literal has its error already: no
    // second one for the declared name it meant.
    let names_valid = errors.is_empty();
    for name in declared.iter().filter(|_| names_valid) {
        if !taken.iter().any(|t| t.value() == name.value()) {
            errors.spanned(
                name,
                format!(
                    "the workflow declares the update {:?} but never takes it: call \
                     `ctx.take_update({:?}, ..)` in its body, or remove it from `updates`",
                    name.value(),
                    name.value()
                ),
            );
        }
    }
    let validate = validator.map(|validator| {
        quote! {
            fn validate_update(
                &self,
                update: &str,
                request: &::saga_runtime::__private::serde_json::Value,
            ) -> ::core::result::Result<(), ::std::string::String> {
                #validator(update, request)
            }
        }
    });
    if declared.is_empty() {
        return quote!(#validate);
    }
    quote! {
        fn updates(&self) -> ::std::vec::Vec<&'static str> {
            ::std::vec![#(#declared),*]
        }
        #validate
    }
}
