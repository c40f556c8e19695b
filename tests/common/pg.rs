//! A real PostgreSQL server for tests: the one `FERROHSM_TEST_PG_URL` names (an account that
//! may create databases), else a private cluster of this test process (its own data
//! directory under a temporary directory, its own port on 127.0.0.1, stopped when dropped).
//! Each test makes its own database. Debian's `postgresql` package is required: without it
//! the test fails, it is never skipped.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The password of the `postgres` role in a private cluster; TCP logins need it
/// (scram-sha-256), so tests go through `store.password_file` as deployments do.
pub const PASSWORD: &str = "pg-test-secret-3f9a";

pub struct Pg {
    /// `postgresql://user@host:port` of an account that may create databases, no password.
    base: String,
    password: Option<String>,
    /// A private cluster: its data directory, port and binaries; `None` for an external one.
    private: Option<Private>,
}

struct Private {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// More `-c name=value` server settings.
    extra: String,
}

/// Debian's newest installed PostgreSQL binaries.
fn bin_dir() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, b)| b)
        .expect("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): apt-get install postgresql, as .ci/run does")
}

/// Runs a PostgreSQL program as the `postgres` user (initdb and pg_ctl refuse root).
fn as_postgres(dir: &Path, program: &Path, args: &[&str]) -> std::process::Output {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(program)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("runuser");
    assert!(
        out.status.success(),
        "{} {args:?} failed:\n{}\n{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Pg {
    /// The external server, or a private cluster.
    pub fn start() -> Pg {
        match std::env::var("FERROHSM_TEST_PG_URL") {
            Ok(url) if !url.is_empty() => Pg {
                base: url.trim_end_matches('/').to_string(),
                password: std::env::var("PGPASSWORD").ok(),
                private: None,
            },
            _ => Self::private(),
        }
    }

    /// A private cluster even when an external server is named (tests that restart it).
    pub fn private() -> Pg {
        Self::private_with(|_| String::new())
    }

    /// A private cluster with more server settings, made by `extra` from the cluster's
    /// directory (owned by `postgres`) before the server starts: `-c ssl=on ...`.
    pub fn private_with(extra: impl FnOnce(&Path) -> String) -> Pg {
        let bin = bin_dir();
        let dir = tempfile::tempdir().unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let chown = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(chown.success(), "chown postgres {}", dir.path().display());
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, PASSWORD).unwrap();
        let p = |x: &str| dir.path().join(x).display().to_string();
        as_postgres(
            dir.path(),
            &bin.join("initdb"),
            &[
                "-D",
                &p("data"),
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--pwfile",
                &p("pw"),
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        let port = free_port();
        let extra = extra(dir.path());
        let pg = Pg {
            base: format!("postgresql://postgres@127.0.0.1:{port}"),
            password: Some(PASSWORD.to_string()),
            private: Some(Private {
                dir,
                bin,
                port,
                extra,
            }),
        };
        pg.ctl(&["start"]);
        pg
    }

    /// pg_ctl on the private cluster, waiting for it.
    fn ctl(&self, what: &[&str]) {
        let Some(p) = &self.private else {
            panic!("pg_ctl needs a private cluster (Pg::private)");
        };
        let dir = p.dir.path();
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off -c max_connections=200 {}",
            p.port,
            dir.display(),
            p.extra
        );
        let mut args = vec!["-D", "data", "-w", "-t", "60", "-l", "log", "-o", &opts];
        args.extend(what);
        as_postgres(dir, &p.bin.join("pg_ctl"), &args);
    }

    /// Stops the private cluster (fast: sessions are cut, as in a server crash or restart).
    pub fn stop(&self) {
        self.ctl(&["-m", "fast", "stop"]);
    }

    pub fn start_again(&self) {
        self.ctl(&["start"]);
    }

    pub fn restart(&self) {
        self.ctl(&["-m", "fast", "restart"]);
    }

    /// The server's own log (private cluster).
    pub fn server_log(&self) -> String {
        self.private
            .as_ref()
            .map(|p| std::fs::read_to_string(p.dir.path().join("log")).unwrap_or_default())
            .unwrap_or_default()
    }

    /// The port of the private cluster.
    pub fn port(&self) -> Option<u16> {
        self.private.as_ref().map(|p| p.port)
    }

    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// A client of the maintenance database, for test set-up.
    fn admin(&self, db: &str) -> postgres::Client {
        let mut c: postgres::Config = format!("{}/{db}", self.base).parse().unwrap();
        if let Some(p) = &self.password {
            c.password(p);
        }
        c.connect(postgres::NoTls)
            .unwrap_or_else(|e| panic!("cannot connect to the test server {}: {e}", self.base))
    }

    /// A new, empty database with a name of its own; its URL (no password).
    pub fn database(&self, name: &str) -> String {
        let name = format!("{name}_{}_{}", std::process::id(), free_port());
        self.admin("postgres")
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        format!("{}/{name}", self.base)
    }

    /// A new, empty database called exactly `name` (the same database on two servers).
    pub fn database_named(&self, name: &str) -> String {
        self.admin("postgres")
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        format!("{}/{name}", self.base)
    }

    /// Makes every new transaction of the server read-only, as on a hot standby.
    pub fn set_read_only(&self, on: bool) {
        let mut c = self.admin("postgres");
        // Two statements: ALTER SYSTEM may not share a transaction (a batch is one).
        c.batch_execute(&format!(
            "ALTER SYSTEM SET default_transaction_read_only = {}",
            if on { "on" } else { "off" }
        ))
        .unwrap();
        c.batch_execute("SELECT pg_reload_conf()").unwrap();
    }

    /// A client of database `url` (test checks).
    pub fn client(&self, url: &str) -> postgres::Client {
        let mut c: postgres::Config = url.parse().unwrap();
        if let Some(p) = &self.password {
            c.password(p);
        }
        c.connect(postgres::NoTls).unwrap()
    }

    /// `pg_dump` of database `url`, as text.
    pub fn dump(&self, url: &str) -> Vec<u8> {
        let bin = self
            .private
            .as_ref()
            .map(|p| p.bin.clone())
            .unwrap_or_else(bin_dir);
        let mut cmd = Command::new(bin.join("pg_dump"));
        cmd.arg("--dbname").arg(url);
        if let Some(p) = &self.password {
            cmd.env("PGPASSWORD", p);
        }
        let out = cmd.output().expect("pg_dump");
        assert!(
            out.status.success(),
            "pg_dump: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// A ferrohsm configuration for database `url` in `dir` (the password in a file beside
    /// it), with a fast KDF and the given failure limit and refresh period.
    pub fn config(&self, dir: &Path, url: &str, max_failures: u32, refresh_ms: u32) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let mut text = format!(
            "[store]\nbackend = \"postgres\"\nurl = \"{url}\"\nsslmode = \"disable\"\nrefresh_ms = {refresh_ms}\n"
        );
        if let Some(p) = &self.password {
            std::fs::write(dir.join("pgpass"), format!("{p}\n")).unwrap();
            text.push_str("password_file = \"pgpass\"\n");
        }
        text.push_str(&format!(
            "[pin]\nmax_failures = {max_failures}\nkdf_memory_kib = 64\nkdf_passes = 1\n[log]\nlevel = \"info\"\ntarget = \"{}\"\n",
            dir.join("ferrohsm.log").display()
        ));
        let conf = dir.join("ferrohsm.toml");
        std::fs::write(&conf, text).unwrap();
        conf
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        if let Some(p) = &self.private {
            let _ = Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(p.bin.join("pg_ctl"))
                .args(["-D", "data", "-m", "immediate", "-w", "stop"])
                .current_dir(p.dir.path())
                .output();
        }
    }
}
