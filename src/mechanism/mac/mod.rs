//! Message authentication codes signed and verified with secret keys: `CKM_SHA_1_HMAC`,
//! `CKM_SHA224/256/384/512_HMAC` (RFC 2104, RustCrypto `hmac`), `CKM_AES_CMAC` (NIST SP
//! 800-38B, RustCrypto `cmac`) and `CKM_AES_MAC` (CBC-MAC over the data padded with zero bytes,
//! RustCrypto `cbc-mac`), each with its `_GENERAL` variant whose `CK_MAC_GENERAL_PARAMS` asks
//! for the leftmost bytes of the full MAC.
//!
//! AES-MAC is offered because PKCS#11 defines it and applications still use it (python-pkcs11
//! signs with it by default for AES keys); CBC-MAC is only sound for messages of one fixed
//! length, which docs/security.md says, and CMAC is the one to choose. Its plain mechanism gives
//! half a block (8 bytes), as PKCS#11 says; empty data is refused (`CKR_DATA_LEN_RANGE`),
//! because zero blocks of CBC-MAC give a MAC that does not depend on the key. This file owns the mechanisms' rules (which
//! key types each takes, the output lengths a `_GENERAL` parameter may ask for, key sizes) and
//! the running state of one MAC; the operation around it (parts, two-call lengths, errors
//! ending the operation) is the signing one of `token::operation`.

mod family;

pub use family::Macs;

use super::key_model::{check_secret_len, MIN_SECRET_LEN};
use super::{HashAlg, SecretKeyType};
use crate::error::{fail_because, Result};
use cryptoki_sys::*;
use hmac::{KeyInit, Mac as _};
use subtle::ConstantTimeEq;

/// The MAC family of a mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacAlg {
    /// HMAC with SHA-1 or a SHA-2 hash (MD5 and SHA-3 HMACs are not offered).
    Hmac(HashAlg),
    AesCmac,
    /// CBC-MAC with AES, the data padded with zero bytes to whole blocks.
    AesMac,
}

/// A MAC mechanism with its parameter: `len` is the `_GENERAL` output length, `None` for the
/// full-length mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacMechanism {
    pub alg: MacAlg,
    pub len: Option<usize>,
}

/// Each HMAC mechanism, its `_GENERAL` twin, its hash and the key type made for it.
const HMACS: &[(CK_MECHANISM_TYPE, CK_MECHANISM_TYPE, HashAlg, CK_KEY_TYPE)] = &[
    (
        CKM_SHA_1_HMAC,
        CKM_SHA_1_HMAC_GENERAL,
        HashAlg::Sha1,
        CKK_SHA_1_HMAC,
    ),
    (
        CKM_SHA224_HMAC,
        CKM_SHA224_HMAC_GENERAL,
        HashAlg::Sha224,
        CKK_SHA224_HMAC,
    ),
    (
        CKM_SHA256_HMAC,
        CKM_SHA256_HMAC_GENERAL,
        HashAlg::Sha256,
        CKK_SHA256_HMAC,
    ),
    (
        CKM_SHA384_HMAC,
        CKM_SHA384_HMAC_GENERAL,
        HashAlg::Sha384,
        CKK_SHA384_HMAC,
    ),
    (
        CKM_SHA512_HMAC,
        CKM_SHA512_HMAC_GENERAL,
        HashAlg::Sha512,
        CKK_SHA512_HMAC,
    ),
];

/// The hashes' own HMAC key types (`CKK_SHA*_HMAC`, which SoftHSM accepts beside
/// `CKK_GENERIC_SECRET`): any value of `MIN_SECRET_LEN` bytes or more, as a generic secret;
/// no mechanism generates them.
pub static HMAC_KEY_TYPES: [SecretKeyType; 5] = [
    hmac_key_type(CKK_SHA_1_HMAC, "SHA-1 HMAC"),
    hmac_key_type(CKK_SHA224_HMAC, "SHA-224 HMAC"),
    hmac_key_type(CKK_SHA256_HMAC, "SHA-256 HMAC"),
    hmac_key_type(CKK_SHA384_HMAC, "SHA-384 HMAC"),
    hmac_key_type(CKK_SHA512_HMAC, "SHA-512 HMAC"),
];

