//! Mechanisms, one family per folder behind one seam (`family::Family`), registered in
//! `REGISTRY`: RSA (`rsa/`), digests (`digest/`), AES and secret-key generation (`aes/`),
//! ECDSA, ECDH and EdDSA on one key model (`ec/`), MACs (`mac/`), and the post-quantum signatures
//! (`ml_dsa/`, `slh_dsa/`, through what they share in `pq/`). Shared by families: the hashes
//! (`hash`), the curves and their encodings (`ec_params`), and the check before release. The
//! EC arithmetic with private keys (`engine::ec::sign`, `engine::ec::check`) is the engine's.
//! No C pointers here: `ffi` hands parameters over as `family::Param`.

pub mod aes;
pub mod digest;
pub mod ec;
pub mod ec_params;
pub mod family;
pub mod hash;
pub mod key_model;
pub mod mac;
pub mod message;
pub mod ml_dsa;
pub mod pq;
pub mod rsa;
pub mod slh_dsa;

use crate::error::{Error, Result};
pub use aes::modes::AesMode;
use cryptoki_sys::*;
pub use family::{
    params_of, Crypter, Derived, Family, Generates, Key, Mechanism, Op, Param, ParamShape, Params, Pointed,
    Signer, Verifier,
};
pub use hash::{HashAlg, Hasher};
pub use key_model::{key_model, key_models, secret_key_type, KeyModel, SecretKeyType};

/// The families compiled in, in `C_GetMechanismList` order. A new family is one folder and
/// one line here; the key types it owns come with it (`Family::key_model`).
pub static REGISTRY: &[&dyn Family] = &[
    &rsa::Rsa,
    &digest::Digest,
    &aes::Aes,
    &ec::Ec,
    &ec::EdDsa,
    &mac::Macs,
    &pq::Pq(&ml_dsa::MlDsa),
    &pq::Pq(&slh_dsa::SlhDsa),
];

/// Releases `sig` only if `verify` accepts it: a fault or a bug that made a wrong signature
/// must not hand out a value that could leak the key (as RSA's engine does with `e`). The one
/// check before release of every signature made outside the RSA engine; `algorithm` names it
/// in the log line.
pub fn release_checked(
    algorithm: &str,
    sig: Vec<u8>,
    verify: impl FnOnce(&[u8]) -> std::result::Result<(), ()>,
) -> Result<Vec<u8>> {
    match verify(&sig) {
        Ok(()) => Ok(sig),
        Err(()) => {
            log::error!("{algorithm} signature failed verification with its own public key; not released");
            Err(Error(CKR_DEVICE_ERROR))
        }
    }
}

/// Every mechanism the token offers, with `C_GetMechanismInfo`'s answer for it: each
/// family's offer, in `REGISTRY` order. Made once: the offers depend on nothing that changes,
/// and every `C_*Init` looks its mechanism up here (collecting ~150 offers from every family
/// each time was 4% of a P-256 signature through PKCS#11).
pub fn mechanism_list() -> &'static [(CK_MECHANISM_TYPE, CK_MECHANISM_INFO)] {
    static LIST: std::sync::LazyLock<Vec<(CK_MECHANISM_TYPE, CK_MECHANISM_INFO)>> =
        std::sync::LazyLock::new(|| REGISTRY.iter().flat_map(|f| f.offers()).collect());
    &LIST
}

pub fn mechanism_info(m: CK_MECHANISM_TYPE) -> Option<CK_MECHANISM_INFO> {
    static INFO: std::sync::LazyLock<std::collections::HashMap<CK_MECHANISM_TYPE, CK_MECHANISM_INFO>> =
        std::sync::LazyLock::new(|| mechanism_list().iter().copied().collect());
    INFO.get(&m).copied()
}

/// The family of mechanism type `t` and the C structure of its parameter.
pub fn find(t: CK_MECHANISM_TYPE) -> Option<(&'static dyn Family, ParamShape)> {
    REGISTRY
        .iter()
        .find_map(|f| f.param_shape(t).map(|shape| (*f, shape)))
}

/// `CK_MECHANISM_INFO` of key sizes `min`..`max` and `flags`.
pub fn info(min: CK_ULONG, max: CK_ULONG, flags: CK_FLAGS) -> CK_MECHANISM_INFO {
    CK_MECHANISM_INFO {
        ulMinKeySize: min,
        ulMaxKeySize: max,
        flags,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry's one rule: each mechanism type belongs to one family, which offers it and
    /// knows its parameter.
    #[test]
    fn every_offered_mechanism_has_one_family_that_reads_its_parameter() {
        let list = mechanism_list();
        for (t, _) in list {
            assert_eq!(
                list.iter().filter(|(m, _)| m == t).count(),
                1,
                "0x{t:x} listed twice"
            );
            let (family, _) = find(*t).expect("an offered mechanism has a family");
            assert!(
                family.offers().iter().any(|(m, _)| m == t),
                "0x{t:x} is read by a family that does not offer it"
            );
        }
    }
}
