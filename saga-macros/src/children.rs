//! Child workflow calls, `ctx.child("book-flight", book_flight, input)`:
//! the builder calls that may follow one (`.no_rollback()`,
//! `.renamed_from("old")`), which the body checks read as part of the call,
//! and `Workflow::children`, generated from the calls.
//!
//! `children()` is what `register` checks: a parent whose children's
//! workflows are not registered is refused. It sits beside the workflow,
//! not in its body, so only a workflow argument that can be named there is
//! listed: a path (`book_flight`, `flights::book_flight`) that is not a
//! variable of the body or an item declared inside it. Any other argument
//! (`flights.pick()`, a local `let w = ..`) is left out; the runtime parks
//! the parent `Blocked` when it calls such a child that is not registered.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Expr, ExprMethodCall, LitStr};

/// The method of a child workflow call on the context.
pub(crate) const CHILD: &str = "child";
/// `.renamed_from("old")` on a child call: the name earlier releases gave it.
pub(crate) const RENAMED_FROM: &str = "renamed_from";
/// `.no_rollback()` on a child call: the parent's rollback leaves it be.
const NO_ROLLBACK: &str = "no_rollback";

/// A `ctx.child(..)` call with a literal name.
pub(crate) struct ChildUse {
    pub(crate) name: LitStr,
    /// The workflow argument, when `children()` can name it (see the
    /// module docs; items declared in the body are left out later).
    pub(crate) workflow: Option<syn::Path>,
}

/// Whether `call` is a builder method of `ChildCall` (`.no_rollback()`,
/// `.renamed_from(..)`) on a chain that starts with a child call on the
/// context (`is_child_call`).
pub(crate) fn is_builder_on_child(
    call: &ExprMethodCall,
    is_child_call: &impl Fn(&ExprMethodCall) -> bool,
) -> bool {
    let is_builder = [NO_ROLLBACK, RENAMED_FROM]
        .iter()
        .any(|method| call.method == method);
    let Expr::MethodCall(receiver) = &*call.receiver else {
        return false;
    };
    is_builder && (is_child_call(receiver) || is_builder_on_child(receiver, is_child_call))
}

/// The workflow argument of a child call, if it is a plain path:
/// `book_flight`, `flights::book_flight`, `(book_flight)`.
pub(crate) fn workflow_path(workflow: &Expr) -> Option<&syn::Path> {
    match workflow {
        Expr::Path(path) if path.qself.is_none() => Some(&path.path),
        Expr::Paren(paren) => workflow_path(&paren.expr),
        Expr::Group(group) => workflow_path(&group.expr),
        _ => None,
    }
}

/// `fn children(&self)` of a workflow's `Workflow` impl: a `ChildNeed` for
/// each child call whose workflow can be named beside the workflow (paths
/// starting with an item declared in the body, `local`, cannot).
///
/// A workflow argument that is not a `Workflow` is reported at the call;
/// here it is left out (autoref specialization: the `Workflow` impl is
/// found first when it applies), so the user sees that one error alone.
pub(crate) fn children_fn(children: &[ChildUse], local: &[String]) -> TokenStream {
    let private = quote!(::saga_runtime::__private);
    let needs: Vec<TokenStream> = children
        .iter()
        .filter_map(|child| {
            let path = child.workflow.as_ref()?;
            let first = path.segments.first().map(|s| s.ident.to_string());
            if path.leading_colon.is_none() && first.is_some_and(|first| local.contains(&first)) {
                return None;
            }
            let name = &child.name;
            Some(quote!((&__SagaChild(&#path)).__saga_need(#name)))
        })
        .collect();
    if needs.is_empty() {
        return quote! {
            fn children(&self) -> ::std::vec::Vec<::saga_runtime::__private::ChildNeed> {
                ::std::vec::Vec::new()
            }
        };
    }
    quote! {
        fn children(&self) -> ::std::vec::Vec<::saga_runtime::__private::ChildNeed> {
            struct __SagaChild<'__saga, __SagaW>(&'__saga __SagaW);
            #[allow(dead_code)]
            trait __SagaWorkflowChild {
                fn __saga_need(
                    &self,
                    call: &'static str,
                ) -> ::core::option::Option<::saga_runtime::__private::ChildNeed>;
            }
            impl<__SagaW: #private::Workflow> __SagaWorkflowChild for __SagaChild<'_, __SagaW> {
                fn __saga_need(
                    &self,
                    call: &'static str,
                ) -> ::core::option::Option<::saga_runtime::__private::ChildNeed> {
                    ::core::option::Option::Some(#private::child_need(call, self.0))
                }
            }
            #[allow(dead_code)]
            trait __SagaNotAWorkflow {
                fn __saga_need(
                    &self,
                    _: &'static str,
                ) -> ::core::option::Option<::saga_runtime::__private::ChildNeed> {
                    ::core::option::Option::None
                }
            }
            impl<__SagaW> __SagaNotAWorkflow for &__SagaChild<'_, __SagaW> {}
            [#(#needs),*].into_iter().flatten().collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ChildUse, children_fn, is_builder_on_child, workflow_path};
    use syn::{Expr, ExprMethodCall, LitStr};

    fn method_call(text: &str) -> ExprMethodCall {
        syn::parse_str(text).unwrap_or_else(|error| panic!("{text}: {error}"))
    }

    fn is_child_call(call: &ExprMethodCall) -> bool {
        call.method == "child"
    }

    #[test]
    fn builders_after_a_child_call_are_recognised() {
        let on_child = |text: &str| is_builder_on_child(&method_call(text), &is_child_call);
        assert!(on_child(r#"ctx.child("a", w, 1).renamed_from("b")"#));
        assert!(on_child(
            r#"ctx.child("a", w, 1).no_rollback().renamed_from("b")"#
        ));
        assert!(on_child(
            r#"ctx.child("a", w, 1).renamed_from("b").no_rollback()"#
        ));
        assert!(!on_child(
            r#"ctx.child("a", w, 1).other().renamed_from("b")"#
        ));
        assert!(!on_child(r#"ctx.child("a", w, 1)"#));
        assert!(!on_child(r#"thing.renamed_from("b")"#));
    }

    #[test]
    fn only_a_path_names_the_workflow() {
        let path = |text: &str| {
            let expr: Expr = syn::parse_str(text).unwrap_or_else(|error| panic!("{error}"));
            workflow_path(&expr).map(crate::calls::path_string)
        };
        assert_eq!(path("book_flight").as_deref(), Some("book_flight"));
        assert_eq!(path("flights::book").as_deref(), Some("flights::book"));
        assert_eq!(path("(book_flight)").as_deref(), Some("book_flight"));
        assert_eq!(path("flights.pick()"), None);
        assert_eq!(path("<T as X>::w"), None);
    }

    #[test]
    fn children_declared_in_the_body_are_left_out() {
        let child = |name: &str, path: &str| ChildUse {
            name: LitStr::new(name, proc_macro2::Span::call_site()),
            workflow: syn::parse_str(path).ok(),
        };
        let children = [
            child("book-flight", "book_flight"),
            child("book-hotel", "inner::book_hotel"),
            child("book-car", "crate::inner::book_car"),
        ];
        let tokens = children_fn(&children, &["inner".to_owned()]).to_string();
        assert!(tokens.contains("\"book-flight\""), "{tokens}");
        assert!(!tokens.contains("\"book-hotel\""), "{tokens}");
        assert!(tokens.contains("\"book-car\""), "{tokens}");
    }
}
