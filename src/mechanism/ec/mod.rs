//! The elliptic-curve families. `Ec` here: `CKM_EC_KEY_PAIR_GEN`, ECDSA (`CKM_ECDSA` and
//! `CKM_ECDSA_SHAx`) and `CKM_ECDH1_DERIVE` on P-256, P-384 and P-521; `EdDsa` (`eddsa.rs`):
//! `CKM_EDDSA` on Ed25519 (`ed25519.rs`) and Ed448 (`ed448.rs`). Both take keys of one key model
//! (`key.rs`: the keys, their checks, the signatures made with them and the check before
//! release; `model.rs`: their key objects, `CKK_EC` and `CKK_EC_EDWARDS`), hence one folder. The arithmetic with private keys is engine code (`ec_sign`,
//! `ec_check`).

pub mod ed25519;
pub mod ed448;
pub mod eddsa;
mod key;
pub mod model;
mod ops;

pub use eddsa::{EdDsa, ED25519_BITS, ED448_BITS};
pub use key::{release_checked, PrivateKey, PublicKey};

use crate::error::{fail, fail_because, Error, Result};
use crate::mechanism::ec_params;
use crate::mechanism::message::Message;
use crate::mechanism::{
    info, params_of, Derived, Family, Generates, HashAlg, Key, Mechanism, Op, Param, ParamShape, Params,
    Signer, Verifier,
};
use cryptoki_sys::*;
use ops::{EcSigner, EcVerifier};
use std::sync::Arc;

pub struct Ec;

/// A mechanism of the EC family with its parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EcMechanism {
    KeyPairGen,
    /// `CKM_ECDSA` (prehash `None`, input is the hash) or `CKM_ECDSA_SHAx`.
    Ecdsa(Option<HashAlg>),
    /// `CKM_ECDH1_DERIVE` with `CKD_NULL` and no shared data; the peer's public data as given
    /// (a raw or DER point).
    Ecdh1Derive {
        public_data: Vec<u8>,
    },
}

/// Smallest and largest EC key the token has, as `C_GetMechanismInfo` counts: field bits.
pub const EC_MIN_BITS: CK_ULONG = 256;
pub const EC_MAX_BITS: CK_ULONG = 521;

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

pub fn hash_ecdsa_mechanism(h: HashAlg) -> Option<CK_MECHANISM_TYPE> {
    HASH_ECDSA.iter().find(|(_, x)| *x == h).map(|(t, _)| *t)
}

