//! RSA key-pair generation from the OS CSPRNG.

use super::{portable, strip_zeros, EngineError, KeyComponents};
use rsa::BoxedUint;

pub const MIN_BITS: usize = 1024;
/// As large as the engine signs with (`mechanism::rsa` says the same in its mechanism info).
pub const MAX_BITS: usize = 16384;

/// Generates a two-prime RSA key of exactly `bits` bits, any length in range (3092 and 2049
/// as well as 2048: applications ask for such sizes, and SoftHSM makes them), with public
/// exponent `e` (odd, at least 3, at most 64 bits).
pub fn generate(bits: usize, public_exponent: &[u8]) -> Result<KeyComponents, EngineError> {
    let e = strip_zeros(public_exponent);
    if !(MIN_BITS..=MAX_BITS).contains(&bits)
        || e.is_empty()
        || e.len() > 8
        || e[e.len() - 1] & 1 == 0
        || (e.len() == 1 && e[0] < 3)
    {
        return Err(EngineError::BadParameters);
    }
    let e = BoxedUint::from_be_slice(e, 64).map_err(|_| EngineError::BadParameters)?;
    let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
    let key = rsa::PrivateKey::new_with_exp(&mut rng, bits, e).map_err(|err| {
        log::error!("RSA key generation failed: {err}");
        EngineError::BadParameters
    })?;
    Ok(portable::components_of(&key))
}
