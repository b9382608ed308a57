//! Telling steps from helpers at compile time.
//!
//! `#[step]` puts a hidden braced struct named like the step function beside
//! it (types and functions live in different namespaces) that implements
//! `StepDefinition` with the step's names. A workflow imports every
//! function it calls as `f(&ctx, ..)` under an alias next to a glob import
//! of a stand-in, and reads `StepProbe::<alias>::STEP`: `Some(names)` for a
//! step, `None` for a helper (see `saga_runtime::__private::StepProbe`).
//! From that table, `const` assertions in the workflow body check:
//!
//! - a step called at two call sites that can both run (`calls`): error at
//!   the second site; a helper may be called anywhere;
//! - two different step functions (or a step function and a literal
//!   `ctx.step`/`ctx.sleep`/`ctx.wait_for_event`/`ctx.child` name, or a
//!   child's old name) with one name: error naming both and the name;
//! - (with a `saga.lock`) a step the lock does not list for this workflow,
//!   called outside every patched branch.
//!
//! A failed assertion is a compile error ("evaluation panicked: ...")
//! pointing at the call. Calls not written `f(&ctx, ..)` with the path of
//! the function (e.g. through a variable holding `&ctx`, or a function
//! pointer) are not seen.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::{Ident, ItemFn, LitStr};

use crate::body::BodySummary;
use crate::calls::Callee;
use crate::errors::{STEP_NAME, StepCallError};
use crate::items::{cfg_attrs, hidden_type, service_needs};

/// The hidden type of a step function and its `StepDefinition`.
/// `rebuild` is `Option<RebuildRollback>`: the step's compensation from
/// its start record (see `expand::rebuild_from_history`).
pub(crate) fn step_definition(
    item: &ItemFn,
    name: &LitStr,
    renamed_from: Option<&LitStr>,
    services: &[&syn::Type],
    rollback: Option<&syn::Path>,
    rebuild: TokenStream,
    read_only: bool,
) -> TokenStream {
    let private = quote!(::saga_runtime::__private);
    let services = service_needs(services);
    // The handler's services, or none when it has no `#[rollback]` (that
    // error is reported by the step's registration).
    let rollback_services = match rollback {
        Some(handler) => quote! {{
            #[allow(unused_imports)]
            use #private::rollback_fallback::*;
            #[allow(unused_imports)]
            use #private::NotAHandler as _;
            #[allow(unused_imports)]
            use #handler as __SagaRollbackHandler;
            #private::HandlerProbe::<__SagaRollbackHandler>::SERVICES
        }},
        None => quote!(&[]),
    };
    let ident = &item.sig.ident;
    let doc =
        format!("The step `{ident}` as a type, for the checks of the workflows that call it.");
    let cfgs = cfg_attrs(item);
    let hidden = hidden_type(item, &doc);
    let renamed_from = match renamed_from {
        Some(old) => quote!(::core::option::Option::Some(#old)),
        None => quote!(::core::option::Option::None),
    };
    quote! {
        #hidden
        #(#cfgs)*
        #[automatically_derived]
        impl ::saga_runtime::__private::StepDefinition for #ident {
            const NAMES: ::saga_runtime::__private::StepNames = ::saga_runtime::__private::StepNames {
                name: #name,
                renamed_from: #renamed_from,
                services: #services,
                rollback_services: #rollback_services,
                rollback_from_history: #rebuild,
                read_only: #read_only,
            };
        }
    }
}

/// `fn services(&self)` and `fn steps(&self)` of a workflow's `Workflow`
/// impl: the step functions it calls, and their services (and those of
/// their rollback handlers). The services of
/// the step functions it calls (and of their rollback handlers). It sits
/// beside the workflow, not in its body, so callees declared or imported
/// inside the body (`local`) cannot be named there and are left out: such
/// a step reports a missing service at its first attempt instead.
pub(crate) fn workflow_services(body: &BodySummary, local: &[String]) -> TokenStream {
    let private = quote!(::saga_runtime::__private);
    let probes = body
        .calls
        .callees
        .iter()
        .filter(|callee| {
            let first = callee.path.segments.first().map(|s| s.ident.to_string());
            callee.path.leading_colon.is_some()
                || !first.is_some_and(|first| local.contains(&first))
        })
        .map(|callee| {
            let path = &callee.path;
            quote! {{
                #[allow(unused_imports)]
                use #private::step_fallback::*;
                #[allow(unused_imports)]
                use #path as __SagaCallee;
                #private::StepProbe::<__SagaCallee>::STEP
            }}
        })
        .collect::<Vec<_>>();
    quote! {
        fn services(&self) -> ::std::vec::Vec<#private::ServiceNeed> {
            #[allow(unused_imports)]
            use #private::NotAStep as _;
            #private::services_of(&[#(#probes,)*])
        }

        fn steps(&self) -> ::std::vec::Vec<#private::StepNames> {
            #[allow(unused_imports)]
            use #private::NotAStep as _;
            #private::steps_of(&[#(#probes,)*])
        }
    }
}