impl Family for Ec {
    fn name(&self) -> &'static str {
        "EC"
    }

    fn offers(&self) -> Vec<(CK_MECHANISM_TYPE, CK_MECHANISM_INFO)> {
        // Prime-field curves, named by OID or by name, points uncompressed (PKCS#11 3.0
        // §2.3.1).
        let ec = CKF_EC_F_P | CKF_EC_OID | CKF_EC_CURVENAME | CKF_EC_UNCOMPRESS;
        let sign = CKF_SIGN | CKF_VERIFY;
        let mut v = vec![
            (
                CKM_EC_KEY_PAIR_GEN,
                info(EC_MIN_BITS, EC_MAX_BITS, CKF_GENERATE_KEY_PAIR | ec),
            ),
            (CKM_ECDSA, info(EC_MIN_BITS, EC_MAX_BITS, sign | ec)),
        ];
        for (m, _) in HASH_ECDSA {
            v.push((*m, info(EC_MIN_BITS, EC_MAX_BITS, sign | ec)));
        }
        v.push((CKM_ECDH1_DERIVE, info(EC_MIN_BITS, EC_MAX_BITS, CKF_DERIVE | ec)));
        v
    }

    fn param_shape(&self, t: CK_MECHANISM_TYPE) -> Option<ParamShape> {
        match t {
            CKM_EC_KEY_PAIR_GEN | CKM_ECDSA => Some(ParamShape::Length),
            CKM_ECDH1_DERIVE => Some(ParamShape::Ecdh1Derive),
            _ => hash_of_ecdsa_mechanism(t).map(|_| ParamShape::Length),
        }
    }

    fn parse(&self, t: CK_MECHANISM_TYPE, param: Param<'_>) -> Result<Params> {
        parse(t, param).map(|m| Arc::new(m) as Params)
    }

    fn accepts_key_type(&self, _: &Mechanism, kt: CK_KEY_TYPE) -> bool {
        kt == CKK_EC
    }

    fn key_class(&self, m: &Mechanism, op: Op) -> Option<CK_OBJECT_CLASS> {
        match (params_of::<EcMechanism>(m).ok()?, op) {
            (EcMechanism::Ecdsa(_), Op::Sign) => Some(CKO_PRIVATE_KEY),
            (EcMechanism::Ecdsa(_), Op::Verify) => Some(CKO_PUBLIC_KEY),
            (EcMechanism::Ecdh1Derive { .. }, Op::Derive) => Some(CKO_PRIVATE_KEY),
            _ => None,
        }
    }

    fn signer(&self, m: &Mechanism, key: Key) -> Result<Box<dyn Signer>> {
        let EcMechanism::Ecdsa(prehash) = params_of(m)? else {
            return fail(CKR_MECHANISM_INVALID);
        };
        Ok(Box::new(EcSigner {
            key: key.private()?,
            context: Vec::new(),
            message: Message::hashed(m.mechanism_type(), *prehash),
        }))
    }

    fn verifier(&self, m: &Mechanism, key: Key) -> Result<Box<dyn Verifier>> {
        let EcMechanism::Ecdsa(prehash) = params_of(m)? else {
            return fail(CKR_MECHANISM_INVALID);
        };
        Ok(Box::new(EcVerifier {
            key: key.public()?,
            context: Vec::new(),
            message: Message::hashed(m.mechanism_type(), *prehash),
        }))
    }

    /// `CKD_NULL`: the shared x-coordinate, the peer's point checked to be on the base key's
    /// curve first (no invalid-curve attack reaches the scalar).
    fn derive(&self, m: &Mechanism, key: Key) -> Result<Derived> {
        let EcMechanism::Ecdh1Derive { public_data } = params_of(m)? else {
            return fail(CKR_MECHANISM_INVALID);
        };
        let key = key.private::<PrivateKey>()?;
        let curve = key.curve();
        let bad_point = |_| Error(CKR_MECHANISM_PARAM_INVALID);
        let raw = ec_params::unwrap_point(curve, public_data).map_err(bad_point)?;
        let peer = PublicKey::from_point(curve, &raw).map_err(bad_point)?;
        Ok(Derived {
            secret: key.ecdh(&peer)?,
            len_from_param: false,
        })
    }

    fn generates(&self, m: &Mechanism) -> Option<Generates> {
        matches!(m.params(), Some(EcMechanism::KeyPairGen)).then_some(Generates::KeyPair(CKK_EC))
    }

    fn key_model(&self) -> Option<&dyn crate::mechanism::KeyModel> {
        Some(&model::EC_KEYS)
    }
}

fn parse(t: CK_MECHANISM_TYPE, param: Param<'_>) -> Result<EcMechanism> {
    match (t, param) {
        (CKM_EC_KEY_PAIR_GEN, _) => Ok(EcMechanism::KeyPairGen),
        (CKM_ECDSA, _) => Ok(EcMechanism::Ecdsa(None)),
        (
            CKM_ECDH1_DERIVE,
            Param::Ecdh1Derive {
                kdf,
                shared_data_len,
                public_data,
            },
        ) => {
            if kdf != CKD_NULL || shared_data_len != 0 {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    "CKM_ECDH1_DERIVE: only CKD_NULL without shared data is supported",
                );
            }
            Ok(EcMechanism::Ecdh1Derive {
                public_data: public_data.read_required()?,
            })
        }
        (CKM_ECDH1_DERIVE, _) => fail_because(
            CKR_MECHANISM_PARAM_INVALID,
            "CKM_ECDH1_DERIVE needs CK_ECDH1_DERIVE_PARAMS",
        ),
        _ => match hash_of_ecdsa_mechanism(t) {
            Some(h) => Ok(EcMechanism::Ecdsa(Some(h))),
            None => fail(CKR_MECHANISM_INVALID),
        },
    }
}
