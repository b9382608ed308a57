//! TLS for every connection of the store (rustls, with the ring
//! provider): the verifier each `sslmode` asks for, and what a refused
//! handshake means.
//!
//! | `sslmode` | encrypted | certificate checked |
//! | --- | --- | --- |
//! | `disable` | no | - |
//! | `prefer` (default) | if the server offers it | no |
//! | `require` | yes | no (as `verify-ca` when `sslrootcert` names a file, as libpq) |
//! | `verify-ca` | yes | chains to a trusted root |
//! | `verify-full` | yes | chains to a trusted root and names the host |
//!
//! `require` and `prefer` keep libpq's meaning: they encrypt, but anyone
//! on the path who can present any certificate can read the traffic. Use
//! `verify-full` against a database across a network.
//!
//! Trusted roots are the file `sslrootcert` names (PEM), or the operating
//! system's (rustls-native-certs: `/etc/ssl/certs` and friends, or
//! `SSL_CERT_FILE`), read once when the engine connects. A certificate
//! that does not verify is [`Error::TlsCertificate`], never retried and
//! never a fall back to plain text (`prefer` falls back only when the
//! server offers no TLS at all, as libpq's does).

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::ssl_options::{Roots, SslMode, SslOptions};
use crate::error::{Error, Result};

/// The TLS side of a store connection.
pub(super) type Stream = <MakeRustlsConnect as MakeTlsConnect<tokio_postgres::Socket>>::Stream;

/// The connector every connection of the store uses; with
/// `sslmode=disable` tokio-postgres never calls it.
pub(super) fn connector(options: &SslOptions) -> Result<MakeRustlsConnect> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Arc<dyn ServerCertVerifier> = match (options.mode, &options.roots) {
        (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, Roots::System) => {
            Arc::new(Lenient {
                chain: None,
                algorithms,
            })
        }
        (SslMode::Require | SslMode::VerifyCa, roots) => Arc::new(Lenient {
            chain: Some(web_pki(roots, &provider)?),
            algorithms,
        }),
        (SslMode::VerifyFull, roots) => web_pki(roots, &provider)?,
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| setup(format!("rustls refused its own protocol versions: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match &options.client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(certificates(cert, "sslcert")?, private_key(key)?)
            .map_err(|e| {
                setup(format!(
                    "sslcert {} and sslkey {} do not make a client certificate: {e}",
                    cert.display(),
                    key.display()
                ))
            })?,
    };
    Ok(MakeRustlsConnect::new(config))
}

/// rustls's verifier of chain and host name, over `roots`.
fn web_pki(roots: &Roots, provider: &Arc<CryptoProvider>) -> Result<Arc<WebPkiServerVerifier>> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::File(path) => {
            for cert in certificates(path, "sslrootcert")? {
                store.add(cert).map_err(|e| {
                    setup(format!(
                        "sslrootcert {} holds a certificate that cannot be a root: {e}",
                        path.display()
                    ))
                })?;
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
                return Err(setup(format!(
                    "found no root certificates in the system's store ({}): give the CA's certificate with sslrootcert=/path/to/ca.pem",
                    errors.join("; ")
                )));
            }
        }
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
        .build()
        .map_err(|e| setup(format!("could not build the certificate verifier: {e}")))
}

/// The certificates of a PEM file; none is an error (a key file given as
/// `sslrootcert`, a DER file).
fn certificates(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| setup(format!("{key} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(setup(format!(
            "{key} {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        setup(format!(
            "sslkey {}: {e} (a PEM key, PKCS#8, PKCS#1 or SEC1, not encrypted)",
            path.display()
        ))
    })
}

fn setup(detail: String) -> Error {
    Error::InvalidArgument(format!("TLS to PostgreSQL: {detail}"))
}

/// A verifier that checks less than rustls's: the chain to a trusted
/// root only (`verify-ca`; rustls checks the chain before the name, so a
/// name error means the chain was good), or nothing (`prefer`, `require`:
/// libpq's meaning). The handshake's signatures are checked against the
/// certificate either way, so the server holds its key.
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            verified => verified,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// What a failed connection attempt means for TLS, if anything: a
/// certificate that did not verify, a handshake that failed, or a server
/// that takes only TLS asked for plain text. Each is for good: no new
/// attempt mends it. `None`: not a TLS matter (see `fault`).
pub(super) fn refusal(error: &tokio_postgres::Error, mode: SslMode, host: &str) -> Option<Error> {
    if let Some(db) = error.as_db_error() {
        // "no pg_hba.conf entry for host ..., no encryption"
        let plain_refused = db.code().code() == "28000" && db.message().ends_with("no encryption");
        return (plain_refused && mode == SslMode::Disable).then(|| Error::TlsRequired {
            host: host.to_owned(),
        });
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        // An `io::Error`'s `source` skips the error it wraps.
        let wrapped = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        if let Some(tls) = e.downcast_ref::<rustls::Error>().or(wrapped) {
            return Some(match tls {
                rustls::Error::InvalidCertificate(why) => Error::TlsCertificate {
                    host: host.to_owned(),
                    detail: match why {
                        CertificateError::UnknownIssuer => {
                            "no trusted root signed it (UnknownIssuer)".to_owned()
                        }
                        why => why.to_string(),
                    },
                },
                other => Error::TlsHandshake {
                    host: host.to_owned(),
                    detail: other.to_string(),
                },
            });
        }
        // tokio-postgres's own words when the server answers TLS with "no".
        if e.to_string() == "server does not support TLS" {
            return Some(Error::TlsHandshake {
                host: host.to_owned(),
                detail: "the server does not offer TLS, and the sslmode requires it".into(),
            });
        }
        source = e.source();
    }
    None
}