const fn hmac_key_type(key_type: CK_KEY_TYPE, name: &'static str) -> SecretKeyType {
    SecretKeyType {
        key_type,
        name,
        lengths: &[],
        max_generated: HMAC_MAX_KEY,
        check_value: None,
    }
}

/// Key sizes of the HMAC mechanisms in `C_GetMechanismInfo`, in bytes as SoftHSM counts them
/// (PKCS#11 names no unit for them): the shortest secret the token takes (`MIN_SECRET_LEN`:
/// one HMAC output of a shorter key finds the key offline) up to the longest
/// `CKM_GENERIC_SECRET_KEY_GEN` makes (RFC 2104 hashes a key longer than the block). `Mac::new`
/// holds every key to them, a key stored before the minimum was enforced included.
pub const HMAC_MIN_KEY: usize = MIN_SECRET_LEN;
pub const HMAC_MAX_KEY: usize = 512;
/// AES-CMAC keys are AES keys: 16, 24 or 32 bytes.
const AES_BLOCK: usize = 16;

/// Whether `m` is a MAC mechanism, and whether it is a `_GENERAL` one (which needs a length).
pub fn mac_mechanism(m: CK_MECHANISM_TYPE) -> Option<(MacAlg, bool)> {
    match m {
        CKM_AES_CMAC => Some((MacAlg::AesCmac, false)),
        CKM_AES_CMAC_GENERAL => Some((MacAlg::AesCmac, true)),
        CKM_AES_MAC => Some((MacAlg::AesMac, false)),
        CKM_AES_MAC_GENERAL => Some((MacAlg::AesMac, true)),
        _ => HMACS.iter().find_map(|(full, general, h, _)| {
            (m == *full || m == *general).then_some((MacAlg::Hmac(*h), m == *general))
        }),
    }
}

/// Every MAC mechanism type, full-length then `_GENERAL`, for `C_GetMechanismList`.
pub fn mechanism_types() -> impl Iterator<Item = (CK_MECHANISM_TYPE, MacAlg)> {
    HMACS
        .iter()
        .flat_map(|(full, general, h, _)| [(*full, MacAlg::Hmac(*h)), (*general, MacAlg::Hmac(*h))])
        .chain([
            (CKM_AES_CMAC, MacAlg::AesCmac),
            (CKM_AES_CMAC_GENERAL, MacAlg::AesCmac),
            (CKM_AES_MAC, MacAlg::AesMac),
            (CKM_AES_MAC_GENERAL, MacAlg::AesMac),
        ])
}

impl MacAlg {
    /// Length of the MAC the plain (not `_GENERAL`) mechanism gives: the whole MAC, except
    /// AES-MAC's half block.
    pub fn output_len(self) -> usize {
        match self {
            MacAlg::AesMac => AES_BLOCK / 2,
            _ => self.max_len(),
        }
    }

    /// The longest MAC a `_GENERAL` parameter may ask for: the hash's output or the block.
    pub fn max_len(self) -> usize {
        match self {
            MacAlg::Hmac(h) => h.output_len(),
            MacAlg::AesCmac | MacAlg::AesMac => AES_BLOCK,
        }
    }

    /// Whether a secret key of type `kt` may be used: HMAC takes `CKK_GENERIC_SECRET` or the
    /// `CKK_SHAx_HMAC` of its own hash (as SoftHSM does), CMAC takes AES keys.
    pub fn accepts_key_type(self, kt: CK_KEY_TYPE) -> bool {
        match self {
            MacAlg::Hmac(h) => {
                kt == CKK_GENERIC_SECRET || HMACS.iter().any(|(_, _, x, k)| *x == h && *k == kt)
            }
            MacAlg::AesCmac | MacAlg::AesMac => kt == CKK_AES,
        }
    }

