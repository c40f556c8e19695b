//! Mechanisms: which ones the token offers (`C_GetMechanismList/Info`), their parameters as
//! Rust values, the RSA schemes built on the engine, the elliptic-curve ones (`ec`, `eddsa`,
//! the encodings in `ec_params`,
//! Ed448 in `ed448`), AES modes and key wrapping, the MACs (`mac`), and the post-quantum
//! signature families behind their seam (`pq`: `ml_dsa`, `slh_dsa`). No C pointers here.

pub mod aes;
pub mod aes_modes;
pub mod ec;
pub mod ec_params;
pub mod ed448;
pub mod eddsa;
pub mod hash;
pub mod mac;
pub mod ml_dsa;
pub mod pq;
pub mod rsa;
pub mod rsa_pad;
pub mod slh_dsa;

pub use aes_modes::AesMode;
use cryptoki_sys::*;
pub use hash::{HashAlg, Hasher};

/// Parameters of PSS as the application gave them (`CK_RSA_PKCS_PSS_PARAMS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PssParams {
    pub hash: HashAlg,
    pub mgf: HashAlg,
    pub salt_len: usize,
}

/// Parameters of OAEP (`CK_RSA_PKCS_OAEP_PARAMS`); the label is the `pSourceData`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OaepParams {
    pub hash: HashAlg,
    pub mgf: HashAlg,
    pub label: Vec<u8>,
}

/// A mechanism with its parameters decoded and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mechanism {
    RsaPkcsKeyPairGen,
    RsaPkcs,
    RsaX509,
    /// `CKM_RSA_PKCS_PSS` (prehash `None`, input is the hash) or `CKM_SHAx_RSA_PKCS_PSS`.
    RsaPss {
        prehash: Option<HashAlg>,
        params: PssParams,
    },
    /// `CKM_SHAx_RSA_PKCS`: hash, DigestInfo, PKCS#1 v1.5.
    HashRsaPkcs(HashAlg),
    RsaOaep(OaepParams),
    Digest(HashAlg),
    AesKeyGen,
    GenericSecretKeyGen,
    AesKeyWrap,
    AesKeyWrapPad,
    /// `CKM_AES_ECB`, `_CBC`, `_CBC_PAD`, `_CTR`, `_GCM` with their parameters.
    Aes(AesMode),
    EcKeyPairGen,
    EcEdwardsKeyPairGen,
    /// `CKM_ECDSA` (prehash `None`, input is the hash) or `CKM_ECDSA_SHAx`.
    Ecdsa(Option<HashAlg>),
    /// `CKM_EDDSA`: pure Ed25519, or Ed448 with `context` (`CK_EDDSA_PARAMS`; empty without
    /// one). The prehash schemes are refused when the parameter is read.
    EdDsa {
        context: Vec<u8>,
    },
    /// `CKM_ECDH1_DERIVE` with `CKD_NULL` and no shared data; the peer's public data as given
    /// (a raw or DER point).
    Ecdh1Derive {
        public_data: Vec<u8>,
    },
    /// `CKM_AES_ECB_ENCRYPT_DATA` (`iv` `None`) and `CKM_AES_CBC_ENCRYPT_DATA`: the derived
    /// key's value is the base key's encryption of `data` (whole blocks, no padding).
    AesEncryptData {
        iv: Option<[u8; 16]>,
        data: Vec<u8>,
    },
    /// `CKM_SHAx_HMAC`, `CKM_AES_CMAC` and their `_GENERAL` variants.
    Mac(mac::MacMechanism),
    /// The key pair generation of a post-quantum family (`pq`), named by its key type.
    PqKeyPairGen(CK_KEY_TYPE),
    /// A post-quantum signature (`CKM_ML_DSA`, `CKM_SLH_DSA`, or with `prehash` their
    /// `CKM_HASH_*` mechanisms) with its `CK_SIGN_ADDITIONAL_CONTEXT`.
    PqSign {
        key_type: CK_KEY_TYPE,
        prehash: Option<HashAlg>,
        params: pq::SignParams,
    },
}

