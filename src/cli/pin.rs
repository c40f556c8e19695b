//! PINs from a flag, an environment variable, or a prompt without echo.

use super::module::Result;
use cryptoki::types::AuthPin;

/// The PIN of the owner a command proves itself as (`--so` for the SO, else the user), with
/// `get`'s sources: the flag, else `$FERROHSM_SO_PIN` or `$FERROHSM_PIN`, else a prompt.
pub fn of_owner(given: Option<String>, so: bool) -> Result<(crate::store::PinOwner, AuthPin)> {
    let (owner, var, prompt) = if so {
        (crate::store::PinOwner::So, "FERROHSM_SO_PIN", "SO PIN")
    } else {
        (crate::store::PinOwner::User, "FERROHSM_PIN", "User PIN")
    };
    Ok((owner, get(given, var, prompt)?))
}

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