/// The names of the items (functions, imports, modules, constants,
/// statics, structs) declared inside a block, at any depth: a path
/// starting with one of them means nothing outside it.
pub(crate) fn local_item_names(block: &syn::Block) -> Vec<String> {
    struct Items(Vec<String>);
    impl<'ast> syn::visit::Visit<'ast> for Items {
        fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
            self.0.push(item.sig.ident.to_string());
        }
        fn visit_use_name(&mut self, name: &'ast syn::UseName) {
            self.0.push(name.ident.to_string());
        }
        fn visit_use_rename(&mut self, rename: &'ast syn::UseRename) {
            self.0.push(rename.rename.to_string());
        }
        fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
            self.0.push(module.ident.to_string());
        }
        fn visit_item_const(&mut self, item: &'ast syn::ItemConst) {
            self.0.push(item.ident.to_string());
        }
        fn visit_item_static(&mut self, item: &'ast syn::ItemStatic) {
            self.0.push(item.ident.to_string());
        }
        fn visit_item_struct(&mut self, item: &'ast syn::ItemStruct) {
            self.0.push(item.ident.to_string());
        }
    }
    let mut items = Items(Vec::new());
    syn::visit::Visit::visit_block(&mut items, block);
    items.0
}

/// The `const _: () = { .. };` item that checks the workflow's calls, to be
/// put first in the workflow body (so paths resolve as the body's do).
/// `extra` adds assertions of the same shape (the lock's).
pub(crate) fn workflow_checks(body: &BodySummary, extra: &[StepCallError]) -> TokenStream {
    let callees = &body.calls.callees;
    if callees.is_empty() {
        return TokenStream::new();
    }
    let private = quote!(::saga_runtime::__private);
    // Literal names first, then callees: the duplicate check of a callee
    // compares it with everything before it.
    let literal_uses = body.names.iter().map(|name| {
        let what = format!("`ctx.{}({:?}, ..)`", name.method, name.literal.value());
        let literal = &name.literal;
        let renamed_from = match &name.renamed_from {
            Some(old) => quote!(::core::option::Option::Some(#old)),
            None => quote!(::core::option::Option::None),
        };
        quote! {
            #private::NameUse {
                step: ::core::option::Option::Some(#private::StepNames {
                    name: #literal,
                    renamed_from: #renamed_from,
                    services: &[],
                    rollback_services: &[],
                    rollback_from_history: ::core::option::Option::None,
                    read_only: false,
                }),
                what: #what,
            }
        }
    });
    let callee_uses = callees.iter().map(|callee| {
        let path = &callee.path;
        let what = format!("the step function `{}`", callee.text);
        quote! {
            #private::NameUse {
                step: {
                    #[allow(unused_imports)]
                    use #private::step_fallback::*;
                    #[allow(unused_imports)]
                    use #path as __SagaCallee;
                    #private::StepProbe::<__SagaCallee>::STEP
                },
                what: #what,
            }
        }
    });
    let first_callee = body.names.len();
    let twice = callees.iter().enumerate().filter_map(|(index, callee)| {
        let site = callee.second_site()?;
        Some(step_call_error(
            first_callee + index,
            site.span,
            &called_twice(callee),
        ))
    });
    let extra = extra.iter().map(|error| {
        named_step_call_error(first_callee + error.callee, error.span, &error.message)
    });
    let same_name = callees
        .iter()
        .enumerate()
        .map(|(index, callee)| same_name_check(first_callee + index, callee));
    quote! {
        const _: () = {
            #[allow(unused_imports)]
            use #private::NotAStep as _;
            const __SAGA_USES: &[#private::NameUse] = &[#(#literal_uses,)* #(#callee_uses,)*];
            #(#twice)*
            #(#same_name)*
            #(#extra)*
        };
    }
}

