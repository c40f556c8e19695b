//! What the RSA family offers to `C_GetMechanismList`/`C_GetMechanismInfo`, and its
//! parameters (`CK_RSA_PKCS_PSS_PARAMS`, `CK_RSA_PKCS_OAEP_PARAMS`) checked into a `Mechanism`.

use super::ops::{RsaCrypt, RsaSigner, RsaVerifier};
use super::{OaepParams, PssParams, Scheme};
use crate::engine::{PreparedKey, PublicKey};
use crate::error::{fail_because, Error, Result};
use crate::mechanism::message::Message;
use crate::mechanism::{
    info, params_of, Crypter, Family, Generates, HashAlg, Key, Mechanism, Op, Param, ParamShape, Params,
    Signer, Verifier,
};
use cryptoki_sys::*;
use std::sync::Arc;
use zeroize::Zeroizing;

pub struct Rsa;

/// Smallest and largest RSA modulus the token signs and verifies with, in bits.
pub const RSA_MIN_BITS: CK_ULONG = 1024;
pub const RSA_MAX_BITS: CK_ULONG = 16384;

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

fn hash_of(table: &[(CK_MECHANISM_TYPE, HashAlg)], m: CK_MECHANISM_TYPE) -> Option<HashAlg> {
    table.iter().find(|(t, _)| *t == m).map(|(_, h)| *h)
}

fn mechanism_of(table: &[(CK_MECHANISM_TYPE, HashAlg)], h: HashAlg) -> Option<CK_MECHANISM_TYPE> {
    table.iter().find(|(_, x)| *x == h).map(|(t, _)| *t)
}

pub fn hash_pkcs_mechanism(h: HashAlg) -> Option<CK_MECHANISM_TYPE> {
    mechanism_of(HASH_PKCS, h)
}

pub fn hash_pss_mechanism(h: HashAlg) -> Option<CK_MECHANISM_TYPE> {
    mechanism_of(HASH_PSS, h)
}

fn param_hash(h: CK_MECHANISM_TYPE) -> Result<HashAlg> {
    HashAlg::from_digest_mechanism(h)
        .filter(|h| *h != HashAlg::Md5)
        .ok_or_else(|| {
            log::info!("CKR_MECHANISM_PARAM_INVALID: hash 0x{h:x} is not supported here");
            Error(CKR_MECHANISM_PARAM_INVALID)
        })
}

fn param_mgf(m: CK_RSA_PKCS_MGF_TYPE) -> Result<HashAlg> {
    HashAlg::from_mgf(m).ok_or_else(|| {
        log::info!("CKR_MECHANISM_PARAM_INVALID: MGF 0x{m:x} is not supported");
        Error(CKR_MECHANISM_PARAM_INVALID)
    })
}

