//! The rules for workflow, step, sleep and event names: string literals of
//! `[a-z0-9][a-z0-9-]*`, at most 64 characters, with nothing that looks like a
//! date or a timestamp. A name is the key of a step's stored history, so a name
//! that changes between runs or releases makes replay lose its place.

use syn::{Expr, Lit, LitStr};

/// The longest name accepted.
const MAX_LEN: usize = 64;

/// What a name names, for messages: "step name", "sleep name", ...
pub(crate) type Kind = &'static str;

/// Requires `expr` to be a string literal and checks it; returns the literal.
pub(crate) fn literal(expr: &Expr, kind: Kind) -> syn::Result<LitStr> {
    match expr {
        Expr::Lit(lit) => match &lit.lit {
            Lit::Str(name) => Ok(name.clone()),
            _ => Err(not_literal(expr, kind, "this literal is not a string")),
        },
        Expr::Group(group) => literal(&group.expr, kind),
        Expr::Macro(mac) => {
            let macro_name = mac
                .mac
                .path
                .segments
                .last()
                .map(|segment| segment.ident.to_string())
                .unwrap_or_default();
            Err(not_literal(
                expr,
                kind,
                &format!("`{macro_name}!(..)` computes it when the program is built or run"),
            ))
        }
        Expr::Path(_) => Err(not_literal(
            expr,
            kind,
            "a variable or constant can change without anyone noticing",
        )),
        _ => Err(not_literal(expr, kind, "it is computed")),
    }
}

fn not_literal(expr: &Expr, kind: Kind, why: &str) -> syn::Error {
    syn::Error::new_spanned(
        expr,
        format!(
            "the {kind} must be a string literal such as \"charge-card\": {why}, and a name \
             that changes between runs or releases breaks the replay of stored workflows"
        ),
    )
}

/// Checks the spelling of a name literal.
pub(crate) fn check(name: &LitStr, kind: Kind) -> syn::Result<()> {
    let text = name.value();
    let problem = if text.is_empty() {
        Some(format!(
            "the {kind} is empty: give it a fixed name such as \"charge-card\""
        ))
    } else if text.chars().count() > MAX_LEN {
        Some(format!(
            "the {kind} {text:?} is {} characters long, more than the limit of {MAX_LEN}: \
             shorten it",
            text.chars().count()
        ))
    } else if let Some(bad) = bad_char(&text) {
        Some(format!(
            "the {kind} {text:?} contains {bad:?}: names use lowercase letters a-z, digits \
             and `-`, and start with a letter or digit; write {:?}",
            suggest_spelling(&text)
        ))
    } else {
        date_like_run(&text).map(|(start, digits)| {
            let fixed = text[..start].trim_end_matches('-');
            let fixed = if fixed.is_empty() { "import" } else { fixed };
            format!(
                "the {kind} {text:?} embeds a date or timestamp ({digits}): a name must be \
                 the same on every run and replay of a workflow; use a fixed name such as \
                 {fixed:?} and pass the date as an input"
            )
        })
    };
    match problem {
        Some(message) => Err(syn::Error::new(name.span(), message)),
        None => Ok(()),
    }
}

/// The first character outside the name alphabet, or a leading `-`.
fn bad_char(text: &str) -> Option<char> {
    text.chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
        .or_else(|| text.chars().next().filter(|c| *c == '-'))
}

/// `text` lowercased with every other character turned into single `-`s.
fn suggest_spelling(text: &str) -> String {
    let mut fixed = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            fixed.push(c.to_ascii_lowercase());
        } else if !fixed.is_empty() && !fixed.ends_with('-') {
            fixed.push('-');
        }
    }
    let fixed = fixed.trim_end_matches('-');
    if fixed.is_empty() {
        "charge-card".to_owned()
    } else {
        fixed.to_owned()
    }
}

/// The first run of digits that looks like a date or a timestamp: six or
/// more digits (`20240131`, `1706659200`), or a year 1900–2099 (`2024-01-31`,
/// `v2024`). Returns its byte offset and the digits.
fn date_like_run(text: &str) -> Option<(usize, &str)> {
    let mut rest = text;
    let mut offset = 0;
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        let run_len = rest[start..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len() - start);
        let run = &rest[start..start + run_len];
        let is_year = run.len() == 4 && (run.starts_with("19") || run.starts_with("20"));
        if run.len() >= 6 || is_year {
            return Some((offset + start, run));
        }
        offset += start + run_len;
        rest = &rest[start + run_len..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{date_like_run, suggest_spelling};

    #[test]
    fn finds_dates_and_timestamps() {
        assert_eq!(date_like_run("report-2024-01-31"), Some((7, "2024")));
        assert_eq!(date_like_run("import-20240131"), Some((7, "20240131")));
        assert_eq!(date_like_run("sync-1706659200"), Some((5, "1706659200")));
        assert_eq!(date_like_run("v2024-migration"), Some((1, "2024")));
        assert_eq!(date_like_run("step-1-of-3"), None);
        assert_eq!(date_like_run("s3-upload-404"), None);
        assert_eq!(date_like_run("retry-12345"), None);
    }

    #[test]
    fn suggests_a_valid_spelling() {
        assert_eq!(suggest_spelling("Debit_Bank A"), "debit-bank-a");
        assert_eq!(suggest_spelling("--x"), "x");
        assert_eq!(suggest_spelling("__"), "charge-card");
    }
}