    /// `C_GetMechanismInfo`'s key sizes, in bytes.
    pub fn key_sizes(self) -> (usize, usize) {
        match self {
            MacAlg::Hmac(_) => (HMAC_MIN_KEY, HMAC_MAX_KEY),
            MacAlg::AesCmac | MacAlg::AesMac => (16, 32),
        }
    }
}

impl MacMechanism {
    /// A MAC mechanism; a `_GENERAL` length outside 1..=max is `CKR_MECHANISM_PARAM_INVALID`.
    /// PKCS#11 gives the ranges as 1 to the hash's output length (SHA-2 HMACs) and 1 to the
    /// block size (CMAC, AES-MAC); SHA-1's text says 0–20, but a zero-length MAC would verify any data,
    /// so 0 is refused for every mechanism.
    pub fn new(alg: MacAlg, len: Option<usize>) -> Result<Self> {
        if let Some(n) = len {
            let full = alg.max_len();
            if !(1..=full).contains(&n) {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    format!("CK_MAC_GENERAL_PARAMS is {n}: this MAC's output length is 1 to {full} bytes"),
                );
            }
        }
        Ok(MacMechanism { alg, len })
    }

    pub fn mechanism_type(&self) -> CK_MECHANISM_TYPE {
        let general = self.len.is_some();
        match self.alg {
            MacAlg::AesCmac if general => CKM_AES_CMAC_GENERAL,
            MacAlg::AesCmac => CKM_AES_CMAC,
            MacAlg::AesMac if general => CKM_AES_MAC_GENERAL,
            MacAlg::AesMac => CKM_AES_MAC,
            MacAlg::Hmac(h) => HMACS
                .iter()
                .find(|(_, _, x, _)| *x == h)
                .map(|(full, gen, _, _)| if general { *gen } else { *full })
                .unwrap_or(CKM_SHA256_HMAC),
        }
    }

    /// Length of the MAC this mechanism signs and verifies.
    pub fn output_len(&self) -> usize {
        self.len.unwrap_or(self.alg.output_len())
    }
}

/// The keyed state of one running MAC. The key schedule and the hash states are wiped on drop
/// (the `zeroize` features of `hmac`, `cmac`, `cbc-mac` and `aes`).
#[derive(Clone)]
enum State {
    Sha1(hmac::Hmac<sha1::Sha1>),
    Sha224(hmac::Hmac<sha2::Sha224>),
    Sha256(hmac::Hmac<sha2::Sha256>),
    Sha384(hmac::Hmac<sha2::Sha384>),
    Sha512(hmac::Hmac<sha2::Sha512>),
    Cmac128(cmac::Cmac<aes::Aes128>),
    Cmac192(cmac::Cmac<aes::Aes192>),
    Cmac256(cmac::Cmac<aes::Aes256>),
    CbcMac128(cbc_mac::CbcMac<aes::Aes128>),
    CbcMac192(cbc_mac::CbcMac<aes::Aes192>),
    CbcMac256(cbc_mac::CbcMac<aes::Aes256>),
}

/// A MAC being computed over the parts given so far.
#[derive(Clone)]
pub struct Mac {
    state: State,
    len: usize,
    /// Whether any data was given: AES-MAC refuses empty data (see the top of the file).
    fed: bool,
}

macro_rules! each_state {
    ($s:expr, $m:ident => $e:expr) => {
        match $s {
            State::Sha1($m) => $e,
            State::Sha224($m) => $e,
            State::Sha256($m) => $e,
            State::Sha384($m) => $e,
            State::Sha512($m) => $e,
            State::Cmac128($m) => $e,
            State::Cmac192($m) => $e,
            State::Cmac256($m) => $e,
            State::CbcMac128($m) => $e,
            State::CbcMac192($m) => $e,
            State::CbcMac256($m) => $e,
        }
    };
}

