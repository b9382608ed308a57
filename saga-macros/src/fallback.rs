//! Stand-ins for items that failed their checks (thiserror's `fallback.rs`,
//! tokio's `token_stream_with_error`): an item with the declared shape, so
//! its callers compile against it and the user sees the macro's errors
//! alone, not rustc's advice about a signature the macro would have
//! changed ("remove the extra argument", "`u64` is not a future").

use proc_macro2::TokenStream;
use quote::quote;
use syn::{FnArg, ItemFn, Type};

use crate::ast::{WORKFLOW_CONTEXT, is_injected};
use crate::attr::WorkflowArgs;
use crate::items::{cfg_attrs, hidden_handler_type, name_or_ident, workflow_value};
use crate::types;

/// A step whose signature cannot be expanded: a function with the shape
/// its callers use, `fn(&WorkflowContext, inputs..) -> StepFuture<Output>`,
/// that is never run (the build fails). Generics and a receiver are kept,
/// so calls still type-check; `Output` is `T` of `Result<T, _>`, else the
/// return type as written.
pub(crate) fn step(item: &ItemFn) -> TokenStream {
    let (attrs, vis) = (&item.attrs, &item.vis);
    let mut sig = item.sig.clone();
    sig.asyncness = None;
    sig.variadic = None;
    let output = output_type(&item.sig.output);
    sig.output = syn::parse_quote!(-> ::saga_runtime::__private::StepFuture<#output>);
    let receiver: Vec<FnArg> = sig
        .inputs
        .iter()
        .filter(|arg| matches!(arg, FnArg::Receiver(_)))
        .cloned()
        .collect();
    let inputs = sig.inputs.iter().filter_map(|arg| match arg {
        FnArg::Typed(typed) if !is_injected(&typed.ty) => Some((*typed.ty).clone()),
        _ => None,
    });
    let inputs: Vec<Type> = inputs.collect();
    let params: TokenStream = quote! {
        #(#receiver,)*
        __saga_ctx: &::saga_runtime::__private::WorkflowContext,
        #(_: #inputs),*
    };
    sig.inputs = syn::parse_quote!(#params);
    quote! {
        #(#attrs)*
        #[allow(unused_variables)]
        #vis #sig {
            ::core::unimplemented!("this step did not compile")
        }
    }
}

/// A workflow whose signature cannot be expanded: the workflow value, with
/// the input and output read from the signature where they can be, and no
/// body (the build fails).
pub(crate) fn workflow(args: &WorkflowArgs, item: &ItemFn) -> TokenStream {
    let name = name_or_ident(args.name.as_ref(), &item.sig.ident);
    // The first parameter that is not the context, wherever it is.
    let input = item
        .sig
        .inputs
        .iter()
        .find_map(|arg| match arg {
            FnArg::Typed(typed) if !types::is_named(&typed.ty, WORKFLOW_CONTEXT) => {
                Some((*typed.ty).clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| syn::parse_quote!(()));
    let output = output_type(&item.sig.output);
    // Docs and cfgs: the value keeps them; the rest belonged to the body.
    let attrs: Vec<_> = item
        .attrs
        .iter()
        .filter(|attr| attr.path().is_ident("doc") || attr.path().is_ident("cfg"))
        .collect();
    let run = quote! {
        fn run(
            &self,
            _: ::saga_runtime::__private::WorkflowContext,
            _: #input,
        ) -> ::saga_runtime::__private::WorkflowFuture<#output> {
            ::core::unimplemented!("this workflow did not compile")
        }
    };
    workflow_value(&attrs, item, &name, (&input, &output), run)
}

/// `T` of `-> Result<T, _>`, else the type as written, else `()`.
fn output_type(output: &syn::ReturnType) -> Type {
    match (types::result_ok(output), output) {
        (Some(ok), _) => ok.clone(),
        (None, syn::ReturnType::Type(_, ty)) => (**ty).clone(),
        (None, syn::ReturnType::Default) => syn::parse_quote!(()),
    }
}

/// A handler whose signature could not be read: emitted unchanged, with a
/// hidden type that fits any step, so the steps naming it report nothing
/// more than the handler's own error.
pub(crate) fn rollback(item: &ItemFn) -> TokenStream {
    let ident = &item.sig.ident;
    let hidden_type = hidden_handler_type(item, &[]);
    let cfgs = cfg_attrs(item);
    quote! {
        #item
        #hidden_type
        #(#cfgs)*
        #[automatically_derived]
        impl<__SagaOutput, __SagaInputs> ::saga_runtime::__private::RollbackHandler<__SagaOutput, __SagaInputs> for #ident {
            const CONFIG: ::saga_runtime::__private::StepConfig =
                ::saga_runtime::__private::StepConfig::new();
            fn call(
                __saga_rollback: ::saga_runtime::__private::RollbackInput<__SagaOutput>,
                __saga_inputs: __SagaInputs,
            ) -> ::saga_runtime::__private::BoxFuture<
                ::core::result::Result<(), ::saga_runtime::__private::StepError>,
            > {
                <::saga_runtime::__private::NotARollbackHandler
                    as ::saga_runtime::__private::RollbackHandler<__SagaOutput, __SagaInputs>>
                    ::call(__saga_rollback, __saga_inputs)
            }
        }
    }
}
