//! Configuration: a TOML file named by `FERROHSM_CONF`, else `/etc/ferrohsm/ferrohsm.toml`,
//! else built-in defaults that need no file (store under `$XDG_DATA_HOME/ferrohsm`).

use serde::Deserialize;
use std::path::{Path, PathBuf};

pub const SYSTEM_CONF: &str = "/etc/ferrohsm/ferrohsm.toml";

pub const STORE_BACKENDS: &[&str] = &["sqlite", "memory", "postgres"];
/// TLS to PostgreSQL: none, or verified against `store.root_cert` (host name included).
pub const SSL_MODES: &[&str] = &["disable", "verify-full"];
/// How stale another host's changes may be when a process sees them (PostgreSQL).
pub const REFRESH_MS: std::ops::RangeInclusive<u32> = 0..=60_000;
/// Memory per token for cached objects and their prepared keys, in MiB.
pub const CACHE_MIB: std::ops::RangeInclusive<u32> = 1..=1024 * 1024;
/// The environment variable that overrides `store.url`.
pub const STORE_URL_ENV: &str = "FERROHSM_STORE_URL";
pub const LOG_LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];
/// At least one try; beyond a thousand the lockout protects nothing.
pub const MAX_FAILURES: std::ops::RangeInclusive<u32> = 1..=1000;
/// Argon2 needs 8 KiB per lane (PIN keys use one lane); 4 GiB per login is the sane top.
pub const KDF_MEMORY_KIB: std::ops::RangeInclusive<u32> = 8..=4 * 1024 * 1024;
/// Argon2 needs one pass; 64 passes of 19 MiB already take seconds per login.
pub const KDF_PASSES: std::ops::RangeInclusive<u32> = 1..=64;
/// Longer than a PIN check takes with the slowest KDF allowed; an hour of waiting is the top.
pub const ATTEMPT_TIMEOUT_S: std::ops::RangeInclusive<u32> = 1..=3600;

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub store: StoreConfig,
    pub pin: PinConfig,
    pub log: LogConfig,
    pub engine: EngineConfig,
    /// When present, the module is a client of `ferrohsm-server` and holds no token itself
    /// (`store` is then unused).
    pub remote: Option<RemoteConfig>,
}

/// `[remote]`: the server the module's token lives on, and the module's identity to it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteConfig {
    /// `host:port` of each server, tried in order.
    pub servers: Vec<String>,
    /// PEM file of the CA certificate(s) that signed the servers' certificates.
    pub ca: Option<PathBuf>,
    /// PEM file of this client's certificate (its chain may follow).
    pub cert: Option<PathBuf>,
    /// PEM file of this client's private key (PKCS#8, SEC1 or PKCS#1).
    pub key: Option<PathBuf>,
    /// The name the servers' certificates are checked against; the host of each address when
    /// absent.
    pub server_name: Option<String>,
    /// How long one call waits for its answer, connecting included.
    pub timeout_ms: u32,
}

/// One call's wait for the server: long enough for a key pair generation, short enough that a
/// server gone silent is noticed.
pub const REMOTE_TIMEOUT_MS: std::ops::RangeInclusive<u32> = 100..=600_000;

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            servers: Vec::new(),
            ca: None,
            cert: None,
            key: None,
            server_name: None,
            timeout_ms: 60_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `sqlite` (durable, the default), `postgres` (one database for a fleet of hosts) or
    /// `memory` (gone at `C_Finalize`).
    pub backend: String,
    /// Directory holding `ferrohsm.db` (sqlite).
    pub path: Option<PathBuf>,
    /// `postgresql://user@host:port/database` (postgres); `FERROHSM_STORE_URL` overrides it.
    pub url: Option<String>,
    /// `verify-full` (TLS, server certificate checked against `root_cert`, the default) or
    /// `disable` (plain TCP or a Unix socket, for a trusted network only).
    pub sslmode: String,
    /// PEM file of the CA certificate(s) that signed the server's certificate.
    pub root_cert: Option<PathBuf>,
    /// A file whose first line is the database password; else `PGPASSWORD`, else none
    /// (trust, peer or certificate authentication).
    pub password_file: Option<PathBuf>,
    /// Changes made by other hosts are seen within this many milliseconds (postgres): the
    /// change generation is read from the database at most this often.
    pub refresh_ms: u32,
    /// Memory each token may use to keep objects read from the store, with their prepared
    /// keys (about 22 KiB per RSA-2048 private key); the least used go first when it is full.
    pub cache_mib: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: "sqlite".into(),
            path: None,
            url: None,
            sslmode: "verify-full".into(),
            root_cert: None,
            password_file: None,
            refresh_ms: 1000,
            cache_mib: 512,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PinConfig {
    /// Wrong PINs in a row before the PIN locks.
    pub max_failures: u32,
    /// Argon2id memory in KiB and passes for PIN-derived keys of new wraps.
    pub kdf_memory_kib: u32,
    pub kdf_passes: u32,
    /// Seconds a PIN attempt may stay undecided (its process stopped mid-check) before the
    /// attempts waiting on it count it as a wrong PIN.
    pub attempt_timeout_s: u32,
}

