//! Stage 4: code generation, and the entry points that run the pipeline.
//!
//! Generated code names nothing but `::saga_runtime::__private::…`, `::core`
//! and `::std` items; generated locals start with `__saga_`. Whatever goes
//! wrong, something is emitted: the best expansion available plus the
//! `compile_error!`s, or the user's function unchanged plus the errors.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, ItemFn};

use crate::ast::{ParamKind, RollbackFn, StepFn, WorkflowFn};
use crate::attr::{Backoff, RetryConfig, RollbackArgs, StepArgs, WorkflowArgs};
use crate::check;
use crate::children;
use crate::errors::Errors;
use crate::fallback;
use crate::items::{cfg_attrs, hidden_handler_type, name_or_ident, workflow_value};
use crate::lock;
use crate::steps;
use crate::updates;

/// `#[step(..)]`.
pub(crate) fn step(args: TokenStream, item: TokenStream) -> TokenStream {
    let shape =
        "#[step] goes on an `async fn(key: IdempotencyKey, inputs..) -> Result<Output, StepError>`";
    run(shape, args, item, |args, item, errors| {
        let args = StepArgs::parse(args, errors);
        let Some(step) = StepFn::from_syn(item.clone(), errors) else {
            return Some(fallback::step(&item));
        };
        check::step(&args, &step, errors);
        let lock = args.name.as_ref().map(|name| {
            let ident = &step.item.sig.ident;
            lock::step(
                name,
                args.renamed_from.as_ref(),
                ident,
                &step.output,
                errors,
            )
        });
        let step = step_tokens(&args, &step, errors.is_empty());
        Some(quote!(#step #lock))
    })
}

/// `#[rollback(..)]`.
pub(crate) fn rollback(args: TokenStream, item: TokenStream) -> TokenStream {
    let shape = "#[rollback] goes on an \
        `async fn(ctx: RollbackContext<'_, Output>, inputs..) -> Result<(), StepError>`";
    run(shape, args, item, |args, item, errors| {
        let args = RollbackArgs::parse(args, errors);
        let Some(handler) = RollbackFn::from_syn(item.clone(), errors) else {
            return Some(fallback::rollback(&item));
        };
        check::rollback(&handler, errors);
        Some(rollback_tokens(&args, &handler))
    })
}

/// `#[workflow(..)]`.
pub(crate) fn workflow(args: TokenStream, item: TokenStream) -> TokenStream {
    let shape = "#[workflow] goes on an \
        `async fn(ctx: WorkflowContext, input: Input) -> Result<Output, WorkflowError>`";
    run(shape, args, item, |args, item, errors| {
        let args = WorkflowArgs::parse(args, errors);
        let Some(mut workflow) = WorkflowFn::from_syn(item.clone(), errors) else {
            return Some(fallback::workflow(&args, &item));
        };
        let body = check::workflow(&mut workflow, errors);
        let (lock, unlisted) = match &args.name {
            Some(name) => lock::workflow(name, &body, errors),
            None => Default::default(),
        };
        let checks = steps::workflow_checks(&body, &unlisted);
        let local = steps::local_item_names(&workflow.item.block);
        let services = steps::workflow_services(&body, &local);
        let children = children::children_fn(&body.children, &local);
        let updates = updates::updates_fn(&args.updates, args.validator.as_ref(), &body, errors);
        let order = args.concurrent_rollback.then(|| {
            quote! {
                fn rollback_order(&self) -> ::saga_runtime::RollbackOrder {
                    ::saga_runtime::RollbackOrder::Concurrent
                }
            }
        });
        let workflow = workflow_tokens(
            &args,
            &workflow,
            checks,
            quote!(#services #children #order #updates),
        );
        Some(quote!(#workflow #lock))
    })
}

/// Runs one macro's pipeline. `expand` returns `None` when the function
/// cannot be expanded; it is then emitted unchanged. Errors are appended;
/// `shape` is the error for an item that is not a function.
fn run(
    shape: &str,
    args: TokenStream,
    item: TokenStream,
    expand: impl FnOnce(TokenStream, ItemFn, &mut Errors) -> Option<TokenStream>,
) -> TokenStream {
    let mut errors = Errors::default();
    let expanded = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(function) => expand(args, function, &mut errors).unwrap_or(item),
        Err(_) => {
            errors.push(syn::Error::new(Span::call_site(), shape));
            item
        }
    };
    let errors = errors.into_compile_errors();
    quote!(#expanded #errors)
}

/// The step function: takes `&WorkflowContext` and the caller's inputs,
/// encodes the inputs for the step's start record, starts the step,
/// returns its future.
/// When the step has errors (`checked` is false), the user's body does not
/// add warnings that contradict them ("prefix `key` with `_`").
fn step_tokens(args: &StepArgs, step: &StepFn, checked: bool) -> TokenStream {
    let item = &step.item;
    let (attrs, vis, ident) = (&item.attrs, &item.vis, &item.sig.ident);
    let output = &step.output;
    let name = name_or_ident(args.name.as_ref(), ident);
    let config = config_tokens(&args.config);
    let read_only = args.read_only;
    let body = inner_async_fn(item, &format_ident!("__saga_body"));
    let quiet = (!checked).then(|| quote!(#[allow(unused_variables)]));

    let inputs: Vec<_> = step.inputs().collect();
    let input_vars: Vec<Ident> = inputs
        .iter()
        .enumerate()
        .map(|(index, param)| input_var(param.binding.as_ref(), index))
        .collect();
    let input_types: Vec<_> = inputs.iter().map(|param| &param.ty).collect();
    // Spanned on the type, so a type that cannot be cloned gets one error
    // (rustc merges the identical ones of each clone site) pointing at it.
    let clones: Vec<TokenStream> = input_vars
        .iter()
        .zip(&input_types)
        .map(|(var, ty)| quote_spanned!(ty.span()=> ::saga_runtime::__private::clone_input(&#var)))
        .collect();
    // Spanned on the type too: a type that is not `Serialize` gets one error
    // there. Positions count from 1, for the message of one that fails. An
    // input `redact = [..]` names is stored whole and shown `<redacted>`.
    let encodes: Vec<TokenStream> = input_vars
        .iter()
        .zip(&inputs)
        .enumerate()
        .map(|(index, (var, param))| {
            let position = index + 1;
            let redacted = param
                .binding
                .as_ref()
                .is_some_and(|b| args.redact.iter().any(|name| b == &name.value()));
            // Spanned too: the bound's "required by this call" points at the input.
            let encode = if redacted {
                format_ident!("encode_input_redacted", span = param.ty.span())
            } else {
                format_ident!("encode_input", span = param.ty.span())
            };
            quote_spanned!(param.ty.span()=> ::saga_runtime::__private::#encode(#position, &#var))
        })
        .collect();
    let service_types: Vec<&syn::Type> = step.services().map(|param| &param.ty).collect();
    let service_vars: Vec<Ident> = (0..service_types.len())
        .map(|index| format_ident!("__saga_service{index}"))
        .collect();
    let mut next_input = input_vars.iter();
    let mut next_service = service_vars.iter();
    let call_args: Vec<TokenStream> = step
        .params
        .iter()
        .map(|param| match param.kind {
            ParamKind::Key => quote!(__saga_key),
            ParamKind::StepContext => quote!(__saga_step),
            ParamKind::Input => next_input.next().to_token_stream(),
            ParamKind::Service => next_service.next().to_token_stream(),
        })
        .collect();
    let fetch_services = fetch_services(
        &service_vars,
        &service_types,
        quote!(for_step(&__saga_step)),
    );
    // A renamed step hands its old name to the runtime, for replay.
    let (start, old_name) = match &args.renamed_from {
        Some(old) => (quote!(start_step_renamed), quote!(#old,)),
        None => (quote!(start_step), TokenStream::new()),
    };
    let convert = step_error_conversion(&item.sig.output, quote!(__saga_attempt.await), true);
    let rebuild = match &args.rollback {
        Some(handler) => rebuild_from_history(handler, &args.rollback_config, output, &input_types),
        None => quote!(::core::option::Option::None),
    };
    let definition = steps::step_definition(
        item,
        &name,
        args.renamed_from.as_ref(),
        &service_types,
        args.rollback.as_ref(),
        rebuild,
        read_only,
    );
    let take_key = step
        .injected(ParamKind::Key)
        .map(|_| quote!(let __saga_key = __saga_step.key();));
    let rollback = match &args.rollback {
        Some(handler) => rollback_registration(
            handler,
            &args.rollback_config,
            output,
            &input_types,
            &clones,
        ),
        None => quote!(::core::option::Option::None),
    };

    quote! {
        #(#attrs)*
        #vis fn #ident(
            __saga_ctx: &::saga_runtime::__private::WorkflowContext,
            #(#input_vars: #input_types),*
        ) -> ::saga_runtime::__private::StepFuture<#output> {
            #quiet
            #body
            let __saga_rollback = #rollback;
            // Recorded in the step's start record, as the tuple of the inputs.
            let __saga_inputs = ::saga_runtime::__private::step_inputs([#(#encodes),*]);
            // The explicit output type puts its bound errors on the user's type.
            ::saga_runtime::__private::#start::<#output, _, _>(
                __saga_ctx,
                #name,
                #old_name
                #config,
                #read_only,
                __saga_inputs,
                move |__saga_step: ::saga_runtime::__private::StepContext| {
                    #(let #input_vars = #clones;)*
                    #take_key
                    #fetch_services
                    async move {
                        #(let #service_vars = #service_vars?;)*
                        let __saga_attempt = __saga_body(#(#call_args),*);
                        #convert
                    }
                },
                __saga_rollback,
            )
        }
        #definition
    }
}

/// `Some(registration)` of the handler at `handler`. The handler's hidden
/// type (from `#[rollback]`) carries its config and signature; a handler
/// without `#[rollback]` resolves, through the glob import, to a stand-in
/// whose trait bound fails with "add #[rollback]".
fn rollback_registration(
    handler: &syn::Path,
    overrides: &RetryConfig,
    output: &syn::Type,
    input_types: &[&syn::Type],
    input_clones: &[TokenStream],
) -> TokenStream {
    let span = handler.span();
    let handler_type = quote_spanned!(span=> __SagaRollbackHandler);
    let overrides = config_chain(overrides);
    quote! {{
        #[allow(unused_imports)]
        use ::saga_runtime::__private::rollback_fallback::*;
        use #handler as __SagaRollbackHandler;
        ::core::option::Option::Some(
            ::saga_runtime::__private::register_rollback::<#handler_type, #output, (#(#input_types,)*)>(
                |__saga_config: ::saga_runtime::__private::StepConfig| __saga_config #overrides,
                (#(#input_clones,)*)
            )
        )
    }}
}

/// `Some(rebuild)`: the compensation of the step rebuilt from the inputs
/// its start record stored, for a `Blocked` instance's rollback. The same
/// registration as [`rollback_registration`], with decoded inputs (so a
/// step with a rollback takes inputs that are `Deserialize` too).
fn rebuild_from_history(
    handler: &syn::Path,
    overrides: &RetryConfig,
    output: &syn::Type,
    input_types: &[&syn::Type],
) -> TokenStream {
    let span = handler.span();
    let handler_type = quote_spanned!(span=> __SagaRollbackHandler);
    let overrides = config_chain(overrides);
    let private = quote!(::saga_runtime::__private);
    // Spanned on each type: one that is not `Deserialize` gets one error there.
    let decodes = input_types.iter().enumerate().map(|(index, ty)| {
        let position = index + 1;
        quote_spanned!(ty.span()=> #private::stored_input::<#ty>(__saga_args, #position)?)
    });
    quote! {{
        fn __saga_rebuild(
            __saga_inputs: #private::StoredInputs<'_>,
        ) -> ::core::result::Result<#private::HistoryRollback, ::std::string::String> {
            #[allow(unused_imports)]
            use #private::rollback_fallback::*;
            use #handler as __SagaRollbackHandler;
            // The same registration as the step's own (so a handler that
            // does not fit is one error, reported there).
            #private::rebuild_rollback::<#output>(__saga_inputs, |__saga_args| {
                ::core::result::Result::Ok(
                    #private::register_rollback::<#handler_type, #output, (#(#input_types,)*)>(
                        |__saga_config: #private::StepConfig| __saga_config #overrides,
                        (#(#decodes,)*),
                    ),
                )
            })
        }
        ::core::option::Option::Some(__saga_rebuild as #private::RebuildRollback)
    }}
}

/// The handler unchanged (made `async` if it was not: that error is already
/// reported) and its hidden type with config and signature.
fn rollback_tokens(args: &RollbackArgs, handler: &RollbackFn) -> TokenStream {
    let mut item = handler.item.clone();
    item.sig.asyncness = Some(Default::default());
    let ident = &item.sig.ident;
    let output = &handler.step_output;
    let inputs = handler.inputs();
    let services = handler.services();
    let input_vars: Vec<Ident> = (0..inputs.len())
        .map(|index| format_ident!("__saga_input{index}"))
        .collect();
    let service_vars: Vec<Ident> = (0..services.len())
        .map(|index| format_ident!("__saga_service{index}"))
        .collect();
    let (mut next_input, mut next_service) = (input_vars.iter(), service_vars.iter());
    let call_args: Vec<_> = handler
        .params
        .iter()
        .map(|(service, _)| match service {
            true => next_service.next(),
            false => next_input.next(),
        })
        .collect();
    let config = config_tokens(&args.config);
    let convert = step_error_conversion(
        &item.sig.output,
        quote!(#ident(__saga_rollback.context(), #(#call_args),*).await),
        false,
    );
    let fetch_services = fetch_services(
        &service_vars,
        &services,
        quote!(for_rollback(&__saga_rollback)),
    );
    let hidden_type = hidden_handler_type(&item, &services);
    let cfgs = cfg_attrs(&item);
    // A handler that takes none of the step's inputs fits a step with any.
    let (generics, step_inputs, take_inputs) = if inputs.is_empty() {
        (
            quote!(<__SagaInputs>),
            quote!(__SagaInputs),
            TokenStream::new(),
        )
    } else {
        (
            TokenStream::new(),
            quote!((#(#inputs,)*)),
            quote!(let (#(#input_vars,)*) = __saga_inputs;),
        )
    };
    quote! {
        #item
        #hidden_type
        #(#cfgs)*
        #[automatically_derived]
        impl #generics ::saga_runtime::__private::RollbackHandler<#output, #step_inputs> for #ident {
            const CONFIG: ::saga_runtime::__private::StepConfig = #config;
            fn call(
                __saga_rollback: ::saga_runtime::__private::RollbackInput<#output>,
                __saga_inputs: #step_inputs,
            ) -> ::saga_runtime::__private::BoxFuture<
                ::core::result::Result<(), ::saga_runtime::__private::StepError>,
            > {
                #take_inputs
                #fetch_services
                ::std::boxed::Box::pin(async move {
                    #(let #service_vars = #service_vars?;)*
                    #convert
                })
            }
        }
    }
}

/// `let __saga_serviceN = <Service<T> as ServiceParam>::#fetch;` for each
/// service parameter: a `Result`, unwrapped with `?` inside the attempt,
/// so a missing service fails the attempt for good instead of panicking.
fn fetch_services(vars: &[Ident], types: &[&syn::Type], fetch: TokenStream) -> TokenStream {
    quote! {
        #(
            let #vars = <#types as ::saga_runtime::__private::ServiceParam>::#fetch;
        )*
    }
}

/// The workflow value: a unit struct named like the function, implementing
/// `Workflow` by running the function's body.
/// `checks` go first in the body; `items` (`services`, `steps`,
/// `children`) join `run` in the impl.
fn workflow_tokens(
    args: &WorkflowArgs,
    workflow: &WorkflowFn,
    checks: TokenStream,
    items: TokenStream,
) -> TokenStream {
    let mut item = workflow.item.clone();
    if !checks.is_empty() {
        item.block
            .stmts
            .insert(0, syn::Stmt::Item(syn::Item::Verbatim(checks)));
    }
    let item = &item;
    let (input, output) = (&workflow.input, &workflow.output);
    let name = name_or_ident(args.name.as_ref(), &item.sig.ident);
    // Lint levels are meant for the body; the rest (docs, ...) for the value.
    let (lints, attrs): (Vec<_>, Vec<_>) = item
        .attrs
        .iter()
        .partition(|attr| LINT_LEVELS.iter().any(|level| attr.path().is_ident(level)));
    let body = inner_async_fn(item, &format_ident!("__saga_run"));
    let convert = workflow_error_conversion(
        &item.sig.output,
        quote!(__saga_run(__saga_ctx, __saga_input).await),
    );
    let run = quote! {
        fn run(
            &self,
            __saga_ctx: ::saga_runtime::__private::WorkflowContext,
            __saga_input: #input,
        ) -> ::saga_runtime::__private::WorkflowFuture<#output> {
            #(#lints)*
            #body
            ::std::boxed::Box::pin(async move { #convert })
        }

        #items
    };
    workflow_value(&attrs, item, &name, (input, output), run)
}

/// `result` (a `Result<T, E>` of the step's or handler's own error type)
/// with `E` turned into a `StepError` (see `saga_runtime`'s `convert.rs`).
/// Spanned on the return type, so an error type that cannot convert is
/// reported there. `typed`: a step's error also keeps its value when `E`
/// is `Serialize` (a rollback handler's error is stored as its message).
fn step_error_conversion(
    output: &syn::ReturnType,
    result: TokenStream,
    typed: bool,
) -> TokenStream {
    let span = return_type_span(output);
    let call = quote_spanned! {span=>
        (&&&::saga_runtime::__private::ErrorValue(__saga_error)).__saga_step_error()
    };
    let converted = if typed {
        quote! {{
            #[allow(unused_imports)]
            use ::saga_runtime::__private::{ViaTypedStepError as _, ViaUntypedStepError as _};
            let __saga_typed =
                (&&::saga_runtime::__private::ErrorRef(&__saga_error)).__saga_step_value();
            __saga_typed.attach(#call)
        }}
    } else {
        call
    };
    quote! {
        match #result {
            ::core::result::Result::Ok(__saga_value) => ::core::result::Result::Ok(__saga_value),
            ::core::result::Result::Err(__saga_error) => {
                #[allow(unused_imports)]
                use ::saga_runtime::__private::{
                    ViaKnownStepError as _, ViaPermanent as _, ViaStdStepError as _,
                };
                ::core::result::Result::Err(#converted)
            }
        }
    }
}

/// `result` (the workflow function's `Result<O, E>`) with `E` turned into
/// a `WorkflowError`: typed (stored as JSON) when `E` is `Serialize +
/// DeserializeOwned + Display`, a message otherwise.
fn workflow_error_conversion(output: &syn::ReturnType, result: TokenStream) -> TokenStream {
    let span = return_type_span(output);
    let call = quote_spanned! {span=>
        (&&&&::saga_runtime::__private::ErrorValue(__saga_error)).__saga_workflow_error()
    };
    quote! {
        match #result {
            ::core::result::Result::Ok(__saga_value) => ::core::result::Result::Ok(__saga_value),
            ::core::result::Result::Err(__saga_error) => {
                #[allow(unused_imports)]
                use ::saga_runtime::__private::{
                    ViaKnownWorkflowError as _, ViaStdWorkflowError as _,
                    ViaTypedWorkflowError as _, ViaWorkflowError as _,
                };
                ::core::result::Result::Err(#call)
            }
        }
    }
}

/// The span of a function's return type (its error type, when it has one).
fn return_type_span(output: &syn::ReturnType) -> Span {
    match output {
        syn::ReturnType::Type(_, ty) => crate::types::type_args(ty)
            .get(1)
            .map_or_else(|| ty.span(), |error| error.span()),
        syn::ReturnType::Default => Span::call_site(),
    }
}

/// The attributes that set lint levels.
const LINT_LEVELS: &[&str] = &["allow", "expect", "warn", "deny", "forbid"];

/// The user's function as a private `async fn` named `ident`, nested in the
/// generated one: its body, parameters and spans stay as written.
fn inner_async_fn(item: &ItemFn, ident: &Ident) -> TokenStream {
    let mut sig = item.sig.clone();
    sig.ident = ident.clone();
    sig.asyncness = Some(Default::default());
    let block = &item.block;
    quote!(#sig #block)
}

/// `StepConfig::new()` with the settings given in the attribute.
fn config_tokens(config: &RetryConfig) -> TokenStream {
    let chain = config_chain(config);
    quote!(::saga_runtime::__private::StepConfig::new() #chain)
}

/// The builder calls that apply the settings `config` has:
/// `.retries(10).delay(..)`.
fn config_chain(config: &RetryConfig) -> TokenStream {
    let mut tokens = TokenStream::new();
    if let Some(retries) = config.retries {
        tokens.extend(quote!(.retries(#retries)));
    }
    if let Some(millis) = config.delay_millis {
        tokens.extend(quote!(.delay(::core::time::Duration::from_millis(#millis))));
    }
    if let Some(backoff) = config.backoff {
        let variant = match backoff {
            Backoff::Constant => quote!(Constant),
            Backoff::Linear => quote!(Linear),
            Backoff::Exponential => quote!(Exponential),
        };
        tokens.extend(quote!(.backoff(::saga_runtime::__private::Backoff::#variant)));
    }
    if let Some(millis) = config.timeout_millis {
        tokens.extend(quote!(.timeout(::core::time::Duration::from_millis(#millis))));
    }
    tokens
}

/// The variable of a caller-visible input in the generated function: the
/// user's own name when the pattern is a plain identifier.
fn input_var(binding: Option<&Ident>, index: usize) -> Ident {
    binding
        .cloned()
        .unwrap_or_else(|| format_ident!("__saga_arg{index}"))
}
