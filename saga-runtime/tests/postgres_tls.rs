//! TLS to PostgreSQL, against a cluster of the test's own that takes only
//! TLS (see `support/tls_server.rs`): each `sslmode` connects, or is
//! refused with a typed error naming the host, as libpq's; where it
//! connects, workflow steps run, and every connection of the engine (the
//! writer, the readers, the LISTEN connection) is encrypted.
#![cfg(feature = "postgres")]

#[path = "support/tls_server.rs"]
mod tls_server;

use std::time::{Duration, Instant};

use saga_runtime::Error;
use saga_runtime::prelude::*;

use tls_server::{CERT_USER, TlsServer};

#[step(name = "greet")]
async fn greet(key: IdempotencyKey, name: String) -> Result<String, StepError> {
    Ok(format!("hello {name} ({})", key.as_str()))
}

#[step(name = "shout")]
async fn shout(key: IdempotencyKey, words: String) -> Result<String, StepError> {
    assert!(!key.as_str().is_empty());
    Ok(words.to_uppercase())
}

#[workflow(name = "greeting")]
async fn greeting(ctx: WorkflowContext, name: String) -> Result<String, WorkflowError> {
    let words = greet(&ctx, name).await?;
    Ok(shout(&ctx, words).await?)
}

/// Connects a worker at `url` into schema `case`, and runs a two-step
/// workflow to its end on it. Once it ran, every connection the engine
/// holds is TLS, the LISTEN connection among them.
async fn runs_workflows(server: &TlsServer, case: &str, url: &str) -> Result<(), Error> {
    let engine = Engine::builder()
        .postgres_schema(case)
        .register(greeting)
        .connect(url)
        .await?;
    let run = engine.start(greeting, case, "tls".to_owned()).await?;
    let out = tokio::time::timeout(Duration::from_secs(60), run.result())
        .await
        .expect("the workflow did not end within 60 s")?;
    assert!(out.starts_with("HELLO TLS ("), "{out}");
    let listed = engine.list(&ListFilter::default()).await?;
    assert_eq!(listed.len(), 1);
    let connections = server.psql(&format!(
        "SELECT count(*), count(*) FILTER (WHERE s.ssl),
                count(*) FILTER (WHERE s.ssl AND a.query LIKE 'LISTEN%')
         FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
         WHERE a.application_name = 'saga:{case}'"
    ));
    let counts: Vec<u32> = connections
        .trim()
        .split('|')
        .map(|n| n.parse().unwrap())
        .collect();
    let [all, encrypted, listening] = counts[..] else {
        panic!("{connections}")
    };
    assert!(all >= 3, "{case}: the engine holds {all} connections");
    assert_eq!(encrypted, all, "{case}: a connection is not encrypted");
    assert_eq!(listening, 1, "{case}: the LISTEN connection");
    engine.close().await;
    Ok(())
}