impl Mechanism {
    pub fn mechanism_type(&self) -> CK_MECHANISM_TYPE {
        match self {
            Mechanism::RsaPkcsKeyPairGen => CKM_RSA_PKCS_KEY_PAIR_GEN,
            Mechanism::RsaPkcs => CKM_RSA_PKCS,
            Mechanism::RsaX509 => CKM_RSA_X_509,
            Mechanism::RsaPss { prehash: None, .. } => CKM_RSA_PKCS_PSS,
            Mechanism::RsaPss { prehash: Some(h), .. } => hash_pss_mechanism(*h).unwrap_or(CKM_RSA_PKCS_PSS),
            Mechanism::HashRsaPkcs(h) => hash_pkcs_mechanism(*h).unwrap_or(CKM_RSA_PKCS),
            Mechanism::RsaOaep(_) => CKM_RSA_PKCS_OAEP,
            Mechanism::Digest(h) => digest_mechanism(*h),
            Mechanism::AesKeyGen => CKM_AES_KEY_GEN,
            Mechanism::GenericSecretKeyGen => CKM_GENERIC_SECRET_KEY_GEN,
            Mechanism::AesKeyWrap => CKM_AES_KEY_WRAP,
            Mechanism::AesKeyWrapPad => CKM_AES_KEY_WRAP_PAD,
            Mechanism::Aes(mode) => mode.mechanism_type(),
            Mechanism::EcKeyPairGen => CKM_EC_KEY_PAIR_GEN,
            Mechanism::EcEdwardsKeyPairGen => CKM_EC_EDWARDS_KEY_PAIR_GEN,
            Mechanism::Ecdsa(None) => CKM_ECDSA,
            Mechanism::Ecdsa(Some(h)) => hash_ecdsa_mechanism(*h).unwrap_or(CKM_ECDSA),
            Mechanism::EdDsa { .. } => CKM_EDDSA,
            Mechanism::Ecdh1Derive { .. } => CKM_ECDH1_DERIVE,
            Mechanism::AesEncryptData { iv: None, .. } => CKM_AES_ECB_ENCRYPT_DATA,
            Mechanism::AesEncryptData { iv: Some(_), .. } => CKM_AES_CBC_ENCRYPT_DATA,
            Mechanism::Mac(m) => m.mechanism_type(),
            Mechanism::PqKeyPairGen(kt) => {
                pq::family(*kt).map_or(CK_UNAVAILABLE_INFORMATION, |f| f.key_pair_gen())
            }
            Mechanism::PqSign {
                key_type, prehash, ..
            } => pq::mechanism_type(*key_type, *prehash),
        }
    }

    /// The key type the mechanism works with; `None` for digests. A MAC names its usual one
    /// (`accepts_key_type` has all it takes).
    pub fn key_type(&self) -> Option<CK_KEY_TYPE> {
        match self {
            Mechanism::Digest(_) => None,
            Mechanism::Mac(m) => Some(match m.alg {
                mac::MacAlg::AesCmac | mac::MacAlg::AesMac => CKK_AES,
                mac::MacAlg::Hmac(_) => CKK_GENERIC_SECRET,
            }),
            Mechanism::AesKeyGen
            | Mechanism::AesKeyWrap
            | Mechanism::AesKeyWrapPad
            | Mechanism::Aes(_)
            | Mechanism::AesEncryptData { .. } => Some(CKK_AES),
            Mechanism::GenericSecretKeyGen => Some(CKK_GENERIC_SECRET),
            Mechanism::EcKeyPairGen | Mechanism::Ecdsa(_) | Mechanism::Ecdh1Derive { .. } => Some(CKK_EC),
            Mechanism::EcEdwardsKeyPairGen | Mechanism::EdDsa { .. } => Some(CKK_EC_EDWARDS),
            Mechanism::PqKeyPairGen(kt) | Mechanism::PqSign { key_type: kt, .. } => Some(*kt),
            _ => Some(CKK_RSA),
        }
    }

