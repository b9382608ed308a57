//! A PostgreSQL cluster of the test's own that takes only TLS: made with
//! `initdb` in a temporary directory, with a CA, a server certificate for
//! `localhost` (and no other name) and a client certificate made by
//! `openssl`, `ssl = on`, `hostssl` lines only, on a free port; stopped
//! and removed when dropped.
//!
//! `initdb` refuses to run as root, so as root the cluster runs as the
//! `postgres` user (`runuser`). Without PostgreSQL's binaries or `openssl`
//! the test fails saying so, unless `SAGA_SKIP_TLS_TESTS=1`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "pg_cluster.rs"]
mod pg_cluster;

use pg_cluster::{Programs, free_port, output, set_mode};

/// The role that logs in with a client certificate only.
pub(crate) const CERT_USER: &str = "certuser";

/// A running TLS-only cluster.
pub(crate) struct TlsServer {
    dir: PathBuf,
    programs: Programs,
    pub(crate) port: u16,
}

impl TlsServer {
    /// Makes and starts the cluster; `None` when `SAGA_SKIP_TLS_TESTS=1`.
    pub(crate) fn start() -> Option<TlsServer> {
        if std::env::var("SAGA_SKIP_TLS_TESTS").as_deref() == Ok("1") {
            eprintln!("SAGA_SKIP_TLS_TESTS=1: the TLS tests do not run");
            return None;
        }
        let programs = Programs::find("the TLS tests");
        need("openssl", Command::new("openssl").arg("version"));
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("saga-tls-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let server = TlsServer {
            dir,
            programs,
            port: free_port(),
        };
        server.make_certificates();
        server.make_cluster();
        server.programs.pg_ctl(
            &server.dir.join("data"),
            &["start", "-w", "-t", "60", "-l", &server.path("log")],
        );
        server.psql(&format!(
            "CREATE ROLE {CERT_USER} LOGIN; GRANT CREATE ON DATABASE postgres TO {CERT_USER}"
        ));
        Some(server)
    }

    /// A file of the cluster's directory: `ca.pem`, `other-ca.pem`,
    /// `client.pem`, `client.key`.
    pub(crate) fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// Runs `sql` as the superuser, over TLS; what it printed.
    pub(crate) fn psql(&self, sql: &str) -> String {
        let conninfo = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=require",
            self.port
        );
        output(self.programs.command("psql").args([
            "-X",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            &conninfo,
            "-c",
            sql,
        ]))
    }

    fn make_certificates(&self) {
        let dir = &self.dir;
        let ca = |name: &str, subject: &str| {
            openssl(
                dir,
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-days",
                    "2",
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.pem"),
                    "-subj",
                    subject,
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                ],
            );
        };
        ca("ca", "/CN=saga test CA");
        ca("other-ca", "/CN=another CA");
        let signed = |name: &str, subject: &str, extensions: &str| {
            std::fs::write(dir.join(format!("{name}.ext")), extensions).unwrap();
            openssl(
                dir,
                &[
                    "req",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                    "-subj",
                    subject,
                ],
            );
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{name}.csr"),
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-out",
                    &format!("{name}.pem"),
                    "-extfile",
                    &format!("{name}.ext"),
                ],
            );
        };
        // For `localhost` only: a connection to 127.0.0.1 meets a
        // certificate for another name.
        signed(
            "server",
            "/CN=localhost",
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        );
        signed(
            "client",
            &format!("/CN={CERT_USER}"),
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
             extendedKeyUsage=clientAuth\n",
        );
    }

    fn make_cluster(&self) {
        self.programs.give(&self.dir);
        // PostgreSQL refuses a key others can read.
        set_mode(&self.dir.join("server.key"), 0o600);
        set_mode(&self.dir, 0o755);
        let conf = format!(
            "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{dir}'\n\
             ssl = on\nssl_cert_file = '{dir}/server.pem'\nssl_key_file = '{dir}/server.key'\n\
             ssl_ca_file = '{dir}/ca.pem'\nfsync = off\nshared_buffers = 16MB\nmax_connections = 40\n",
            port = self.port,
            dir = self.dir.display()
        );
        self.programs.initdb(&self.dir.join("data"), &conf);
        // TLS only, over TCP; the certificate user with its certificate
        // only.
        let hba = format!(
            "local all all trust\nhostssl all {CERT_USER} 127.0.0.1/32 cert\n\
             hostssl all all 127.0.0.1/32 trust\n"
        );
        std::fs::write(self.dir.join("data/pg_hba.conf"), hba).unwrap();
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.programs.stop(&self.dir.join("data"));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn need(what: &str, command: &mut Command) {
    if !command.output().is_ok_and(|o| o.status.success()) {
        panic!(
            "the TLS tests need {what} to make certificates: install it (Debian: apt-get install {what}), \
             or set SAGA_SKIP_TLS_TESTS=1 to skip these tests"
        );
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    run(Command::new("openssl").current_dir(dir).args(args));
}

fn run(command: &mut Command) {
    output(command);
}