impl Default for PinConfig {
    fn default() -> Self {
        PinConfig {
            max_failures: 10,
            kdf_memory_kib: 19 * 1024,
            kdf_passes: 2,
            attempt_timeout_s: 60,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// error, warn, info, debug or trace.
    pub level: String,
    /// `stderr`, `syslog`, or a file path.
    pub target: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "warn".into(),
            target: "stderr".into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// The RSA kernel families to use: `auto` (per CPU and key size, the default), a family's
    /// name (`ifma`, `fma`, `avx2`, `mulx`, `portable`, `reference`) to force it, or a comma-separated
    /// list to choose among; checked against the families this CPU runs at `C_Initialize`.
    pub kernel: Option<String>,
    /// Alias of `kernel = "portable"` (the plain-Rust family), kept for existing configuration files.
    pub force_portable: bool,
}

/// A configuration problem, worded for the operator: which file, where, what.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Config {
    /// Loads the configuration from the usual places.
    pub fn load() -> Result<Config, ConfigError> {
        match locate(std::env::var_os("FERROHSM_CONF"), Path::new(SYSTEM_CONF)) {
            Some(p) => Self::from_file(&p),
            None => Ok(Config::default()),
        }
    }

    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read configuration file {}: {e}", path.display())))?;
        let mut c: Config = toml::from_str(&text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].lines().count().max(1))
                .unwrap_or(0);
            ConfigError(format!(
                "configuration file {} line {line}: {}",
                path.display(),
                e.message()
            ))
        })?;
        // Relative paths are relative to the file that names them.
        let base = path.parent().unwrap_or(Path::new("."));
        let remote = c.remote.as_mut();
        let (ca, cert, key) = match remote {
            Some(r) => (r.ca.as_mut(), r.cert.as_mut(), r.key.as_mut()),
            None => (None, None, None),
        };
        for p in [
            c.store.path.as_mut(),
            c.store.root_cert.as_mut(),
            c.store.password_file.as_mut(),
            ca,
            cert,
            key,
        ]
        .into_iter()
        .flatten()
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        c.check()
            .map_err(|why| ConfigError(format!("configuration file {}: {why}", path.display())))?;
        Ok(c)
    }

    /// Checks every value against the range it is used in, so that a bad value stops
    /// `C_Initialize` with the key named instead of failing later (a KDF refusing its
    /// parameters at `C_InitToken`). The error names the key and what it may be.
    pub fn check(&self) -> Result<(), String> {
        let words = |key: &str, value: &str, allowed: &[&str]| {
            if allowed.contains(&value) {
                Ok(())
            } else {
                Err(format!("{key} must be one of {allowed:?}, not {value:?}"))
            }
        };
        let range = |key: &str, value: u32, r: std::ops::RangeInclusive<u32>| {
            if r.contains(&value) {
                Ok(())
            } else {
                Err(format!(
                    "{key} must be between {} and {}, not {value}",
                    r.start(),
                    r.end()
                ))
            }
        };
        words("store.backend", &self.store.backend, STORE_BACKENDS)?;
        if let Some(r) = &self.remote {
            if r.servers.is_empty() {
                return Err("remote.servers must name at least one server as \"host:port\"".into());
            }
            for (key, v) in [
                ("remote.ca", &r.ca),
                ("remote.cert", &r.cert),
                ("remote.key", &r.key),
            ] {
                if v.is_none() {
                    return Err(format!(
                        "{key} must name a PEM file: the remote token needs mutual TLS"
                    ));
                }
            }
            range("remote.timeout_ms", r.timeout_ms, REMOTE_TIMEOUT_MS)?;
        }
        if self.store.backend == "postgres" {
            self.check_postgres()?;
        }
        // Levels are read case-insensitively by the logger.
        words("log.level", &self.log.level.to_ascii_lowercase(), LOG_LEVELS)?;
        range("store.cache_mib", self.store.cache_mib, CACHE_MIB)?;
        range("pin.max_failures", self.pin.max_failures, MAX_FAILURES)?;
        range("pin.kdf_memory_kib", self.pin.kdf_memory_kib, KDF_MEMORY_KIB)?;
        range("pin.kdf_passes", self.pin.kdf_passes, KDF_PASSES)?;
        range(
            "pin.attempt_timeout_s",
            self.pin.attempt_timeout_s,
            ATTEMPT_TIMEOUT_S,
        )?;
        // Known names only; whether this CPU runs the family is checked when the engine starts.
        if let Some(k) = &self.engine.kernel {
            let mut names = vec!["auto"];
            names.extend(crate::engine::kernel::REGISTRY.iter().map(|f| f.name()));
            for k in k.split(',').map(str::trim) {
                words("engine.kernel", k, &names)?;
            }
        }
        Ok(())
    }

    /// The PostgreSQL settings: a URL the driver accepts, a TLS mode it can honour, readable
    /// files. Each error names the key and what to do.
    fn check_postgres(&self) -> Result<(), String> {
        let s = &self.store;
        let Some(url) = self.store_url() else {
            return Err(format!(
                "store.backend is \"postgres\" but no store.url is set (nor {STORE_URL_ENV}); \
                 set store.url = \"postgresql://user@host:5432/database\""
            ));
        };
        let parsed: postgres::Config = url.parse().map_err(|e| {
            format!(
                "store.url (or {STORE_URL_ENV}) is not a PostgreSQL URL ({e}); \
                 write it as postgresql://user@host:5432/database"
            )
        })?;
        if parsed.get_dbname().is_none() {
            return Err(
                "store.url names no database; write it as postgresql://user@host:5432/database".into(),
            );
        }
        let words = |key: &str, value: &str, allowed: &[&str]| {
            if allowed.contains(&value) {
                Ok(())
            } else {
                Err(format!("{key} must be one of {allowed:?}, not {value:?}"))
            }
        };
        words("store.sslmode", &s.sslmode, SSL_MODES)?;
        if s.sslmode == "verify-full" && s.root_cert.is_none() {
            return Err(
                "store.sslmode is \"verify-full\" but store.root_cert is not set; \
                 set store.root_cert to the PEM file of the CA that signed the server's certificate, \
                 or sslmode = \"disable\" on a trusted network or a Unix socket"
                    .into(),
            );
        }
        for (key, file) in [
            ("store.root_cert", &s.root_cert),
            ("store.password_file", &s.password_file),
        ] {
            if let Some(f) = file {
                std::fs::metadata(f).map_err(|e| {
                    format!(
                        "{key} {} cannot be read ({e}); give the path of an existing file",
                        f.display()
                    )
                })?;
            }
        }
        if !REFRESH_MS.contains(&s.refresh_ms) {
            return Err(format!(
                "store.refresh_ms must be between {} and {}, not {}",
                REFRESH_MS.start(),
                REFRESH_MS.end(),
                s.refresh_ms
            ));
        }
        Ok(())
    }

    /// The PostgreSQL URL: `FERROHSM_STORE_URL` when set, else `store.url`.
    pub fn store_url(&self) -> Option<String> {
        std::env::var(STORE_URL_ENV)
            .ok()
            .filter(|u| !u.is_empty())
            .or_else(|| self.store.url.clone())
    }

    /// The store directory: configured, or `$XDG_DATA_HOME/ferrohsm`, or
    /// `~/.local/share/ferrohsm`.
    pub fn store_dir(&self) -> PathBuf {
        if let Some(p) = &self.store.path {
            return p.clone();
        }
        if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
            return PathBuf::from(x).join("ferrohsm");
        }
        let home = std::env::var_os("HOME").unwrap_or_else(|| "/".into());
        PathBuf::from(home).join(".local/share/ferrohsm")
    }
}

