//! Durations written in attributes and workflow bodies: `"30 seconds"`,
//! `"2 minutes"`, `"7 days"`, `"500 ms"`, or integer milliseconds. The grammar
//! is the runtime's (`saga_runtime`'s `IntoDuration for &str`), checked here
//! at compile time.

use syn::{Expr, Lit};

/// An example of the accepted syntax, for error messages.
pub(crate) const EXAMPLES: &str = "write e.g. \"500 ms\", \"30 seconds\", \"2 minutes\", \"1 hour\", \"7 days\", \"1 week\", or an integer of milliseconds";

/// Units and their length in milliseconds.
const UNITS: &[(&[&str], u64)] = &[
    (&["ms", "millisecond", "milliseconds"], 1),
    (&["s", "sec", "second", "seconds"], 1_000),
    (&["min", "minute", "minutes"], 60_000),
    (&["h", "hour", "hours"], 3_600_000),
    (&["d", "day", "days"], 86_400_000),
    (&["w", "week", "weeks"], 604_800_000),
];

/// Parses `"<count> <unit>"` into milliseconds, or says what is wrong.
pub(crate) fn parse_millis(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (count, unit) = (&text[..digits_end], text[digits_end..].trim());
    if count.is_empty() {
        return Err("expected a number followed by a unit".to_owned());
    }
    let count: u64 = count.parse().map_err(|_| format!("{count} is too large"))?;
    let unit_millis = if unit.is_empty() {
        1
    } else {
        UNITS
            .iter()
            .find(|(names, _)| names.contains(&unit))
            .map(|(_, millis)| *millis)
            .ok_or_else(|| format!("unknown unit `{unit}`"))?
    };
    count
        .checked_mul(unit_millis)
        .ok_or_else(|| "it is too long".to_owned())
}

/// Checks a duration argument given as an expression: string and integer
/// literals are parsed now; anything else is left to the runtime.
pub(crate) fn check_literal(expr: &Expr) -> syn::Result<()> {
    if let Expr::Lit(lit) = expr {
        from_lit(&lit.lit)?;
    }
    Ok(())
}

/// Milliseconds of a string or integer literal.
pub(crate) fn from_lit(lit: &Lit) -> syn::Result<u64> {
    match lit {
        Lit::Str(text) => parse_millis(&text.value()).map_err(|reason| {
            syn::Error::new(
                text.span(),
                format!("invalid duration {:?}: {reason}; {EXAMPLES}", text.value()),
            )
        }),
        Lit::Int(millis) => millis.base10_parse::<u64>(),
        other => Err(syn::Error::new(
            other.span(),
            format!("expected a duration string; {EXAMPLES}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_millis;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse_millis("30 seconds"), Ok(30_000));
        assert_eq!(parse_millis("2 minutes"), Ok(120_000));
        assert_eq!(parse_millis("7 days"), Ok(7 * 86_400_000));
        assert_eq!(parse_millis("1 second"), Ok(1_000));
        assert_eq!(parse_millis("500 ms"), Ok(500));
        assert_eq!(parse_millis("500 milliseconds"), Ok(500));
        assert_eq!(parse_millis("1 hour"), Ok(3_600_000));
        assert_eq!(parse_millis("1 week"), Ok(604_800_000));
        assert_eq!(parse_millis("250"), Ok(250));
        assert_eq!(parse_millis("10s"), Ok(10_000));
    }

    #[test]
    fn rejects_the_rest() {
        assert!(parse_millis("3 fortnights").is_err());
        assert!(parse_millis("seconds").is_err());
        assert!(parse_millis("").is_err());
        assert!(parse_millis("1.5 seconds").is_err());
        assert!(parse_millis("99999999999999999999 days").is_err());
        assert!(parse_millis("9999999999999999 weeks").is_err());
    }
}
