//! The EdDSA family: `CKM_EC_EDWARDS_KEY_PAIR_GEN` and `CKM_EDDSA` on Ed25519 (`ed25519`) and
//! Ed448 (`ed448`), with `CK_EDDSA_PARAMS`. It shares the EC folder because Edwards keys are
//! objects of the EC key model (`CKA_EC_PARAMS`, `CKA_EC_POINT`, `key`).

pub use super::ed25519::{check_context, check_params, MAX_CONTEXT};

use super::ops::{EcSigner, EcVerifier};
use super::{PrivateKey, PublicKey};
use crate::error::{fail, fail_because, Result};
use crate::mechanism::message::Message;
use crate::mechanism::{
    info, params_of, Family, Generates, Key, Mechanism, Op, Param, ParamShape, Params, Signer, Verifier,
};
use cryptoki_sys::*;
use std::sync::Arc;

pub struct EdDsa;

/// A mechanism of the EdDSA family with its parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EdDsaMechanism {
    KeyPairGen,
    /// `CKM_EDDSA`: pure Ed25519, or Ed448 with `context` (`CK_EDDSA_PARAMS`; empty without
    /// one). The prehash schemes are refused when the parameter is read.
    Sign {
        context: Vec<u8>,
    },
}

/// Ed25519's field is 2^255 - 19.
pub const ED25519_BITS: CK_ULONG = 255;
/// Ed448's field is 2^448 - 2^224 - 1.
pub const ED448_BITS: CK_ULONG = 448;

impl Family for EdDsa {
    fn name(&self) -> &'static str {
        "EdDSA"
    }

    fn offers(&self) -> Vec<(CK_MECHANISM_TYPE, CK_MECHANISM_INFO)> {
        let ed = CKF_EC_OID | CKF_EC_CURVENAME;
        vec![
            (
                CKM_EC_EDWARDS_KEY_PAIR_GEN,
                info(ED25519_BITS, ED448_BITS, CKF_GENERATE_KEY_PAIR | ed),
            ),
            (
                CKM_EDDSA,
                info(ED25519_BITS, ED448_BITS, CKF_SIGN | CKF_VERIFY | ed),
            ),
        ]
    }

    fn param_shape(&self, t: CK_MECHANISM_TYPE) -> Option<ParamShape> {
        match t {
            CKM_EC_EDWARDS_KEY_PAIR_GEN => Some(ParamShape::Length),
            CKM_EDDSA => Some(ParamShape::Eddsa),
            _ => None,
        }
    }

    fn parse(&self, t: CK_MECHANISM_TYPE, param: Param<'_>) -> Result<Params> {
        let m = match (t, param) {
            (CKM_EC_EDWARDS_KEY_PAIR_GEN, _) => EdDsaMechanism::KeyPairGen,
            (_, Param::Eddsa { ph_flag, context }) => {
                check_params(ph_flag, context.len() as usize)?;
                EdDsaMechanism::Sign {
                    context: context.read()?,
                }
            }
            (_, Param::Absent) => EdDsaMechanism::Sign { context: Vec::new() },
            _ => return fail_because(CKR_MECHANISM_PARAM_INVALID, "CKM_EDDSA takes CK_EDDSA_PARAMS"),
        };
        Ok(Arc::new(m))
    }

    fn accepts_key_type(&self, _: &Mechanism, kt: CK_KEY_TYPE) -> bool {
        kt == CKK_EC_EDWARDS
    }

    fn key_class(&self, m: &Mechanism, op: Op) -> Option<CK_OBJECT_CLASS> {
        match (params_of::<EdDsaMechanism>(m).ok()?, op) {
            (EdDsaMechanism::Sign { .. }, Op::Sign) => Some(CKO_PRIVATE_KEY),
            (EdDsaMechanism::Sign { .. }, Op::Verify) => Some(CKO_PUBLIC_KEY),
            _ => None,
        }
    }

    /// Refuses, when the operation starts, a context the key's curve cannot sign.
    fn signer(&self, m: &Mechanism, key: Key) -> Result<Box<dyn Signer>> {
        let EdDsaMechanism::Sign { context } = params_of(m)? else {
            return fail(CKR_MECHANISM_INVALID);
        };
        let key = key.private::<PrivateKey>()?;
        check_context(key.curve(), context)?;
        Ok(Box::new(EcSigner {
            key,
            context: context.clone(),
            message: Message::buffered(m.mechanism_type()),
        }))
    }

    fn verifier(&self, m: &Mechanism, key: Key) -> Result<Box<dyn Verifier>> {
        let EdDsaMechanism::Sign { context } = params_of(m)? else {
            return fail(CKR_MECHANISM_INVALID);
        };
        let key = key.public::<PublicKey>()?;
        check_context(key.curve(), context)?;
        Ok(Box::new(EcVerifier {
            key,
            context: context.clone(),
            message: Message::buffered(m.mechanism_type()),
        }))
    }

    fn generates(&self, m: &Mechanism) -> Option<Generates> {
        matches!(m.params(), Some(EdDsaMechanism::KeyPairGen)).then_some(Generates::KeyPair(CKK_EC_EDWARDS))
    }

    fn key_model(&self) -> Option<&dyn crate::mechanism::KeyModel> {
        Some(&super::model::EDWARDS_KEYS)
    }
}
