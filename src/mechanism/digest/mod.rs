//! The digest family: `CKM_MD5`, `CKM_SHA_1`, SHA-2 and SHA-3, single and multi-part. The hash
//! functions themselves are `mechanism::hash`, which other families share.

use crate::error::Result;
use crate::mechanism::{info, Family, HashAlg, Mechanism, Param, ParamShape, Params};
use cryptoki_sys::*;
use std::sync::Arc;

pub struct Digest;

/// Every digest the token offers, in list order.
const DIGESTS: [HashAlg; 10] = [
    HashAlg::Md5,
    HashAlg::Sha1,
    HashAlg::Sha224,
    HashAlg::Sha256,
    HashAlg::Sha384,
    HashAlg::Sha512,
    HashAlg::Sha3_224,
    HashAlg::Sha3_256,
    HashAlg::Sha3_384,
    HashAlg::Sha3_512,
];

pub fn mechanism_type(h: HashAlg) -> CK_MECHANISM_TYPE {
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

impl Family for Digest {
    fn name(&self) -> &'static str {
        "digest"
    }

    fn offers(&self) -> Vec<(CK_MECHANISM_TYPE, CK_MECHANISM_INFO)> {
        DIGESTS
            .iter()
            .map(|h| (mechanism_type(*h), info(0, 0, CKF_DIGEST)))
            .collect()
    }

    fn param_shape(&self, t: CK_MECHANISM_TYPE) -> Option<ParamShape> {
        // A digest takes no parameter; one given is ignored.
        HashAlg::from_digest_mechanism(t).map(|_| ParamShape::Length)
    }

    fn parse(&self, t: CK_MECHANISM_TYPE, _: Param<'_>) -> Result<Params> {
        match HashAlg::from_digest_mechanism(t) {
            Some(h) => Ok(Arc::new(h)),
            None => crate::error::fail(CKR_MECHANISM_INVALID),
        }
    }

    /// A digest takes no key (`C_DigestKey` adds a secret key's value to the data).
    fn accepts_key_type(&self, _: &Mechanism, _: CK_KEY_TYPE) -> bool {
        false
    }

    fn digest(&self, m: &Mechanism) -> Option<HashAlg> {
        m.params().copied()
    }
}
