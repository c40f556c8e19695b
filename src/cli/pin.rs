//! PINs from a flag, an environment variable, or a prompt without echo.

use super::module::Result;
use cryptoki::types::AuthPin;

/// The PIN given on the command line, else in `$env_var`, else typed at a prompt.
pub fn get(given: Option<String>, env_var: &str, prompt: &str) -> Result<AuthPin> {
    if let Some(p) = given {
        return Ok(AuthPin::new(p.into()));
    }
    if let Ok(p) = std::env::var(env_var) {
        return Ok(AuthPin::new(p.into()));
    }
    rpassword::prompt_password(format!("{prompt}: "))
        .map(|p| AuthPin::new(p.into()))
        .map_err(|e| format!("no PIN given (use a flag or {env_var}) and cannot prompt for one: {e}"))
}
