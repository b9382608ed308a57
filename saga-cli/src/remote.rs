//! `saga --url http://127.0.0.1:7070 COMMAND ..`: the command runs on a
//! running service's admin endpoint (`saga_cli::serve`), which holds its
//! store, instead of on a store this process opens.
//!
//! A small HTTP/1.1 client over a plain TCP connection, enough for the
//! endpoint (one request, `Connection: close`): the endpoint binds
//! loopback; put TLS in front of it for anything else.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use saga_cli::{CliError, TOKEN_VAR};

/// How long the endpoint may take to answer one command.
const PATIENCE: Duration = Duration::from_secs(120);

/// Runs the command of `args` (the command line without the program name
/// and the store options) on the endpoint at `url`; writes its output.
pub(crate) fn run(url: &str, args: &[String], out: &mut impl Write) -> Result<(), CliError> {
    let Endpoint { addr, host, path } = split(url)?;
    let body = serde_json::json!({ "args": args }).to_string();
    // Host as the URL gives it: the endpoint checks it against its own
    // address, `localhost` and the names it allows.
    let mut request = format!(
        "POST {path}v1/command HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(token) = std::env::var(TOKEN_VAR).ok().filter(|t| !t.is_empty()) {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    let unreachable = |e: std::io::Error| {
        CliError::usage(format!("cannot reach the admin endpoint at {url}: {e}"))
    };
    let mut stream = TcpStream::connect(&addr).map_err(unreachable)?;
    stream
        .set_read_timeout(Some(PATIENCE))
        .map_err(unreachable)?;
    stream.write_all(request.as_bytes()).map_err(unreachable)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).map_err(unreachable)?;
    let answer = body_of(&response)
        .ok_or_else(|| CliError::usage(format!("the answer of {url} is not HTTP")))?;
    let answer: serde_json::Value = serde_json::from_slice(&answer).map_err(|e| {
        CliError::usage(format!(
            "the answer of {url} is not the admin endpoint's JSON ({e}): is it a saga admin endpoint?"
        ))
    })?;
    if let Some(output) = answer["output"].as_str() {
        write!(out, "{output}")?;
    }
    let code = answer["code"].as_u64().unwrap_or(2);
    if code == 0 {
        return Ok(());
    }
    let error = answer["error"]
        .as_str()
        .unwrap_or("the endpoint refused the command");
    Err(CliError::with_code(error, u8::try_from(code).unwrap_or(2)))
}

/// Where an `http://` URL points.
#[derive(Debug, PartialEq)]
struct Endpoint {
    /// `host:port`, to connect to (port 80 when the URL gives none).
    addr: String,
    /// The host as the URL gives it, for the `Host` header.
    host: String,
    /// The path prefix, ending in `/`.
    path: String,
}

fn split(url: &str) -> Result<Endpoint, CliError> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(CliError::usage(format!(
            "--url {url:?}: give an http:// address of the admin endpoint, e.g. http://127.0.0.1:7070 (for https, put a proxy on this machine's loopback)"
        )));
    };
    let (host, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    if host.is_empty() {
        return Err(CliError::usage(format!("--url {url:?} names no host")));
    }
    let addr = if host.contains(':') && !host.ends_with(']') {
        host.to_owned()
    } else {
        format!("{host}:80")
    };
    let path = if path.ends_with('/') {
        path.to_owned()
    } else {
        format!("{path}/")
    };
    Ok(Endpoint {
        addr,
        host: host.to_owned(),
        path,
    })
}

/// The body of an HTTP/1.1 response: sized by `Content-Length`, chunked,
/// or up to the end of the connection.
fn body_of(response: &[u8]) -> Option<Vec<u8>> {
    let end = response.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&response[..end]).ok()?;
    let body = &response[end + 4..];
    if !head.starts_with("HTTP/1.") {
        return None;
    }
    let header = |name: &str| {
        head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    };
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut out = Vec::new();
        let mut rest = body;
        loop {
            let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
            let size = std::str::from_utf8(&rest[..line_end]).ok()?;
            let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
            rest = &rest[line_end + 2..];
            if size == 0 {
                return Some(out);
            }
            out.extend_from_slice(rest.get(..size)?);
            rest = rest.get(size + 2..)?;
        }
    }
    match header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        Some(length) => body.get(..length).map(<[u8]>::to_vec),
        None => Some(body.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_host_and_prefix() {
        let at = |addr: &str, host: &str, path: &str| Endpoint {
            addr: addr.into(),
            host: host.into(),
            path: path.into(),
        };
        assert_eq!(
            split("http://127.0.0.1:7070").unwrap(),
            at("127.0.0.1:7070", "127.0.0.1:7070", "/")
        );
        assert_eq!(
            split("http://admin.local/saga").unwrap(),
            at("admin.local:80", "admin.local", "/saga/")
        );
        assert_eq!(split("https://x").unwrap_err().exit_code(), 2);
    }

    #[test]
    fn bodies_are_read_by_length_or_chunks() {
        let sized = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(body_of(sized).unwrap(), b"{}");
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
        assert_eq!(body_of(chunked).unwrap(), b"{}");
        assert!(body_of(b"garbage").is_none());
    }
}
