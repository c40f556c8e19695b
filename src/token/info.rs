//! What `C_GetTokenInfo` reports about a token's PINs, as flags: decided here, from the
//! record's counters, so the C shell only copies them out.

use super::TokenInfo;
use cryptoki_sys::*;

impl TokenInfo {
    /// The token's `CKF_*` flags: always RNG, login required and clock; then initialised,
    /// user PIN initialised, and for each PIN locked, final try (one failure left) or count
    /// low (any failure since the last success).
    pub fn flags(&self) -> CK_FLAGS {
        let mut flags = CKF_RNG | CKF_LOGIN_REQUIRED | CKF_CLOCK_ON_TOKEN;
        let Some(r) = &self.record else {
            return flags;
        };
        flags |= CKF_TOKEN_INITIALIZED;
        if r.user_pin_initialized {
            flags |= CKF_USER_PIN_INITIALIZED;
        }
        for (pin, low, last, locked) in [
            (
                r.user_pin,
                CKF_USER_PIN_COUNT_LOW,
                CKF_USER_PIN_FINAL_TRY,
                CKF_USER_PIN_LOCKED,
            ),
            (
                r.so_pin,
                CKF_SO_PIN_COUNT_LOW,
                CKF_SO_PIN_FINAL_TRY,
                CKF_SO_PIN_LOCKED,
            ),
        ] {
            if pin.locked {
                flags |= locked;
            } else if pin.failures + 1 == r.max_failures {
                flags |= last | low;
            } else if pin.failures > 0 {
                flags |= low;
            }
        }
        flags
    }
}
