//! Where a variable is used in a function body: the idempotency-key checks
//! of steps, rollback handlers and inline steps. Macro invocations are
//! scanned too (`format!("{key}")`, `println!("{}", key)`).

use proc_macro2::{Ident, TokenStream, TokenTree};
use quote::ToTokens;
use syn::visit::{self, Visit};
use syn::{Expr, ExprMethodCall, ExprPath, Lit, Macro};

/// How a variable is used in a piece of code.
#[derive(Default)]
pub(crate) struct Usage {
    /// `var.key()` appears.
    pub(crate) key_calls: bool,
    /// Another method is called on it: `var.attempt()`.
    pub(crate) other_methods: bool,
    /// It appears other than as a method receiver: passed, moved, formatted.
    pub(crate) escapes: bool,
}

impl Usage {
    /// Whether the variable appears at all.
    pub(crate) fn any(&self) -> bool {
        self.key_calls || self.other_methods || self.escapes
    }

    /// Whether its key may be used: `.key()` is called, or the whole value
    /// goes somewhere the macro cannot see.
    pub(crate) fn may_use_key(&self) -> bool {
        self.key_calls || self.escapes
    }
}

/// How `var` is used in the code `visit_node` walks.
pub(crate) fn usage(var: &Ident, visit_node: impl FnOnce(&mut UsageVisitor<'_>)) -> Usage {
    let mut visitor = UsageVisitor {
        var,
        usage: Usage::default(),
    };
    visit_node(&mut visitor);
    visitor.usage
}

/// Finds the uses of one variable.
pub(crate) struct UsageVisitor<'v> {
    var: &'v Ident,
    usage: Usage,
}

impl<'ast> Visit<'ast> for UsageVisitor<'_> {
    fn visit_expr_method_call(&mut self, call: &'ast ExprMethodCall) {
        if is_var(&call.receiver, self.var) {
            if call.method == "key" {
                self.usage.key_calls = true;
            } else {
                self.usage.other_methods = true;
            }
            for arg in &call.args {
                self.visit_expr(arg);
            }
        } else {
            visit::visit_expr_method_call(self, call);
        }
    }

    fn visit_expr_path(&mut self, path: &'ast ExprPath) {
        if path.qself.is_none() && path.path.is_ident(self.var) {
            self.usage.escapes = true;
        }
        visit::visit_expr_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast Macro) {
        self.scan(mac.tokens.clone());
        visit::visit_macro(self, mac);
    }
}

impl UsageVisitor<'_> {
    /// Finds the variable in macro tokens: `var.key()`, `var.other()`,
    /// `var`, and `{var}` / `{var:?}` inside format strings.
    fn scan(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        for (at, tree) in trees.iter().enumerate() {
            match tree {
                TokenTree::Group(group) => self.scan(group.stream()),
                TokenTree::Ident(ident) if ident == self.var => {
                    let after_dot = match trees.get(at + 1) {
                        Some(TokenTree::Punct(dot)) if dot.as_char() == '.' => trees.get(at + 2),
                        _ => None,
                    };
                    match after_dot {
                        Some(TokenTree::Ident(method)) if method == "key" => {
                            self.usage.key_calls = true;
                        }
                        Some(TokenTree::Ident(_)) => self.usage.other_methods = true,
                        _ => self.usage.escapes = true,
                    }
                }
                TokenTree::Literal(literal) => {
                    if let Ok(Lit::Str(text)) = syn::parse2::<Lit>(literal.to_token_stream())
                        && formats_var(&text.value(), &self.var.to_string())
                    {
                        self.usage.escapes = true;
                    }
                }
                _ => {}
            }
        }
    }
}

/// Whether a format string names `var` inline: `"{var}"`, `"{var:?}"`.
fn formats_var(text: &str, var: &str) -> bool {
    text.match_indices('{').any(|(at, _)| {
        let rest = &text[at + 1..];
        rest.strip_prefix(var)
            .is_some_and(|after| after.starts_with('}') || after.starts_with(':'))
    })
}

/// Whether `expr` is the plain variable `var`.
pub(crate) fn is_var(expr: &Expr, var: &Ident) -> bool {
    match expr {
        Expr::Path(path) => path.qself.is_none() && path.path.is_ident(var),
        Expr::Paren(paren) => is_var(&paren.expr, var),
        Expr::Group(group) => is_var(&group.expr, var),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::formats_var;

    #[test]
    fn finds_inline_format_arguments() {
        assert!(formats_var("key={key}", "key"));
        assert!(formats_var("{key:?}", "key"));
        assert!(!formats_var("{keys}", "key"));
        assert!(!formats_var("key", "key"));
    }
}