/// What a connection that must fail answers, and how long it took.
async fn refused(case: &str, url: &str) -> (Error, Duration) {
    let started = Instant::now();
    let connected = Engine::builder()
        .postgres_schema(case)
        .register(greeting)
        .connect(url)
        .await;
    match connected {
        Ok(_) => panic!("{case}: connected to {url}"),
        Err(e) => (e, started.elapsed()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sslmode_connects_or_is_refused_as_libpqs() {
    let Some(server) = TlsServer::start() else {
        return;
    };
    let port = server.port;
    let ca = server.path("ca.pem");
    let other_ca = server.path("other-ca.pem");
    let mut matrix = Vec::new();

    // require: encrypted, the certificate not checked.
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=require");
    runs_workflows(&server, "require", &url).await.unwrap();
    matrix.push("require, no root                          -> connects, TLS, steps run");

    // prefer (the default): the server offers TLS, so TLS.
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    runs_workflows(&server, "prefer", &url).await.unwrap();
    matrix.push("(no sslmode) = prefer                     -> connects, TLS, steps run");

    // verify-full with the right root, by the name in the certificate,
    // in the key-value form.
    let url = format!(
        "host=localhost port={port} user=postgres dbname=postgres sslmode=verify-full sslrootcert='{ca}'"
    );
    runs_workflows(&server, "verify_full", &url).await.unwrap();
    matrix.push("verify-full, right root, host localhost   -> connects, TLS, steps run");

    // verify-ca: the chain is checked, the name is not (127.0.0.1 is not
    // in the certificate).
    let url =
        format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=verify-ca&sslrootcert={ca}");
    runs_workflows(&server, "verify_ca", &url).await.unwrap();
    matrix.push("verify-ca, right root, host 127.0.0.1     -> connects, TLS, steps run");

    // A client certificate: the server lets certuser in with it only.
    let url = format!(
        "postgres://{CERT_USER}@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={ca}&sslcert={}&sslkey={}",
        server.path("client.pem"),
        server.path("client.key")
    );
    runs_workflows(&server, "client_cert", &url).await.unwrap();
    matrix.push("verify-full + sslcert/sslkey (cert auth)  -> connects, TLS, steps run");
    let url = format!(
        "postgres://{CERT_USER}@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={ca}"
    );
    let (error, _) = refused("no_client_cert", &url).await;
    assert!(
        matches!(&error, Error::DatabaseUnreachable { detail, .. } if detail.contains("certificate")),
        "{error:?}"
    );
    matrix.push("cert auth without sslcert                 -> Error::DatabaseUnreachable (the server's refusal)");

    // verify-full with a root that did not sign the server's certificate.
    let url = format!(
        "host=localhost port={port} user=postgres dbname=postgres sslmode=verify-full sslrootcert={other_ca}"
    );
    let (error, took) = refused("wrong_root", &url).await;
    assert!(
        matches!(&error, Error::TlsCertificate { host, .. } if host == "localhost"),
        "{error:?}"
    );
    assert!(error.to_string().contains("localhost"), "{error}");
    println!("wrong root: {error} ({took:?})");
    matrix.push("verify-full, wrong root                   -> Error::TlsCertificate { host: \"localhost\" }");

    // verify-full by a name the certificate does not hold.
    let url = format!(
        "postgres://postgres@127.0.0.1:{port}/postgres?sslmode=verify-full&sslrootcert={ca}"
    );
    let (error, took) = refused("wrong_host", &url).await;
    assert!(
        matches!(&error, Error::TlsCertificate { host, .. } if host == "127.0.0.1"),
        "{error:?}"
    );
    println!("wrong host name: {error} ({took:?})");
    matrix.push("verify-full, right root, host 127.0.0.1   -> Error::TlsCertificate { host: \"127.0.0.1\" }");

    // disable against a server that takes TLS only.
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable");
    let (error, took) = refused("disable", &url).await;
    assert!(
        matches!(&error, Error::TlsRequired { host } if host == "127.0.0.1"),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("the server requires TLS: use sslmode=require or verify-full"),
        "{error}"
    );
    println!("disable: {error} ({took:?})");
    matrix.push(
        "disable against the TLS-only server       -> Error::TlsRequired { host: \"127.0.0.1\" }",
    );

    // A root file that is not there is bad input, said at connect.
    let url = format!(
        "postgres://postgres@localhost:{port}/postgres?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"
    );
    let (error, _) = refused("missing_root", &url).await;
    assert!(
        matches!(&error, Error::InvalidArgument(m) if m.contains("/nonexistent/ca.pem")),
        "{error:?}"
    );
    matrix.push(
        "verify-full, sslrootcert file missing     -> Error::InvalidArgument naming the file",
    );

    println!("TLS matrix:");
    for line in matrix {
        println!("  {line}");
    }
}

/// A server that answers TLS's request with "no", as one with `ssl = off`
/// does: `require` is refused at once with a typed error, never sent in
/// plain text.
#[tokio::test]
async fn require_against_a_server_without_tls_is_a_typed_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 8];
        socket.read_exact(&mut request).await.unwrap();
        // SSLRequest: length 8, code 80877103.
        assert_eq!(request, [0, 0, 0, 8, 4, 210, 22, 47]);
        socket.write_all(b"N").await.unwrap();
        // Whatever comes next must not be a startup message in plain text.
        let mut next = Vec::new();
        socket.read_to_end(&mut next).await.unwrap();
        next
    });
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=require");
    let (error, _) = refused("no_tls", &url).await;
    assert!(
        matches!(&error, Error::TlsHandshake { host, .. } if host == "127.0.0.1"),
        "{error:?}"
    );
    assert!(server.await.unwrap().is_empty(), "sent in plain text");
}