/// The file `Config::load` reads: the one `FERROHSM_CONF` names (a missing one is an error
/// then, not a fallback: the operator asked for it), else the system file (the Debian
/// package's conffile) when it exists, else none. There is no per-user file: a user who wants
/// a store of their own sets `FERROHSM_CONF`, or leaves both unset and gets the per-user store.
fn locate(env: Option<std::ffi::OsString>, system: &Path) -> Option<PathBuf> {
    match env {
        Some(p) => Some(PathBuf::from(p)),
        None => system.exists().then(|| system.to_path_buf()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_wins_then_the_system_file_then_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let system = dir.path().join("ferrohsm.toml");
        let mine = dir.path().join("mine.toml");
        assert_eq!(locate(None, &system), None, "no system file: built-in defaults");
        std::fs::write(&system, "").unwrap();
        assert_eq!(locate(None, &system), Some(system.clone()));
        // FERROHSM_CONF is taken even when its file is missing (from_file reports it).
        assert_eq!(locate(Some(mine.clone().into()), &system), Some(mine));
        assert_eq!(
            SYSTEM_CONF, "/etc/ferrohsm/ferrohsm.toml",
            "the path the package installs"
        );
    }

    /// Loads `text` as a configuration file and returns the error, if any.
    fn load(text: &str) -> Result<Config, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ferrohsm.toml");
        std::fs::write(&path, text).unwrap();
        Config::from_file(&path).map_err(|e| {
            assert!(e.0.contains(&path.display().to_string()), "{e}: names the file");
            e.0
        })
    }

    #[test]
    fn defaults_and_the_range_ends_are_accepted() {
        Config::default().check().unwrap();
        load("[pin]\nkdf_memory_kib = 8\nkdf_passes = 1\nmax_failures = 1\nattempt_timeout_s = 1\n").unwrap();
        load("[pin]\nkdf_memory_kib = 4194304\nkdf_passes = 64\nmax_failures = 1000\nattempt_timeout_s = 3600\n")
            .unwrap();
        load("[log]\nlevel = \"DEBUG\"\n[store]\nbackend = \"memory\"\n").unwrap();
    }

    #[test]
    fn a_postgres_store_needs_a_url_a_tls_choice_and_files_that_exist() {
        std::env::remove_var(STORE_URL_ENV);
        let ok = "[store]\nbackend = \"postgres\"\nurl = \"postgresql://signer@db.example:5432/keys\"\nsslmode = \"disable\"\n";
        let c = load(ok).unwrap();
        assert_eq!(
            c.store_url().as_deref(),
            Some("postgresql://signer@db.example:5432/keys")
        );
        for (text, says) in [
            ("[store]\nbackend = \"postgres\"\nsslmode = \"disable\"\n", "no store.url"),
            ("[store]\nbackend = \"postgres\"\nurl = \"mysql://x\"\nsslmode = \"disable\"\n", "store.url"),
            ("[store]\nbackend = \"postgres\"\nurl = \"postgresql://u@h:5432\"\nsslmode = \"disable\"\n", "names no database"),
            ("[store]\nbackend = \"postgres\"\nurl = \"postgresql://u@h/db\"\n", "store.root_cert is not set"),
            ("[store]\nbackend = \"postgres\"\nurl = \"postgresql://u@h/db\"\nsslmode = \"require\"\n", "store.sslmode must be one of"),
            (
                "[store]\nbackend = \"postgres\"\nurl = \"postgresql://u@h/db\"\nroot_cert = \"missing.pem\"\n",
                "store.root_cert",
            ),
            (
                "[store]\nbackend = \"postgres\"\nurl = \"postgresql://u@h/db\"\nsslmode = \"disable\"\npassword_file = \"nope\"\n",
                "store.password_file",
            ),
            (
                "[store]\nbackend = \"postgres\"\nurl = \"postgresql://u@h/db\"\nsslmode = \"disable\"\nrefresh_ms = 60001\n",
                "store.refresh_ms must be between 0 and 60000",
            ),
        ] {
            let e = load(text).expect_err(text);
            assert!(e.contains(says), "{text:?} -> {e}");
        }
        // The environment names the server when the file does not.
        std::env::set_var(STORE_URL_ENV, "postgresql://env@h:5432/db");
        let c = load("[store]\nbackend = \"postgres\"\nsslmode = \"disable\"\n").unwrap();
        assert_eq!(c.store_url().as_deref(), Some("postgresql://env@h:5432/db"));
        std::env::remove_var(STORE_URL_ENV);
    }

    #[test]
    fn out_of_range_values_are_refused_with_the_key_and_range() {
        for (text, key, allowed) in [
            ("[pin]\nkdf_passes = 0\n", "pin.kdf_passes", "between 1 and 64"),
            (
                "[store]\ncache_mib = 0\n",
                "store.cache_mib",
                "between 1 and 1048576",
            ),
            ("[pin]\nkdf_passes = 65\n", "pin.kdf_passes", "between 1 and 64"),
            (
                "[pin]\nattempt_timeout_s = 0\n",
                "pin.attempt_timeout_s",
                "between 1 and 3600",
            ),
            (
                "[pin]\nkdf_memory_kib = 1\n",
                "pin.kdf_memory_kib",
                "between 8 and 4194304",
            ),
            (
                "[pin]\nkdf_memory_kib = 7\n",
                "pin.kdf_memory_kib",
                "between 8 and 4194304",
            ),
            (
                "[pin]\nkdf_memory_kib = 4194305\n",
                "pin.kdf_memory_kib",
                "between 8 and 4194304",
            ),
            (
                "[pin]\nmax_failures = 0\n",
                "pin.max_failures",
                "between 1 and 1000",
            ),
            (
                "[pin]\nmax_failures = 1001\n",
                "pin.max_failures",
                "between 1 and 1000",
            ),
            ("[log]\nlevel = \"verbose\"\n", "log.level", "\"trace\""),
            (
                "[store]\nbackend = \"postgresql\"\n",
                "store.backend",
                "\"postgres\"",
            ),
            ("[store]\nbackend = \"Memory\"\n", "store.backend", "\"memory\""),
            ("[engine]\nkernel = \"avx9\"\n", "engine.kernel", "\"portable\""),
        ] {
            let e = load(text).expect_err(text);
            assert!(e.contains(key) && e.contains(allowed), "{text:?} -> {e}");
        }
    }
}
