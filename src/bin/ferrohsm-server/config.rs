//! The server's configuration file: where it listens, its certificate, the CA its clients'
//! certificates are checked against, the module configuration that names the store, and
//! which client identity may see which tokens.

use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    listen: String,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    /// The module configuration (store, PIN policy, log, engine) the tokens are served from;
    /// `FERROHSM_CONF` or /etc/ferrohsm/ferrohsm.toml when absent, as for the module.
    module_config: Option<PathBuf>,
    /// Where `GET /metrics` and `GET /health` are served (plain HTTP); off when absent.
    metrics_listen: Option<String>,
    #[serde(default, rename = "client")]
    clients: Vec<ClientRule>,
}

/// `[[client]]`: what one certificate identity may do.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientRule {
    /// The certificate's subject common name, or one of its DNS subject alternative names.
    pub identity: String,
    /// The tokens it sees, each by label or by serial number.
    pub tokens: Vec<String>,
    /// Whether it may log in as the security officer.
    #[serde(default)]
    pub so: bool,
    /// The most calls it may have in flight at once, over all its connections.
    pub max_in_flight: Option<u32>,
    /// The most calls a second it may make (a second's worth may come at once).
    pub max_calls_per_second: Option<u32>,
}

/// The configuration, loaded and checked.
pub struct Server {
    pub listen: String,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub module: ferrohsm::config::Config,
    pub metrics_listen: Option<String>,
    pub clients: Vec<ClientRule>,
}

impl Server {
    pub fn load(path: &Path) -> Result<Server, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let f: File = toml::from_str(&text).map_err(|e| format!("{}: {}", path.display(), e.message()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let at = |p: PathBuf| if p.is_relative() { base.join(p) } else { p };
        let module = match f.module_config.map(at) {
            Some(p) => ferrohsm::config::Config::from_file(&p),
            None => ferrohsm::config::Config::load(),
        }
        .map_err(|e| e.0)?;
        if module.remote.is_some() {
            return Err("the module configuration the server reads has a [remote] section: the server holds the tokens itself; give it a configuration with [store]".into());
        }
        if let Some(c) = f
            .clients
            .iter()
            .find(|c| c.max_in_flight == Some(0) || c.max_calls_per_second == Some(0))
        {
            return Err(format!(
                "{}: [[client]] {} has a limit of 0, which refuses every call; leave the limit out for none",
                path.display(),
                c.identity
            ));
        }
        if f.clients.is_empty() {
            return Err(format!(
                "{}: no [[client]] is given any token; every connection would be refused",
                path.display()
            ));
        }
        Ok(Server {
            listen: f.listen,
            ca: at(f.ca),
            cert: at(f.cert),
            key: at(f.key),
            module,
            metrics_listen: f.metrics_listen,
            clients: f.clients,
        })
    }
}
