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

/// `FERROHSM_InitTokenWithPIN` of the loaded module, when it has one (ferrohsm 1.1 and later).
pub struct InitTokenWithPin {
    // Keeps the module mapped while `f` may be called; it is the library `Pkcs11` already
    // loaded (dlopen of the same path), so the call sees the initialised module.
    _lib: libloading::Library,
    f: unsafe extern "C" fn(
        cryptoki_sys::CK_SLOT_ID,
        *const u8,
        cryptoki_sys::CK_ULONG,
        *const u8,
        *const u8,
        cryptoki_sys::CK_ULONG,
    ) -> cryptoki_sys::CK_RV,
}

impl InitTokenWithPin {
    pub fn find(module: &Path) -> Option<Self> {
        // SAFETY: loading the module the caller already loaded through `Pkcs11::new` runs no new
        // initialisers; the symbol's type is the one include/ferrohsm.h declares.
        unsafe {
            let lib = libloading::Library::new(module).ok()?;
            let f = *lib
                .get::<unsafe extern "C" fn(
                    cryptoki_sys::CK_SLOT_ID,
                    *const u8,
                    cryptoki_sys::CK_ULONG,
                    *const u8,
                    *const u8,
                    cryptoki_sys::CK_ULONG,
                ) -> cryptoki_sys::CK_RV>(b"FERROHSM_InitTokenWithPIN")
                .ok()?;
            Some(InitTokenWithPin { _lib: lib, f })
        }
    }

    /// Initialises the token in `slot` with `label` and sets its user PIN, in one transaction.
    pub fn call(&self, slot: Slot, so_pin: &str, label: &str, user_pin: &str) -> cryptoki::error::Result<()> {
        let mut padded = [b' '; 32];
        padded[..label.len().min(32)].copy_from_slice(&label.as_bytes()[..label.len().min(32)]);
        // SAFETY: every pointer is valid for the length passed with it; label is 32 bytes.
        let rv = unsafe {
            (self.f)(
                slot.id() as cryptoki_sys::CK_SLOT_ID,
                so_pin.as_ptr(),
                so_pin.len() as cryptoki_sys::CK_ULONG,
                padded.as_ptr(),
                user_pin.as_ptr(),
                user_pin.len() as cryptoki_sys::CK_ULONG,
            )
        };
        cryptoki::error::Rv::from(rv).into_result(cryptoki::context::Function::InitToken)
    }
}
