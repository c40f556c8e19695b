//! Connections to the PostgreSQL server: how one is made (URL, password, TLS, session
//! settings), the idle ones kept for reuse, and the fork rule: a connection belongs to the
//! process that opened it. A child after `fork()` opens its own and never touches (not even
//! closes) one inherited from its parent, whose session would be broken by it.

use parking_lot::Mutex;
use postgres::{Client, Statement};
use std::collections::HashMap;
use std::time::Duration;

/// How long a connection attempt may take before the call fails (unless the URL sets
/// `connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Idle connections kept; more are opened when more threads read at once, and closed after.
const MAX_IDLE: usize = 8;
/// Set on every session: a writer waits at most as long as SQLite's busy timeout for the
/// write lock, and a host that stops in the middle of a transaction (frozen, cut off) loses
/// its session and its lock after a minute instead of holding every other writer up.
const SESSION_SETUP: &str = "SET lock_timeout = '30s'; SET idle_in_transaction_session_timeout = '60s'";

/// What a connection is made from. Holds the password, so it is never logged or shown:
/// `location` is the printable form.
pub struct Options {
    config: postgres::Config,
    tls: Option<rustls::ClientConfig>,
    location: String,
}

/// `postgresql://user@host:port/database` of `c`: every part but the password.
fn location(c: &postgres::Config) -> String {
    let hosts: Vec<String> = c
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                postgres::config::Host::Tcp(name) => name.clone(),
                postgres::config::Host::Unix(path) => path.display().to_string(),
            };
            match c.get_ports().get(i).or(c.get_ports().first()) {
                Some(p) => format!("{host}:{p}"),
                None => host,
            }
        })
        .collect();
    let user = c.get_user().map(|u| format!("{u}@")).unwrap_or_default();
    format!(
        "postgresql://{user}{}/{}",
        hosts.join(","),
        c.get_dbname().unwrap_or("")
    )
}

/// Reads the PEM certificates of `path` into a root store.
fn roots(path: &std::path::Path) -> Result<rustls::RootCertStore, String> {
    use rustls_pki_types::pem::PemObject;
    let what = |e: &dyn std::fmt::Display| {
        format!(
            "store.root_cert {}: {e}; give the PEM file of the CA that signed the server's certificate",
            path.display()
        )
    };
    let mut store = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(path).map_err(|e| what(&e))? {
        store.add(cert.map_err(|e| what(&e))?).map_err(|e| what(&e))?;
    }
    if store.is_empty() {
        return Err(what(&"no certificate in the file"));
    }
    Ok(store)
}

impl Options {
    /// From the configuration (already checked by `Config::check`). The password comes from
    /// `store.password_file`, else `PGPASSWORD`, else the URL.
    pub fn new(config: &crate::config::Config) -> Result<Options, String> {
        let s = &config.store;
        let url = config
            .store_url()
            .ok_or("store.url is not set; set it to postgresql://user@host:5432/database")?;
        let mut pg: postgres::Config = url.parse().map_err(|e| {
            format!(
                "store.url is not a PostgreSQL URL ({e}); write it as postgresql://user@host:5432/database"
            )
        })?;
        let location = location(&pg);
        if let Some(f) = &s.password_file {
            let text = zeroize::Zeroizing::new(std::fs::read_to_string(f).map_err(|e| {
                format!("store.password_file {} cannot be read ({e}); give a file whose first line is the password", f.display())
            })?);
            pg.password(text.lines().next().unwrap_or("").as_bytes());
        } else if let Some(p) = std::env::var_os("PGPASSWORD") {
            pg.password(std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()));
        }
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(CONNECT_TIMEOUT);
        }
        if pg.get_application_name().is_none() {
            pg.application_name("ferrohsm");
        }
        let tls = match s.sslmode.as_str() {
            "disable" => {
                pg.ssl_mode(postgres::config::SslMode::Disable);
                None
            }
            _ => {
                let Some(path) = &s.root_cert else {
                    return Err("store.sslmode is \"verify-full\" but store.root_cert is not set".into());
                };
                pg.ssl_mode(postgres::config::SslMode::Require);
                let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
                let tls = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| format!("store.sslmode: TLS is not usable: {e}"))?
                    .with_root_certificates(roots(path)?)
                    .with_no_client_auth();
                Some(tls)
            }
        };
        Ok(Options {
            config: pg,
            tls,
            location,
        })
    }

    pub fn location(&self) -> &str {
        &self.location
    }

    /// A new connection with the session settings made. The error is the driver's, which
    /// names no password.
    pub fn connect(&self) -> Result<Conn, postgres::Error> {
        let mut client = match &self.tls {
            None => self.config.connect(postgres::NoTls)?,
            Some(tls) => self
                .config
                .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls.clone()))?,
        };
        client.batch_execute(SESSION_SETUP)?;
        Ok(Conn {
            client,
            statements: HashMap::new(),
            fork: crate::fork::generation(),
        })
    }
}

/// One session with the server, and the statements prepared on it.
pub struct Conn {
    pub client: Client,
    statements: HashMap<String, Statement>,
    /// The fork generation it was opened in (`crate::fork`).
    fork: u64,
}

impl Conn {
    /// `sql` prepared once per connection: the signing path's lookups cost one round trip.
    pub fn statement(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql)?;
        self.statements.insert(sql.to_string(), s.clone());
        Ok(s)
    }
}

/// Idle connections of this process.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<Vec<Conn>>,
}

impl Pool {
    /// An idle connection of this process, if any. Connections inherited through `fork()` are
    /// forgotten, not dropped: dropping sends the server a Terminate on the parent's socket.
    pub fn take(&self) -> Option<Conn> {
        let now = crate::fork::generation();
        let mut idle = self.idle.lock();
        while let Some(c) = idle.pop() {
            if c.fork == now {
                return Some(c);
            }
            std::mem::forget(c);
        }
        None
    }

    /// Keeps a connection that worked for the next call.
    pub fn give(&self, c: Conn) {
        if c.fork != crate::fork::generation() {
            std::mem::forget(c);
            return;
        }
        let mut idle = self.idle.lock();
        if idle.len() < MAX_IDLE && !c.client.is_closed() {
            idle.push(c);
        }
    }

    /// Drops every idle connection (the server went away: they are all dead).
    pub fn clear(&self) {
        let all: Vec<Conn> = std::mem::take(&mut *self.idle.lock());
        let now = crate::fork::generation();
        for c in all {
            if c.fork == now {
                drop(c);
            } else {
                std::mem::forget(c);
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.clear();
    }
}
