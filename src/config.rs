//! Configuration: a TOML file named by `FERROHSM_CONF`, else `/etc/ferrohsm/ferrohsm.toml`,
//! else built-in defaults that need no file (store under `$XDG_DATA_HOME/ferrohsm`).

use serde::Deserialize;
use std::path::{Path, PathBuf};

pub const SYSTEM_CONF: &str = "/etc/ferrohsm/ferrohsm.toml";

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub store: StoreConfig,
    pub pin: PinConfig,
    pub log: LogConfig,
    pub engine: EngineConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `sqlite` (durable, the default) or `memory` (gone at `C_Finalize`).
    pub backend: String,
    /// Directory holding `ferrohsm.db`.
    pub path: Option<PathBuf>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: "sqlite".into(),
            path: None,
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
}

impl Default for PinConfig {
    fn default() -> Self {
        PinConfig {
            max_failures: 10,
            kdf_memory_kib: 19 * 1024,
            kdf_passes: 2,
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
    /// Use the portable kernel even where a faster one is available.
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
        if let Some(p) = std::env::var_os("FERROHSM_CONF") {
            return Self::from_file(Path::new(&p));
        }
        if Path::new(SYSTEM_CONF).exists() {
            return Self::from_file(Path::new(SYSTEM_CONF));
        }
        Ok(Config::default())
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
        if let Some(p) = &c.store.path {
            if p.is_relative() {
                // Relative store paths are relative to the file that names them.
                c.store.path = Some(path.parent().unwrap_or(Path::new(".")).join(p));
            }
        }
        if !matches!(c.store.backend.as_str(), "sqlite" | "memory") {
            return Err(ConfigError(format!(
                "configuration file {}: store.backend must be \"sqlite\" or \"memory\", not {:?}",
                path.display(),
                c.store.backend
            )));
        }
        if c.pin.max_failures == 0 {
            return Err(ConfigError(format!(
                "configuration file {}: pin.max_failures must be at least 1",
                path.display()
            )));
        }
        Ok(c)
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