    /// Whether a key of type `kt` suits the mechanism: the one `key_type`, or for a MAC any
    /// of the types it takes.
    pub fn accepts_key_type(&self, kt: Option<CK_KEY_TYPE>) -> bool {
        match (self, kt) {
            (Mechanism::Mac(m), Some(kt)) => m.alg.accepts_key_type(kt),
            _ => self.key_type().is_some() && kt == self.key_type(),
        }
    }

    /// The hash a mechanism applies to the data before signing (hash-and-sign mechanisms).
    pub fn prehash(&self) -> Option<HashAlg> {
        match self {
            Mechanism::Ecdsa(h) => *h,
            Mechanism::PqSign { prehash, .. } => *prehash,
            Mechanism::Mac(_) | Mechanism::PqKeyPairGen(_) => None,
            m => rsa::prehash(m),
        }
    }
}

/// The hash-and-sign ECDSA mechanism of each hash, and back.
const HASH_ECDSA: &[(CK_MECHANISM_TYPE, HashAlg)] = &[
    (CKM_ECDSA_SHA1, HashAlg::Sha1),
    (CKM_ECDSA_SHA224, HashAlg::Sha224),
    (CKM_ECDSA_SHA256, HashAlg::Sha256),
    (CKM_ECDSA_SHA384, HashAlg::Sha384),
    (CKM_ECDSA_SHA512, HashAlg::Sha512),
];

pub fn hash_of_ecdsa_mechanism(m: CK_MECHANISM_TYPE) -> Option<HashAlg> {
    HASH_ECDSA.iter().find(|(t, _)| *t == m).map(|(_, h)| *h)
}

fn hash_ecdsa_mechanism(h: HashAlg) -> Option<CK_MECHANISM_TYPE> {
    HASH_ECDSA.iter().find(|(_, x)| *x == h).map(|(t, _)| *t)
}

/// Smallest and largest EC key the token has, as `C_GetMechanismInfo` counts: field bits.
pub const EC_MIN_BITS: CK_ULONG = 256;
pub const EC_MAX_BITS: CK_ULONG = 521;
/// Ed25519's field is 2^255 - 19.
pub const ED25519_BITS: CK_ULONG = 255;
/// Ed448's field is 2^448 - 2^224 - 1.
pub const ED448_BITS: CK_ULONG = 448;

pub fn digest_mechanism(h: HashAlg) -> CK_MECHANISM_TYPE {
    match h {
        HashAlg::Md5 => CKM_MD5,
        HashAlg::Sha1 => CKM_SHA_1,
        HashAlg::Sha224 => CKM_SHA224,
        HashAlg::Sha256 => CKM_SHA256,
        HashAlg::Sha384 => CKM_SHA384,
        HashAlg::Sha512 => CKM_SHA512,
        HashAlg::Sha3_224 => CKM_SHA3_224,
        HashAlg::Sha3_256 => CKM_SHA3_256,
        HashAlg::Sha3_384 => CKM_SHA3_384,
        HashAlg::Sha3_512 => CKM_SHA3_512,
    }
}

/// The hash-and-sign PKCS#1 v1.5 mechanism of each hash, and back.
const HASH_PKCS: &[(CK_MECHANISM_TYPE, HashAlg)] = &[
    (CKM_MD5_RSA_PKCS, HashAlg::Md5),
    (CKM_SHA1_RSA_PKCS, HashAlg::Sha1),
    (CKM_SHA224_RSA_PKCS, HashAlg::Sha224),
    (CKM_SHA256_RSA_PKCS, HashAlg::Sha256),
    (CKM_SHA384_RSA_PKCS, HashAlg::Sha384),
    (CKM_SHA512_RSA_PKCS, HashAlg::Sha512),
    (CKM_SHA3_224_RSA_PKCS, HashAlg::Sha3_224),
    (CKM_SHA3_256_RSA_PKCS, HashAlg::Sha3_256),
    (CKM_SHA3_384_RSA_PKCS, HashAlg::Sha3_384),
    (CKM_SHA3_512_RSA_PKCS, HashAlg::Sha3_512),
];

