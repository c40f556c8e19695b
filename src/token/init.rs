//! The composition root: what `C_Initialize` puts together before the first session. The
//! configuration, the log, the engine's kernel choice and the store are decided here, not in
//! the C shell, so every caller (the C ABI, tests) gets the same library from the same rules.

use super::Library;
use crate::error::{Error, Result};
use cryptoki_sys::CKR_GENERAL_ERROR;

impl Library {
    /// Loads the configuration and starts logging by it.
    pub fn load_config() -> Result<crate::config::Config> {
        let config = crate::config::Config::load().map_err(|e| {
            // The log's own settings are in the file that failed: log with the defaults.
            crate::logging::init(None);
            log::error!("C_Initialize: {e}");
            Error(CKR_GENERAL_ERROR)
        })?;
        crate::logging::init(Some(&config.log));
        Ok(config)
    }

    /// Configures the engine and opens the store. A failure (here and in `load_config`) is
    /// logged for the operator, who is told which file and which key; the caller sees
    /// `CKR_GENERAL_ERROR`, as there is no better code.
    pub fn with_config(config: &crate::config::Config) -> Result<Library> {
        crate::engine::configure(config.engine.kernel.as_deref(), config.engine.force_portable).map_err(
            |e| {
                log::error!("C_Initialize: {e}");
                Error(CKR_GENERAL_ERROR)
            },
        )?;
        let store = crate::store::open(config).map_err(|e| {
            log::error!("C_Initialize: {e}");
            Error(CKR_GENERAL_ERROR)
        })?;
        Ok(Library::new(store, u64::from(config.store.cache_mib) << 20))
    }
}