/// `if uses[index] is a step { panic!(message) }`, the panic at `span`.
fn step_call_error(index: usize, span: Span, message: &str) -> TokenStream {
    let panic = quote_spanned!(span=> ::core::panic!(#message));
    quote! {
        if __SAGA_USES[#index].step.is_some() {
            #panic
        }
    }
}

/// As [`step_call_error`], each [`STEP_NAME`] in `message` replaced by the
/// step's name (built at compile time, as in [`same_name_check`]); the
/// message is not a format string, so it may hold braces.
fn named_step_call_error(index: usize, span: Span, message: &str) -> TokenStream {
    let private = quote!(::saga_runtime::__private);
    let pieces = message.split(STEP_NAME).map(|piece| quote!(#piece));
    let mut parts = Vec::new();
    for (at, piece) in pieces.enumerate() {
        if at > 0 {
            parts.push(quote!(__SAGA_NAME));
        }
        parts.push(piece);
    }
    let count = parts.len();
    let panic = quote_spanned!(span=> ::core::panic!("{}", #private::as_str(&__SAGA_MESSAGE)));
    quote! {
        {
            const __SAGA_NAME: &str = match &__SAGA_USES[#index].step {
                ::core::option::Option::Some(__saga_names) => __saga_names.name,
                ::core::option::Option::None => "",
            };
            const __SAGA_PARTS: [&str; #count] = [#(#parts),*];
            const __SAGA_LEN: usize = #private::concat_len(&__SAGA_PARTS);
            const __SAGA_MESSAGE: [u8; __SAGA_LEN] = #private::concat(&__SAGA_PARTS);
            if __SAGA_USES[#index].step.is_some() {
                #panic
            }
        }
    }
}

fn called_twice(callee: &Callee) -> String {
    format!(
        "the step `{}` is already called at another place in this workflow that can run too: \
         both call sites would share one step name, so their stored results would depend on \
         the order they run in; call it from one place (inside a loop to run it several \
         times), or from exclusive branches (`if`/`else` arms, `match` arms), or define a \
         second #[step] with its own name",
        callee.text
    )
}

/// Fails when `uses[index]` shares a name with an earlier use; the message
/// names both and the name, built at compile time.
fn same_name_check(index: usize, callee: &Callee) -> TokenStream {
    let private = quote!(::saga_runtime::__private);
    let span = callee
        .sites
        .first()
        .map_or_else(Span::call_site, |site| site.span);
    let what = format!("the step function `{}`", callee.text);
    let [same, parts, len, message]: [Ident; 4] =
        ["SAME", "PARTS", "LEN", "MESSAGE"].map(|part| format_ident!("__SAGA_{}", part));
    let panic = quote_spanned!(span=> ::core::panic!("{}", #private::as_str(&#message)));
    quote! {
        {
            const #same: ::core::option::Option<(usize, &str)> =
                #private::earlier_same_name(__SAGA_USES, #index);
            const #parts: [&str; 7] = match #same {
                ::core::option::Option::Some((__saga_earlier, __saga_name)) => [
                    __SAGA_USES[__saga_earlier].what,
                    " and ",
                    #what,
                    " both use the name \"",
                    __saga_name,
                    "\" in this workflow: the name is the key of a step's stored results, so \
                     replay would mix up their results; give each its own name (or, for the \
                     same step reached by two paths, call it through one path)",
                    "",
                ],
                ::core::option::Option::None => [""; 7],
            };
            const #len: usize = #private::concat_len(&#parts);
            const #message: [u8; #len] = #private::concat(&#parts);
            if #same.is_some() {
                #panic
            }
        }
    }
}
