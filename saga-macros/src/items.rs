//! The items generated beside a user's function, shared by the expansion
//! (`expand`), its stand-ins (`fallback`) and the step checks (`steps`):
//! hidden types named like the function, the workflow value, the `cfg`s
//! they copy. A leaf: it names no other module of the crate.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Ident, ItemFn, LitStr};

/// The type named like the handler function (a braced struct lives in the
/// type namespace only, so it coexists with the function) that steps find
/// through `rollback = handler`.
pub(crate) fn hidden_handler_type(item: &ItemFn, services: &[&syn::Type]) -> TokenStream {
    let ident = &item.sig.ident;
    let services = service_needs(services);
    let doc =
        format!("The rollback handler `{ident}` as a type, for `#[step(rollback = {ident})]`.");
    let cfgs = cfg_attrs(item);
    let hidden = hidden_type(item, &doc);
    quote! {
        #hidden
        #(#cfgs)*
        #[automatically_derived]
        impl ::saga_runtime::__private::RollbackAttribute for #ident {
            const SERVICES: &'static [::saga_runtime::__private::ServiceNeed] = #services;
        }
    }
}

/// A hidden braced struct named like the function `item` (it lives in the
/// type namespace only, so it coexists with the function), documented as
/// `doc`, for the traits the macros implement on a function.
pub(crate) fn hidden_type(item: &ItemFn, doc: &str) -> TokenStream {
    let (vis, ident) = (&item.vis, &item.sig.ident);
    let cfgs = cfg_attrs(item);
    quote! {
        #(#cfgs)*
        #[doc = #doc]
        #[doc(hidden)]
        #[allow(non_camel_case_types, dead_code, unreachable_pub)]
        #vis struct #ident {}
    }
}

/// The workflow value named like `item`: a unit struct carrying `attrs`,
/// implementing `Workflow` (named `name`, with the `input` and `output`
/// types) with `run`. Serves the expansion and its fallback alike.
pub(crate) fn workflow_value(
    attrs: &[&syn::Attribute],
    item: &ItemFn,
    name: &LitStr,
    (input, output): (&syn::Type, &syn::Type),
    run: TokenStream,
) -> TokenStream {
    let (vis, ident) = (&item.vis, &item.sig.ident);
    let cfgs = cfg_attrs(item);
    quote! {
        #(#attrs)*
        #[allow(non_camel_case_types)]
        #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug)]
        #vis struct #ident;

        #(#cfgs)*
        #[automatically_derived]
        impl ::saga_runtime::__private::Workflow for #ident {
            type Input = #input;
            type Output = #output;

            fn name(&self) -> &'static str {
                #name
            }

            #run
        }
    }
}

/// The `#[cfg(..)]`s of the function, for the items generated beside it.
pub(crate) fn cfg_attrs(item: &ItemFn) -> Vec<&syn::Attribute> {
    item.attrs
        .iter()
        .filter(|attr| attr.path().is_ident("cfg"))
        .collect()
}

/// `&[ServiceNeed::of::<T>(), ..]` for the `Service<T>` types `services`.
pub(crate) fn service_needs(services: &[&syn::Type]) -> TokenStream {
    let private = quote!(::saga_runtime::__private);
    quote! {
        &[#(
            #private::ServiceNeed::of::<<#services as #private::ServiceParam>::Target>(),
        )*]
    }
}

/// The name literal, or (when it is missing or invalid, an error already
/// reported) the function's name, so the expansion still type-checks.
pub(crate) fn name_or_ident(name: Option<&LitStr>, ident: &Ident) -> LitStr {
    name.cloned()
        .unwrap_or_else(|| LitStr::new(&ident.to_string(), ident.span()))
}
