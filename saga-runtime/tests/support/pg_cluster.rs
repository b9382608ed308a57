//! PostgreSQL clusters the tests make for themselves: the programs
//! (`initdb`, `pg_ctl`, `psql`) found where Debian puts them or on the
//! `PATH`, run as the cluster's owner, and a cluster in a directory of
//! its own on a free port.
//!
//! `initdb` refuses to run as root, so as root a cluster belongs to the
//! `postgres` user, and its programs run through `runuser`. Without the
//! programs a test fails and says what to install: it never skips.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// PostgreSQL's programs, and who runs them.
pub(crate) struct Programs {
    bin: PathBuf,
    /// Run as `postgres`: the test runs as root.
    as_postgres: bool,
}

impl Programs {
    /// The newest `/usr/lib/postgresql/N/bin`, else `initdb` on the
    /// `PATH`; `who` says, if neither is there, which tests need them.
    pub(crate) fn find(who: &str) -> Programs {
        let as_postgres = output(Command::new("id").arg("-u")).trim() == "0";
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
            return Programs { bin, as_postgres };
        }
        let on_path = Command::new("sh")
            .args(["-c", "command -v initdb"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        match on_path {
            Some(initdb) if !initdb.is_empty() => Programs {
                bin: Path::new(&initdb).parent().unwrap().to_owned(),
                as_postgres,
            },
            _ => panic!(
                "{who} make a PostgreSQL cluster of their own and need initdb, pg_ctl and psql \
                 (in /usr/lib/postgresql/N/bin or on the PATH): install PostgreSQL's server \
                 (Debian: apt-get install postgresql), or point SAGA_TEST_DATABASE_URL at a database"
            ),
        }
    }

    /// A command that runs `program` (`initdb`, `pg_ctl`, ...) as the
    /// cluster's owner.
    pub(crate) fn command(&self, program: &str) -> Command {
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(self.bin.join(program));
            c
        } else {
            Command::new(self.bin.join(program))
        }
    }

    /// Runs `program` with `args` as the cluster's owner; its output.
    pub(crate) fn run(&self, program: &str, args: &[&str]) -> String {
        output(self.command(program).args(args))
    }

    /// Makes `dir` (and what is in it) the cluster owner's.
    pub(crate) fn give(&self, dir: &Path) {
        if self.as_postgres {
            output(
                Command::new("chown")
                    .args(["-R", "postgres:postgres"])
                    .arg(dir),
            );
        }
    }

    /// `initdb` of a cluster in `data`, trust authentication, superuser
    /// `postgres`, then `conf` added to its `postgresql.conf`.
    pub(crate) fn initdb(&self, data: &Path, conf: &str) {
        let data_arg = data.display().to_string();
        self.run(
            "initdb",
            &[
                "-D",
                &data_arg,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
        );
        append(&data.join("postgresql.conf"), conf);
    }

    /// `pg_ctl -D data args..`.
    pub(crate) fn pg_ctl(&self, data: &Path, args: &[&str]) -> String {
        let data_arg = data.display().to_string();
        let mut all = vec!["-D", &data_arg];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all)
    }

    /// `pg_ctl -m immediate stop`, whatever it answers.
    pub(crate) fn stop(&self, data: &Path) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(data)
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

/// Runs `command`; its standard output, or a panic with everything it said.
pub(crate) fn output(command: &mut Command) -> String {
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

pub(crate) fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

pub(crate) fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A port nothing listens on now.
pub(crate) fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
