//! Finding and loading the PKCS#11 module, and the error type of the CLI.

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::slot::Slot;
use std::path::{Path, PathBuf};

pub type Result<T> = std::result::Result<T, String>;

/// Turns a PKCS#11 error into a sentence that says what to do.
pub fn explain(what: &str, e: cryptoki::error::Error) -> String {
    use cryptoki::error::{Error, RvError};
    let hint = match &e {
        Error::Pkcs11(RvError::PinIncorrect, _) => " (wrong PIN; the token locks after repeated failures)",
        Error::Pkcs11(RvError::PinLocked, _) => {
            " (the PIN is locked: the SO must set a new user PIN with init-token --pin or set-pin)"
        }
        Error::Pkcs11(RvError::PinLenRange, _) => " (PINs have 4 to 255 characters)",
        Error::Pkcs11(RvError::UserPinNotInitialized, _) => {
            " (the token has no user PIN yet: run init-token with --pin)"
        }
        Error::Pkcs11(RvError::GeneralError, _) => {
            " (see the log line above; check the configuration file and the store directory)"
        }
        _ => "",
    };
    format!("{what}: {e}{hint}")
}

/// The module to load: given, else `libferrohsm.so` beside this program, else system paths.
pub fn module_path(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let mut candidates = vec![];
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            candidates.push(dir.join("libferrohsm.so"));
            candidates.push(dir.join("../lib/libferrohsm.so"));
        }
    }
    candidates.push(PathBuf::from("/usr/lib/x86_64-linux-gnu/pkcs11/libferrohsm.so"));
    candidates.push(PathBuf::from("/usr/local/lib/libferrohsm.so"));
    candidates.into_iter().find(|p| p.exists()).ok_or_else(|| {
        "cannot find libferrohsm.so: build it (cargo build --release) or pass --module PATH".into()
    })
}

pub fn load(given: Option<&Path>) -> Result<Pkcs11> {
    let path = module_path(given)?;
    let p = Pkcs11::new(&path).map_err(|e| format!("cannot load {}: {e}", path.display()))?;
    p.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .map_err(|e| explain(&format!("{} did not initialise", path.display()), e))?;
    Ok(p)
}

/// A token chosen by slot number, label or serial; `None` selects nothing.
pub fn find_token(p: &Pkcs11, slot: Option<u64>, label: Option<&str>, serial: Option<&str>) -> Result<Slot> {
    let slots = p.get_all_slots().map_err(|e| explain("cannot list slots", e))?;
    for s in slots {
        if slot == Some(s.id()) {
            return Ok(s);
        }
        let info = p
            .get_token_info(s)
            .map_err(|e| explain("cannot read token info", e))?;
        if !info.token_initialized() {
            continue;
        }
        if label.is_some_and(|l| info.label() == l) || serial.is_some_and(|x| info.serial_number() == x) {
            return Ok(s);
        }
    }
    Err(match (slot, label, serial) {
        (Some(n), _, _) => format!("there is no slot {n}; run show-slots"),
        (_, Some(l), _) => format!("no token is labelled {l:?}; run show-slots"),
        (_, _, Some(x)) => format!("no token has serial {x}; run show-slots"),
        _ => "name a token with --slot, --token or --serial".into(),
    })
}

/// The slot holding the uninitialised token.
pub fn free_slot(p: &Pkcs11) -> Result<Slot> {
    for s in p.get_all_slots().map_err(|e| explain("cannot list slots", e))? {
        if !p
            .get_token_info(s)
            .map_err(|e| explain("cannot read token info", e))?
            .token_initialized()
        {
            return Ok(s);
        }
    }
    Err("this module has no free slot".into())
}
