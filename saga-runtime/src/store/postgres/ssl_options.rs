//! The TLS options of a connection string, with libpq's meaning, taken
//! out of it before tokio-postgres reads the rest.
//!
//! tokio-postgres knows `sslmode=disable|prefer|require` and nothing of
//! certificates, and refuses every option it does not know. So the store
//! takes `sslmode`, `sslrootcert`, `sslcert` and `sslkey` out of the URL
//! itself, in both of libpq's forms (`postgres://host/db?sslmode=verify-full`
//! and `host=db sslmode=verify-full`), and hands the rest on unchanged.
//! What each mode verifies is decided in [`super::tls`].

use std::path::PathBuf;

use crate::error::{Error, Result};

/// libpq's `sslmode`: how much of TLS a connection insists on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SslMode {
    /// Plain text only.
    Disable,
    /// TLS when the server offers it, else plain text; the certificate is
    /// not verified. libpq's default, and so the default here.
    Prefer,
    /// TLS or nothing; the certificate is not verified (unless a root
    /// certificate is given: then as `VerifyCa`, as libpq does).
    Require,
    /// TLS, with a certificate that chains to a trusted root.
    VerifyCa,
    /// TLS, with a certificate that chains to a trusted root and names the
    /// host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(Error::InvalidArgument(
                    "sslmode=allow (plain text first, TLS if refused) is not supported: use sslmode=prefer, require or verify-full".into(),
                ));
            }
            other => {
                return Err(Error::InvalidArgument(format!(
                    "sslmode={other:?} in the PostgreSQL URL: use disable, prefer, require, verify-ca or verify-full"
                )));
            }
        })
    }

    /// What tokio-postgres is told: it only negotiates TLS, and the
    /// verifier that [`super::tls`] gives it checks what the mode asks.
    pub(super) fn negotiation(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }
}

/// Where trusted root certificates come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Roots {
    /// The operating system's store (`sslrootcert=system`, or none given).
    System,
    /// A PEM file of one or more certificates (`sslrootcert=/path`).
    File(PathBuf),
}

/// The TLS options of one connection string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SslOptions {
    pub(super) mode: SslMode,
    pub(super) roots: Roots,
    /// `sslcert` and `sslkey`: a client certificate, with its key.
    pub(super) client: Option<(PathBuf, PathBuf)>,
}

/// The keys taken out of a connection string.
const SSLMODE: &str = "sslmode";
const SSLROOTCERT: &str = "sslrootcert";
const SSLCERT: &str = "sslcert";
const SSLKEY: &str = "sslkey";
const TAKEN: [&str; 4] = [SSLMODE, SSLROOTCERT, SSLCERT, SSLKEY];

/// Splits `url` into the connection string tokio-postgres reads (without
/// the TLS options) and the TLS options. A key given twice counts once,
/// the last time, as in libpq.
pub(super) fn split(url: &str) -> Result<(String, SslOptions)> {
    let (rest, taken) = match url_query(url) {
        Some(query_at) => take_from_query(url, query_at),
        None => take_from_pairs(url),
    };
    let mut mode = None;
    let mut roots = None;
    let mut cert = None;
    let mut key = None;
    for (k, v) in taken {
        match k {
            SSLMODE => mode = Some(SslMode::parse(&v)?),
            SSLROOTCERT if v == "system" => roots = Some(Roots::System),
            SSLROOTCERT => roots = Some(Roots::File(PathBuf::from(v))),
            SSLCERT => cert = Some(PathBuf::from(v)),
            _ => key = Some(PathBuf::from(v)),
        }
    }
    let client = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            return Err(Error::InvalidArgument(
                "the PostgreSQL URL gives only one of sslcert and sslkey: a client certificate needs both (PEM files)".into(),
            ));
        }
    };
    let options = SslOptions {
        mode: mode.unwrap_or(SslMode::Prefer),
        roots: roots.unwrap_or(Roots::System),
        client,
    };
    Ok((rest, options))
}

/// Where the query of a `postgres://` URL starts (its `?`), if it is one
/// and has one. As tokio-postgres reads it: the credentials end at the
/// first `@`, and the query starts at the first `?` after them.
fn url_query(url: &str) -> Option<usize> {
    let body = ["postgres://", "postgresql://"]
        .iter()
        .find_map(|prefix| url.strip_prefix(prefix).map(|_| prefix.len()))?;
    let after_credentials = url[body..].find('@').map_or(body, |at| body + at + 1);
    url[after_credentials..]
        .find('?')
        .map(|q| after_credentials + q)
}

/// `postgres://...?a=1&sslmode=verify-full&b=2`: the query's pairs are
/// percent-decoded; the others are kept as they were written.
fn take_from_query(url: &str, query_at: usize) -> (String, Vec<(&'static str, String)>) {
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for pair in url[query_at + 1..].split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match ours(&decode(k)) {
            Some(k) => taken.push((k, decode(v))),
            None => kept.push(pair),
        }
    }
    let mut rest = url[..query_at].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    (rest, taken)
}

