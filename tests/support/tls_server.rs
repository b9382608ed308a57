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

/// The role that logs in with a client certificate only.
pub(crate) const CERT_USER: &str = "certuser";

/// A running TLS-only cluster.
pub(crate) struct TlsServer {
    dir: PathBuf,
    bin: PathBuf,
    /// Run PostgreSQL's programs as `postgres` (the test runs as root).
    as_postgres: bool,
    pub(crate) port: u16,
}

impl TlsServer {
    /// Makes and starts the cluster; `None` when `SAGA_SKIP_TLS_TESTS=1`.
    pub(crate) fn start() -> Option<TlsServer> {
        if std::env::var("SAGA_SKIP_TLS_TESTS").as_deref() == Ok("1") {
            eprintln!("SAGA_SKIP_TLS_TESTS=1: the TLS tests do not run");
            return None;
        }
        let bin = postgres_bin();
        need("openssl", Command::new("openssl").arg("version"));
        let as_postgres = output(Command::new("id").arg("-u")).trim() == "0";
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("saga-tls-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let server = TlsServer {
            dir,
            bin,
            as_postgres,
            port: free_port(),
        };
        server.make_certificates();
        server.make_cluster();
        server.pg_ctl(&["start", "-w", "-t", "60", "-l", &server.path("log")]);
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
        output(Command::new(self.bin.join("psql")).args([
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
        if self.as_postgres {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&self.dir));
        }
        // PostgreSQL refuses a key others can read.
        set_mode(&self.dir.join("server.key"), 0o600);
        set_mode(&self.dir, 0o755);
        let data = self.path("data");
        self.as_owner(
            self.bin.join("initdb"),
            &["-D", &data, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        );
        let conf = format!(
            "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{dir}'\n\
             ssl = on\nssl_cert_file = '{dir}/server.pem'\nssl_key_file = '{dir}/server.key'\n\
             ssl_ca_file = '{dir}/ca.pem'\nfsync = off\nshared_buffers = 16MB\nmax_connections = 40\n",
            port = self.port,
            dir = self.dir.display()
        );
        append(&self.dir.join("data/postgresql.conf"), &conf);
        // TLS only, over TCP; the certificate user with its certificate
        // only.
        let hba = format!(
            "local all all trust\nhostssl all {CERT_USER} 127.0.0.1/32 cert\n\
             hostssl all all 127.0.0.1/32 trust\n"
        );
        std::fs::write(self.dir.join("data/pg_hba.conf"), hba).unwrap();
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.path("data");
        let mut all = vec!["-D", &data];
        all.extend_from_slice(args);
        self.as_owner(self.bin.join("pg_ctl"), &all);
    }

    /// Runs one of PostgreSQL's programs as the cluster's owner.
    fn as_owner(&self, program: PathBuf, args: &[&str]) {
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        };
        run(command.args(args));
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let data = self.path("data");
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"));
            c
        } else {
            Command::new(self.bin.join("pg_ctl"))
        };
        let _ = command
            .args(["-D", &data, "-m", "immediate", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// PostgreSQL's programs: the newest `/usr/lib/postgresql/N/bin`, else
/// `initdb` on the `PATH`.
fn postgres_bin() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    let on_path = Command::new("sh")
        .args(["-c", "command -v initdb"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match on_path {
        Some(initdb) if !initdb.is_empty() => Path::new(&initdb).parent().unwrap().to_owned(),
        _ => panic!(
            "the TLS tests make a PostgreSQL cluster of their own and need initdb, pg_ctl and psql \
             (in /usr/lib/postgresql/N/bin or on the PATH; Debian: apt-get install postgresql), \
             and openssl. Install them, or set SAGA_SKIP_TLS_TESTS=1 to skip these tests"
        ),
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

/// Runs `command`; its standard output, or a panic with everything it said.
fn output(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("could not run {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
