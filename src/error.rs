//! The one error type of the module: it carries the `CK_RV` that the C API returns, so inner
//! functions can use `?` and the FFI shell only has to unwrap the code.

use cryptoki_sys::*;
use std::fmt;

#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Error(pub CK_RV);

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn rv(self) -> CK_RV {
        self.0
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (0x{:08x})", rv_name(self.0), self.0)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Shorthand for returning a `CKR_*` code from an inner function.
pub fn fail<T>(rv: CK_RV) -> Result<T> {
    Err(Error(rv))
}

/// Fails with `rv` and a log line that says why; used where the code alone would leave the
/// user guessing (bad templates, wrong key types, parameter errors).
pub fn fail_because<T>(rv: CK_RV, why: impl fmt::Display) -> Result<T> {
    log::info!("{}: {}", rv_name(rv), why);
    Err(Error(rv))
}

pub fn rv_name(rv: CK_RV) -> &'static str {
    macro_rules! names {
        ($($c:ident),* $(,)?) => {
            match rv {
                $($c => stringify!($c),)*
                _ => "CKR_VENDOR_OR_UNKNOWN",
            }
        };
    }
    names!(
        CKR_OK,
        CKR_CANCEL,
        CKR_HOST_MEMORY,
        CKR_SLOT_ID_INVALID,
        CKR_GENERAL_ERROR,
        CKR_FUNCTION_FAILED,
        CKR_ARGUMENTS_BAD,
        CKR_NO_EVENT,
        CKR_NEED_TO_CREATE_THREADS,
        CKR_CANT_LOCK,
        CKR_ATTRIBUTE_READ_ONLY,
        CKR_ATTRIBUTE_SENSITIVE,
        CKR_ATTRIBUTE_TYPE_INVALID,
        CKR_ATTRIBUTE_VALUE_INVALID,
        CKR_ACTION_PROHIBITED,
        CKR_DATA_INVALID,
        CKR_DATA_LEN_RANGE,
        CKR_DEVICE_ERROR,
        CKR_DEVICE_MEMORY,
        CKR_PARAMETER_SET_NOT_SUPPORTED,
        CKR_DEVICE_REMOVED,
        CKR_ENCRYPTED_DATA_INVALID,
        CKR_ENCRYPTED_DATA_LEN_RANGE,
        CKR_FUNCTION_CANCELED,
        CKR_FUNCTION_NOT_PARALLEL,
        CKR_FUNCTION_NOT_SUPPORTED,
        CKR_CURVE_NOT_SUPPORTED,
        CKR_KEY_HANDLE_INVALID,
        CKR_KEY_SIZE_RANGE,
        CKR_KEY_TYPE_INCONSISTENT,
        CKR_KEY_NOT_NEEDED,
        CKR_KEY_CHANGED,
        CKR_KEY_NEEDED,
        CKR_KEY_INDIGESTIBLE,
        CKR_KEY_FUNCTION_NOT_PERMITTED,
        CKR_KEY_NOT_WRAPPABLE,
        CKR_KEY_UNEXTRACTABLE,
        CKR_MECHANISM_INVALID,
        CKR_MECHANISM_PARAM_INVALID,
        CKR_OBJECT_HANDLE_INVALID,
        CKR_OPERATION_ACTIVE,
        CKR_OPERATION_NOT_INITIALIZED,
        CKR_PIN_INCORRECT,
        CKR_PIN_INVALID,
        CKR_PIN_LEN_RANGE,
        CKR_PIN_EXPIRED,
        CKR_PIN_LOCKED,
        CKR_SESSION_CLOSED,
        CKR_SESSION_COUNT,
        CKR_SESSION_HANDLE_INVALID,
        CKR_SESSION_PARALLEL_NOT_SUPPORTED,
        CKR_SESSION_READ_ONLY,
        CKR_SESSION_EXISTS,
        CKR_SESSION_READ_ONLY_EXISTS,
        CKR_SESSION_READ_WRITE_SO_EXISTS,
        CKR_SIGNATURE_INVALID,
        CKR_SIGNATURE_LEN_RANGE,
        CKR_TEMPLATE_INCOMPLETE,
        CKR_TEMPLATE_INCONSISTENT,
        CKR_TOKEN_NOT_PRESENT,
        CKR_TOKEN_NOT_RECOGNIZED,
        CKR_TOKEN_WRITE_PROTECTED,
        CKR_UNWRAPPING_KEY_HANDLE_INVALID,
        CKR_UNWRAPPING_KEY_SIZE_RANGE,
        CKR_UNWRAPPING_KEY_TYPE_INCONSISTENT,
        CKR_USER_ALREADY_LOGGED_IN,
        CKR_USER_NOT_LOGGED_IN,
        CKR_USER_PIN_NOT_INITIALIZED,
        CKR_USER_TYPE_INVALID,
        CKR_USER_ANOTHER_ALREADY_LOGGED_IN,
        CKR_USER_TOO_MANY_TYPES,
        CKR_WRAPPED_KEY_INVALID,
        CKR_WRAPPED_KEY_LEN_RANGE,
        CKR_WRAPPING_KEY_HANDLE_INVALID,
        CKR_WRAPPING_KEY_SIZE_RANGE,
        CKR_WRAPPING_KEY_TYPE_INCONSISTENT,
        CKR_RANDOM_SEED_NOT_SUPPORTED,
        CKR_RANDOM_NO_RNG,
        CKR_DOMAIN_PARAMS_INVALID,
        CKR_BUFFER_TOO_SMALL,
        CKR_SAVED_STATE_INVALID,
        CKR_INFORMATION_SENSITIVE,
        CKR_STATE_UNSAVEABLE,
        CKR_CRYPTOKI_NOT_INITIALIZED,
        CKR_CRYPTOKI_ALREADY_INITIALIZED,
        CKR_MUTEX_BAD,
        CKR_MUTEX_NOT_LOCKED,
        CKR_FUNCTION_REJECTED,
        CKR_OPERATION_CANCEL_FAILED,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_the_module_returns_has_its_name_in_the_log() {
        // CKR_CURVE_NOT_SUPPORTED (3.0) was logged as CKR_VENDOR_OR_UNKNOWN.
        for rv in [
            CKR_CURVE_NOT_SUPPORTED,
            CKR_ACTION_PROHIBITED,
            CKR_OPERATION_CANCEL_FAILED,
        ] {
            assert_ne!(rv_name(rv), "CKR_VENDOR_OR_UNKNOWN", "0x{rv:x}");
        }
        assert_eq!(rv_name(CKR_CURVE_NOT_SUPPORTED), "CKR_CURVE_NOT_SUPPORTED");
        assert_eq!(rv_name(CKR_VENDOR_DEFINED), "CKR_VENDOR_OR_UNKNOWN");
    }
}