impl Mac {
    /// Starts `mech` with the secret key `key` (its type already checked by the caller).
    pub fn new(mech: &MacMechanism, key: &[u8]) -> Result<Mac> {
        if let MacAlg::Hmac(_) = mech.alg {
            // A key stored before the minimum was enforced: each MAC would reveal it again.
            check_secret_len(key.len(), "MAC")?;
        }
        let (min, max) = mech.alg.key_sizes();
        let size_ok = match mech.alg {
            MacAlg::AesCmac | MacAlg::AesMac => [16, 24, 32].contains(&key.len()),
            MacAlg::Hmac(_) => (min..=max).contains(&key.len()),
        };
        if !size_ok {
            return fail_because(
                CKR_KEY_SIZE_RANGE,
                format!(
                    "a key of {} bytes cannot be used with mechanism 0x{:x} ({min} to {max} bytes)",
                    key.len(),
                    mech.mechanism_type()
                ),
            );
        }
        // The lengths were checked above, so no `new_from_slice` below can fail.
        let bad = |_| crate::error::Error(CKR_KEY_SIZE_RANGE);
        let state = match mech.alg {
            MacAlg::Hmac(HashAlg::Sha1) => State::Sha1(KeyInit::new_from_slice(key).map_err(bad)?),
            MacAlg::Hmac(HashAlg::Sha224) => State::Sha224(KeyInit::new_from_slice(key).map_err(bad)?),
            MacAlg::Hmac(HashAlg::Sha256) => State::Sha256(KeyInit::new_from_slice(key).map_err(bad)?),
            MacAlg::Hmac(HashAlg::Sha384) => State::Sha384(KeyInit::new_from_slice(key).map_err(bad)?),
            MacAlg::Hmac(HashAlg::Sha512) => State::Sha512(KeyInit::new_from_slice(key).map_err(bad)?),
            MacAlg::Hmac(h) => {
                return fail_because(CKR_MECHANISM_INVALID, format!("HMAC with {h:?} is not offered"))
            }
            MacAlg::AesCmac => match key.len() {
                16 => State::Cmac128(KeyInit::new_from_slice(key).map_err(bad)?),
                24 => State::Cmac192(KeyInit::new_from_slice(key).map_err(bad)?),
                _ => State::Cmac256(KeyInit::new_from_slice(key).map_err(bad)?),
            },
            MacAlg::AesMac => match key.len() {
                16 => State::CbcMac128(KeyInit::new_from_slice(key).map_err(bad)?),
                24 => State::CbcMac192(KeyInit::new_from_slice(key).map_err(bad)?),
                _ => State::CbcMac256(KeyInit::new_from_slice(key).map_err(bad)?),
            },
        };
        Ok(Mac {
            state,
            len: mech.output_len(),
            fed: false,
        })
    }

    /// Length of the MAC this state produces (the `_GENERAL` length, or the full one).
    pub fn output_len(&self) -> usize {
        self.len
    }

    pub fn update(&mut self, data: &[u8]) {
        self.fed |= !data.is_empty();
        each_state!(&mut self.state, m => m.update(data))
    }

    /// The MAC of everything given, cut to the mechanism's length; AES-MAC of no data is
    /// `CKR_DATA_LEN_RANGE`.
    pub fn finalize(self) -> Result<Vec<u8>> {
        let cbc = matches!(
            self.state,
            State::CbcMac128(_) | State::CbcMac192(_) | State::CbcMac256(_)
        );
        if cbc && !self.fed {
            return fail_because(
                CKR_DATA_LEN_RANGE,
                "AES-MAC of empty data would not depend on the key: give at least one byte",
            );
        }
        let mut full = each_state!(self.state, m => m.finalize().into_bytes().to_vec());
        full.truncate(self.len);
        Ok(full)
    }

    /// Checks `signature` against the MAC of everything given, in constant time; a wrong
    /// length is `CKR_SIGNATURE_LEN_RANGE`, a wrong value `CKR_SIGNATURE_INVALID`.
    pub fn verify(self, signature: &[u8]) -> Result<()> {
        if signature.len() != self.len {
            return fail_because(
                CKR_SIGNATURE_LEN_RANGE,
                format!("this MAC is {} bytes, not {}", self.len, signature.len()),
            );
        }
        if bool::from(self.finalize()?.ct_eq(signature)) {
            Ok(())
        } else {
            fail_because(CKR_SIGNATURE_INVALID, "the MAC does not match the data")
        }
    }
}