impl Family for Rsa {
    fn name(&self) -> &'static str {
        "RSA"
    }

    fn offers(&self) -> Vec<(CK_MECHANISM_TYPE, CK_MECHANISM_INFO)> {
        let sign = CKF_SIGN | CKF_VERIFY;
        let crypt = CKF_ENCRYPT | CKF_DECRYPT;
        let (gen_min, gen_max) = crate::engine::keygen_limits();
        let mut v = vec![
            (
                CKM_RSA_PKCS_KEY_PAIR_GEN,
                info(gen_min as CK_ULONG, gen_max as CK_ULONG, CKF_GENERATE_KEY_PAIR),
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
        v
    }

    fn param_shape(&self, t: CK_MECHANISM_TYPE) -> Option<ParamShape> {
        match t {
            CKM_RSA_PKCS_KEY_PAIR_GEN | CKM_RSA_PKCS | CKM_RSA_X_509 => Some(ParamShape::Length),
            CKM_RSA_PKCS_OAEP => Some(ParamShape::RsaPkcsOaep),
            CKM_RSA_PKCS_PSS => Some(ParamShape::RsaPkcsPss),
            // Parameters of the hash-and-sign PKCS#1 mechanisms are ignored: PowerDNS and
            // others pass junk there.
            _ if hash_of(HASH_PKCS, t).is_some() => Some(ParamShape::Length),
            _ if hash_of(HASH_PSS, t).is_some() => Some(ParamShape::RsaPkcsPss),
            _ => None,
        }
    }

    fn parse(&self, t: CK_MECHANISM_TYPE, param: Param<'_>) -> Result<Params> {
        let scheme = match t {
            CKM_RSA_PKCS_KEY_PAIR_GEN => Scheme::KeyPairGen,
            CKM_RSA_PKCS => Scheme::Pkcs,
            CKM_RSA_X_509 => Scheme::X509,
            CKM_RSA_PKCS_OAEP => oaep(param)?,
            _ => match hash_of(HASH_PKCS, t) {
                Some(h) => Scheme::HashPkcs(h),
                None => pss(hash_of(HASH_PSS, t), param)?,
            },
        };
        Ok(Arc::new(scheme))
    }

    fn accepts_key_type(&self, _: &Mechanism, kt: CK_KEY_TYPE) -> bool {
        kt == CKK_RSA
    }

    fn key_class(&self, m: &Mechanism, op: Op) -> Option<CK_OBJECT_CLASS> {
        let scheme = params_of::<Scheme>(m).ok()?;
        let signs = !matches!(scheme, Scheme::KeyPairGen | Scheme::Oaep(_));
        let crypts = matches!(scheme, Scheme::Pkcs | Scheme::X509 | Scheme::Oaep(_));
        let wraps = matches!(scheme, Scheme::Oaep(_));
        match op {
            Op::Sign if signs => Some(CKO_PRIVATE_KEY),
            Op::Verify if signs => Some(CKO_PUBLIC_KEY),
            Op::Encrypt if crypts => Some(CKO_PUBLIC_KEY),
            Op::Decrypt if crypts => Some(CKO_PRIVATE_KEY),
            Op::Wrap if wraps => Some(CKO_PUBLIC_KEY),
            Op::Unwrap if wraps => Some(CKO_PRIVATE_KEY),
            _ => None,
        }
    }

    fn signer(&self, m: &Mechanism, key: Key) -> Result<Box<dyn Signer>> {
        let scheme = params_of::<Scheme>(m)?.clone();
        Ok(Box::new(RsaSigner {
            message: Message::hashed(m.mechanism_type(), super::prehash(&scheme)),
            scheme,
            key: key.private::<PreparedKey>()?,
        }))
    }

    fn verifier(&self, m: &Mechanism, key: Key) -> Result<Box<dyn Verifier>> {
        let scheme = params_of::<Scheme>(m)?.clone();
        Ok(Box::new(RsaVerifier {
            message: Message::hashed(m.mechanism_type(), super::prehash(&scheme)),
            scheme,
            key: key.public::<PublicKey>()?,
        }))
    }

    fn crypter(&self, m: &Mechanism, key: Key, encrypt: bool) -> Result<Box<dyn Crypter>> {
        let scheme = params_of::<Scheme>(m)?.clone();
        Ok(Box::new(if encrypt {
            RsaCrypt::Encrypt(scheme, key.public::<PublicKey>()?)
        } else {
            RsaCrypt::Decrypt(scheme, key.private::<PreparedKey>()?)
        }))
    }

    fn wrap(&self, m: &Mechanism, key: Key, value: &[u8]) -> Result<Vec<u8>> {
        let key = key.public::<PublicKey>()?;
        super::encrypt(params_of(m)?, &key, value).map_err(|e| {
            if e.0 == CKR_DATA_LEN_RANGE {
                Error(CKR_KEY_SIZE_RANGE)
            } else {
                e
            }
        })
    }

    fn unwrap(&self, m: &Mechanism, key: Key, wrapped: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        let key = key.private::<PreparedKey>()?;
        if wrapped.len() != key.modulus_len() {
            return crate::error::fail(CKR_WRAPPED_KEY_LEN_RANGE);
        }
        super::decrypt(params_of(m)?, &key, wrapped).map_err(|_| Error(CKR_WRAPPED_KEY_INVALID))
    }

    fn unwrap_reveals_nothing(&self, m: &Mechanism) -> bool {
        // OAEP, the one RSA unwrap: every failure is CKR_WRAPPED_KEY_INVALID after the whole
        // decoding (`pad::oaep_decode`: one error, no early exit on secret data), so Manger's
        // oracle gets no answer.
        matches!(m.params(), Some(Scheme::Oaep(_)))
    }

    fn generates(&self, m: &Mechanism) -> Option<Generates> {
        matches!(m.params(), Some(Scheme::KeyPairGen)).then_some(Generates::KeyPair(CKK_RSA))
    }

    fn key_model(&self) -> Option<&dyn crate::mechanism::KeyModel> {
        Some(&super::keys::RsaKeys)
    }
}

fn oaep(param: Param<'_>) -> Result<Scheme> {
    let Param::RsaPkcsOaep {
        hash_alg,
        mgf,
        source,
        source_data,
    } = param
    else {
        return fail_because(
            CKR_MECHANISM_PARAM_INVALID,
            "CKM_RSA_PKCS_OAEP needs CK_RSA_PKCS_OAEP_PARAMS",
        );
    };
    let label = match source {
        CKZ_DATA_SPECIFIED => source_data.read()?,
        0 if source_data.is_empty() => vec![],
        _ => {
            return fail_because(
                CKR_MECHANISM_PARAM_INVALID,
                "OAEP source must be CKZ_DATA_SPECIFIED",
            )
        }
    };
    Ok(Scheme::Oaep(OaepParams {
        hash: param_hash(hash_alg)?,
        mgf: param_mgf(mgf)?,
        label,
    }))
}

/// `CKM_RSA_PKCS_PSS` (`prehash` `None`) or a `CKM_SHAx_RSA_PKCS_PSS`, whose parameter may be
/// left out (the mechanism's hash for both, a salt of the hash's length).
fn pss(prehash: Option<HashAlg>, param: Param<'_>) -> Result<Scheme> {
    let params = match (param, prehash) {
        (Param::RsaPkcsPss { hash_alg, mgf, s_len }, _) => PssParams {
            hash: param_hash(hash_alg)?,
            mgf: param_mgf(mgf)?,
            salt_len: s_len as usize,
        },
        (_, Some(h)) => PssParams {
            hash: h,
            mgf: h,
            salt_len: h.output_len(),
        },
        (_, None) => {
            return fail_because(
                CKR_MECHANISM_PARAM_INVALID,
                "CKM_RSA_PKCS_PSS needs CK_RSA_PKCS_PSS_PARAMS",
            )
        }
    };
    if prehash.is_some_and(|h| h != params.hash) {
        return fail_because(
            CKR_MECHANISM_PARAM_INVALID,
            "PSS hashAlg differs from the mechanism's hash",
        );
    }
    if params.salt_len > 1024 {
        return fail_because(CKR_MECHANISM_PARAM_INVALID, "PSS salt length out of range");
    }
    Ok(Scheme::Pss { prehash, params })
}