/// `host=db sslmode='verify-full' ...`: libpq's key-value form, values
/// bare or single-quoted, `\` escaping the next character. Pairs not
/// taken are kept as written; a string that does not parse is handed on
/// whole, for tokio-postgres to say what is wrong with it.
fn take_from_pairs(url: &str) -> (String, Vec<(&'static str, String)>) {
    let Some(pairs) = pairs(url) else {
        return (url.to_owned(), Vec::new());
    };
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for pair in pairs {
        match ours(pair.key) {
            Some(k) => taken.push((k, pair.value)),
            None => kept.push(pair.text),
        }
    }
    (kept.join(" "), taken)
}

fn ours(key: &str) -> Option<&'static str> {
    TAKEN.into_iter().find(|k| *k == key)
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// One `key = value` of the key-value form.
struct Pair<'a> {
    key: &'a str,
    value: String,
    /// The pair as written.
    text: &'a str,
}

fn pairs(s: &str) -> Option<Vec<Pair<'_>>> {
    let mut pairs = Vec::new();
    let mut at = 0;
    loop {
        at = skip_spaces(s, at);
        if at == s.len() {
            return Some(pairs);
        }
        let start = at;
        let key_end = s[at..]
            .find(|c: char| c == '=' || c.is_whitespace())
            .map_or(s.len(), |i| at + i);
        let key = &s[at..key_end];
        at = skip_spaces(s, key_end);
        if key.is_empty() || !s[at..].starts_with('=') {
            return None;
        }
        at = skip_spaces(s, at + 1);
        let (value, end) = value(s, at)?;
        pairs.push(Pair {
            key,
            value,
            text: &s[start..end],
        });
        at = end;
    }
}

fn skip_spaces(s: &str, at: usize) -> usize {
    s[at..]
        .find(|c: char| !c.is_whitespace())
        .map_or(s.len(), |i| at + i)
}

/// A value starting at `at`, and where it ends.
fn value(s: &str, at: usize) -> Option<(String, usize)> {
    let quoted = s[at..].starts_with('\'');
    let mut value = String::new();
    let mut chars = s[at..].char_indices().skip(usize::from(quoted));
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => value.push(chars.next()?.1),
            '\'' if quoted => return Some((value, at + i + 1)),
            c if c.is_whitespace() && !quoted => return Some((value, at + i)),
            c => value.push(c),
        }
    }
    (!quoted && !value.is_empty()).then_some((value, s.len()))
}

#[cfg(test)]
mod tests {
    use super::{Roots, SslMode, split};
    use std::path::PathBuf;

    #[test]
    fn a_url_query_loses_the_tls_options_and_keeps_the_rest() {
        let (rest, options) = split(
            "postgres://u:p%3F@db.example.com:5433/app?connect_timeout=3&sslmode=verify-full&sslrootcert=%2Fetc%2Fssl%2Frds.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://u:p%3F@db.example.com:5433/app?connect_timeout=3&application_name=x"
        );
        assert_eq!(options.mode, SslMode::VerifyFull);
        assert_eq!(
            options.roots,
            Roots::File(PathBuf::from("/etc/ssl/rds.pem"))
        );
        assert_eq!(options.client, None);
    }

    #[test]
    fn a_url_with_only_tls_options_loses_its_question_mark() {
        let (rest, options) = split("postgresql://db/app?sslmode=verify-ca").unwrap();
        assert_eq!(rest, "postgresql://db/app");
        assert_eq!(options.mode, SslMode::VerifyCa);
        assert_eq!(options.roots, Roots::System);
    }

    #[test]
    fn key_value_pairs_lose_the_tls_options_quoted_or_not() {
        let (rest, _) = split(
            "host=db  sslmode = 'verify-full' sslrootcert='/a dir/ca.pem' password='it\\'s' dbname=app",
        )
        .unwrap();
        assert_eq!(rest, "host=db password='it\\'s' dbname=app");
        // Not the key-value form: handed on whole, for tokio-postgres to
        // say what is wrong.
        let (rest, _) = split("host=db sslmode").unwrap();
        assert_eq!(rest, "host=db sslmode");
        let (_, options) = split(
            "host=db sslmode=verify-full sslrootcert='/a dir/ca.pem' sslcert=/c.pem sslkey=/k\\ ey.pem",
        )
        .unwrap();
        assert_eq!(options.mode, SslMode::VerifyFull);
        assert_eq!(options.roots, Roots::File(PathBuf::from("/a dir/ca.pem")));
        assert_eq!(
            options.client,
            Some((PathBuf::from("/c.pem"), PathBuf::from("/k ey.pem")))
        );
    }

    #[test]
    fn the_default_is_libpqs_prefer_with_the_systems_roots() {
        let (rest, options) = split("postgres://postgres@127.0.0.1:5432/test").unwrap();
        assert_eq!(rest, "postgres://postgres@127.0.0.1:5432/test");
        assert_eq!(options.mode, SslMode::Prefer);
        assert_eq!(options.roots, Roots::System);
        let (_, options) = split("host=db sslrootcert=system sslmode=require").unwrap();
        assert_eq!(options.roots, Roots::System);
        assert_eq!(options.mode, SslMode::Require);
    }

    #[test]
    fn bad_tls_options_are_refused_saying_what_to_use() {
        for url in [
            "postgres://db/app?sslmode=verify",
            "host=db sslmode=allow",
            "host=db sslcert=/c.pem",
        ] {
            let error = split(url).unwrap_err().to_string();
            assert!(
                error.contains("sslmode") || error.contains("sslkey"),
                "{url}: {error}"
            );
        }
    }
}