const HASH_PSS: &[(CK_MECHANISM_TYPE, HashAlg)] = &[
    (CKM_SHA1_RSA_PKCS_PSS, HashAlg::Sha1),
    (CKM_SHA224_RSA_PKCS_PSS, HashAlg::Sha224),
    (CKM_SHA256_RSA_PKCS_PSS, HashAlg::Sha256),
    (CKM_SHA384_RSA_PKCS_PSS, HashAlg::Sha384),
    (CKM_SHA512_RSA_PKCS_PSS, HashAlg::Sha512),
    (CKM_SHA3_224_RSA_PKCS_PSS, HashAlg::Sha3_224),
    (CKM_SHA3_256_RSA_PKCS_PSS, HashAlg::Sha3_256),
    (CKM_SHA3_384_RSA_PKCS_PSS, HashAlg::Sha3_384),
    (CKM_SHA3_512_RSA_PKCS_PSS, HashAlg::Sha3_512),
];

pub fn hash_of_pkcs_mechanism(m: CK_MECHANISM_TYPE) -> Option<HashAlg> {
    HASH_PKCS.iter().find(|(t, _)| *t == m).map(|(_, h)| *h)
}

pub fn hash_of_pss_mechanism(m: CK_MECHANISM_TYPE) -> Option<HashAlg> {
    HASH_PSS.iter().find(|(t, _)| *t == m).map(|(_, h)| *h)
}

fn hash_pkcs_mechanism(h: HashAlg) -> Option<CK_MECHANISM_TYPE> {
    HASH_PKCS.iter().find(|(_, x)| *x == h).map(|(t, _)| *t)
}

fn hash_pss_mechanism(h: HashAlg) -> Option<CK_MECHANISM_TYPE> {
    HASH_PSS.iter().find(|(_, x)| *x == h).map(|(t, _)| *t)
}

/// Smallest and largest RSA modulus the token signs and verifies with, in bits.
pub const RSA_MIN_BITS: CK_ULONG = 1024;
pub const RSA_MAX_BITS: CK_ULONG = 16384;

