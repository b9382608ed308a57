//! Reading types syntactically: the macros see tokens, not resolved types, so
//! `IdempotencyKey`, `RollbackContext<'_, T>` and `Result<T, E>` are
//! recognised by the last segment of their path.

use syn::{GenericArgument, PathArguments, PathSegment, ReturnType, Type};

/// `ty` without invisible groups and parentheses.
fn peel(ty: &Type) -> &Type {
    match ty {
        Type::Group(group) => peel(&group.elem),
        Type::Paren(paren) => peel(&paren.elem),
        other => other,
    }
}

/// The last segment of a path type: `Transfer` in `crate::bank::Transfer`.
pub(crate) fn last_segment(ty: &Type) -> Option<&PathSegment> {
    match peel(ty) {
        Type::Path(path) if path.qself.is_none() => path.path.segments.last(),
        _ => None,
    }
}

/// Whether `ty` is a path type whose last segment is `name`.
pub(crate) fn is_named(ty: &Type, name: &str) -> bool {
    last_segment(ty).is_some_and(|segment| segment.ident == name)
}

/// The type arguments of a path type: `[T, E]` of `Result<T, E>`.
pub(crate) fn type_args(ty: &Type) -> Vec<&Type> {
    let Some(segment) = last_segment(ty) else {
        return Vec::new();
    };
    let PathArguments::AngleBracketed(args) = &segment.arguments else {
        return Vec::new();
    };
    args.args
        .iter()
        .filter_map(|arg| match arg {
            GenericArgument::Type(ty) => Some(ty),
            _ => None,
        })
        .collect()
}

/// `T` of a function returning `Result<T, E>` (or `Result<T>`).
pub(crate) fn result_ok(output: &ReturnType) -> Option<&Type> {
    let ReturnType::Type(_, ty) = output else {
        return None;
    };
    if !is_named(ty, "Result") {
        return None;
    }
    // `Result<T, E>`, or an alias that fixes the error: `anyhow::Result<T>`.
    match type_args(ty).as_slice() {
        [ok, _] | [ok] => Some(ok),
        _ => None,
    }
}

/// Whether `ty` is `()`.
pub(crate) fn is_unit(ty: &Type) -> bool {
    matches!(peel(ty), Type::Tuple(tuple) if tuple.elems.is_empty())
}

/// Whether `ty` borrows: `&T`, or a path with a non-`'static` lifetime
/// argument.
pub(crate) fn is_borrowed(ty: &Type) -> bool {
    match peel(ty) {
        Type::Reference(_) => true,
        Type::Path(_) => last_segment(ty).is_some_and(|segment| {
            matches!(&segment.arguments, PathArguments::AngleBracketed(args)
                if args.args.iter().any(|arg| matches!(arg,
                    GenericArgument::Lifetime(lifetime) if lifetime.ident != "static")))
        }),
        _ => false,
    }
}