/// Every mechanism the token offers, with `C_GetMechanismInfo`'s answer for it.
pub fn mechanism_list() -> Vec<(CK_MECHANISM_TYPE, CK_MECHANISM_INFO)> {
    let info = |min, max, flags| CK_MECHANISM_INFO {
        ulMinKeySize: min,
        ulMaxKeySize: max,
        flags,
    };
    let sign = CKF_SIGN | CKF_VERIFY;
    let crypt = CKF_ENCRYPT | CKF_DECRYPT;
    let mut v = vec![
        (
            CKM_RSA_PKCS_KEY_PAIR_GEN,
            info(
                crate::engine::keygen_limits().0 as CK_ULONG,
                crate::engine::keygen_limits().1 as CK_ULONG,
                CKF_GENERATE_KEY_PAIR,
            ),
        ),
        (CKM_RSA_PKCS, info(RSA_MIN_BITS, RSA_MAX_BITS, sign | crypt)),
        (CKM_RSA_X_509, info(RSA_MIN_BITS, RSA_MAX_BITS, sign | crypt)),
        (CKM_RSA_PKCS_PSS, info(RSA_MIN_BITS, RSA_MAX_BITS, sign)),
        (
            CKM_RSA_PKCS_OAEP,
            info(RSA_MIN_BITS, RSA_MAX_BITS, crypt | CKF_WRAP | CKF_UNWRAP),
        ),
    ];
    for (m, _) in HASH_PKCS.iter().chain(HASH_PSS.iter()) {
        v.push((*m, info(RSA_MIN_BITS, RSA_MAX_BITS, sign)));
    }
    for m in [
        CKM_MD5,
        CKM_SHA_1,
        CKM_SHA224,
        CKM_SHA256,
        CKM_SHA384,
        CKM_SHA512,
        CKM_SHA3_224,
        CKM_SHA3_256,
        CKM_SHA3_384,
        CKM_SHA3_512,
    ] {
        v.push((m, info(0, 0, CKF_DIGEST)));
    }
    v.push((CKM_AES_KEY_GEN, info(16, 32, CKF_GENERATE)));
    v.push((CKM_GENERIC_SECRET_KEY_GEN, info(8, 4096, CKF_GENERATE)));
    v.push((CKM_AES_KEY_WRAP, info(16, 32, CKF_WRAP | CKF_UNWRAP)));
    v.push((CKM_AES_KEY_WRAP_PAD, info(16, 32, CKF_WRAP | CKF_UNWRAP)));
    v.push((CKM_AES_ECB_ENCRYPT_DATA, info(16, 32, CKF_DERIVE)));
    v.push((CKM_AES_CBC_ENCRYPT_DATA, info(16, 32, CKF_DERIVE)));
    for m in [CKM_AES_ECB, CKM_AES_CBC, CKM_AES_CTR, CKM_AES_GCM] {
        v.push((m, info(16, 32, crypt)));
    }
    // CBC-PAD also wraps keys (secret values, private keys as PKCS#8), as SoftHSM's does.
    v.push((CKM_AES_CBC_PAD, info(16, 32, crypt | CKF_WRAP | CKF_UNWRAP)));
    // Prime-field curves, named by OID or by name, points uncompressed (PKCS#11 3.0 §2.3.1).
    let ec = CKF_EC_F_P | CKF_EC_OID | CKF_EC_CURVENAME | CKF_EC_UNCOMPRESS;
    v.push((
        CKM_EC_KEY_PAIR_GEN,
        info(EC_MIN_BITS, EC_MAX_BITS, CKF_GENERATE_KEY_PAIR | ec),
    ));
    v.push((CKM_ECDSA, info(EC_MIN_BITS, EC_MAX_BITS, sign | ec)));
    for (m, _) in HASH_ECDSA {
        v.push((*m, info(EC_MIN_BITS, EC_MAX_BITS, sign | ec)));
    }
    v.push((CKM_ECDH1_DERIVE, info(EC_MIN_BITS, EC_MAX_BITS, CKF_DERIVE | ec)));
    let ed = CKF_EC_OID | CKF_EC_CURVENAME;
    v.push((
        CKM_EC_EDWARDS_KEY_PAIR_GEN,
        info(ED25519_BITS, ED448_BITS, CKF_GENERATE_KEY_PAIR | ed),
    ));
    v.push((CKM_EDDSA, info(ED25519_BITS, ED448_BITS, sign | ed)));
    // MAC key sizes are in bytes (SoftHSM's and NSS's unit for these mechanisms).
    for (m, alg) in mac::mechanism_types() {
        let (min, max) = alg.key_sizes();
        v.push((m, info(min as CK_ULONG, max as CK_ULONG, sign)));
    }
    v.extend(pq::mechanism_list());
    v
}

/// Releases `sig` only if `verify` accepts it: a fault or a bug that made a wrong signature
/// must not hand out a value that could leak the key (as RSA's engine does with `e`). The one
/// check before release of every signature made outside the RSA engine; `algorithm` names it
/// in the log line.
pub fn release_checked(
    algorithm: &str,
    sig: Vec<u8>,
    verify: impl FnOnce(&[u8]) -> std::result::Result<(), ()>,
) -> crate::error::Result<Vec<u8>> {
    match verify(&sig) {
        Ok(()) => Ok(sig),
        Err(()) => {
            log::error!("{algorithm} signature failed verification with its own public key; not released");
            Err(crate::error::Error(CKR_DEVICE_ERROR))
        }
    }
}

pub fn mechanism_info(m: CK_MECHANISM_TYPE) -> Option<CK_MECHANISM_INFO> {
    mechanism_list()
        .into_iter()
        .find(|(t, _)| *t == m)
        .map(|(_, i)| i)
}
