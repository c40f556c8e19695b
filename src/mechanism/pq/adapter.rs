//! A post-quantum family as a family of `mechanism::REGISTRY` (`Pq(&MlDsa)`): its mechanisms
//! offered, parsed and run the same way for every family, so that a family's folder needs to
//! implement `pq::Family` only.

use super::{check_params, Family, PrivateKey, PublicKey, SignParams};
use crate::error::{fail, Result};
use crate::mechanism::message::Message;
use crate::mechanism::{
    self, info, params_of, Generates, HashAlg, Key, Mechanism, Op, Param, ParamShape, Params, Signer,
    Verifier,
};
use cryptoki_sys::*;
use std::sync::Arc;

pub struct Pq(pub &'static dyn Family);

/// A mechanism of a post-quantum family with its parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PqMechanism {
    KeyPairGen,
    /// A signature (`CKM_ML_DSA`, `CKM_SLH_DSA`, or with `prehash` their `CKM_HASH_*`
    /// mechanisms) with its `CK_SIGN_ADDITIONAL_CONTEXT`.
    Sign {
        prehash: Option<HashAlg>,
        params: SignParams,
    },
}

impl Pq {
    fn sign_params(m: &Mechanism) -> Result<(Option<HashAlg>, &SignParams)> {
        match params_of(m)? {
            PqMechanism::Sign { prehash, params } => Ok((*prehash, params)),
            PqMechanism::KeyPairGen => fail(CKR_MECHANISM_INVALID),
        }
    }

    /// Pure signatures keep the message whole (it is hashed more than once); pre-hash ones
    /// hash it as it comes.
    fn message(m: &Mechanism, prehash: Option<HashAlg>) -> Message {
        match prehash {
            Some(_) => Message::hashed(m.mechanism_type(), prehash),
            None => Message::buffered(m.mechanism_type()),
        }
    }
}

impl mechanism::Family for Pq {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn offers(&self) -> Vec<(CK_MECHANISM_TYPE, CK_MECHANISM_INFO)> {
        let f = self.0;
        let (min, max) = f.key_sizes();
        let info = |flags| info(min, max, flags);
        let mut v = vec![
            (f.key_pair_gen(), info(CKF_GENERATE_KEY_PAIR)),
            (f.sign_mechanism(), info(CKF_SIGN | CKF_VERIFY)),
        ];
        for (m, _) in f.hash_mechanisms() {
            v.push((*m, info(CKF_SIGN | CKF_VERIFY)));
        }
        v
    }

    fn param_shape(&self, t: CK_MECHANISM_TYPE) -> Option<ParamShape> {
        let f = self.0;
        if t == f.key_pair_gen() {
            Some(ParamShape::Length)
        } else if t == f.sign_mechanism() || f.hash_mechanisms().iter().any(|(m, _)| *m == t) {
            Some(ParamShape::SignAdditionalContext)
        } else {
            None
        }
    }

    fn parse(&self, t: CK_MECHANISM_TYPE, param: Param<'_>) -> Result<Params> {
        let f = self.0;
        if t == f.key_pair_gen() {
            return Ok(Arc::new(PqMechanism::KeyPairGen));
        }
        let prehash = f.hash_mechanisms().iter().find(|(m, _)| *m == t).map(|(_, h)| *h);
        let params = match param {
            Param::SignAdditionalContext { hedge, context } => {
                check_params(hedge, context.len())?;
                SignParams {
                    hedge,
                    context: context.read()?,
                }
            }
            _ => SignParams::default(),
        };
        Ok(Arc::new(PqMechanism::Sign { prehash, params }))
    }

    fn accepts_key_type(&self, _: &Mechanism, kt: CK_KEY_TYPE) -> bool {
        kt == self.0.key_type()
    }

    fn key_class(&self, m: &Mechanism, op: Op) -> Option<CK_OBJECT_CLASS> {
        match (params_of::<PqMechanism>(m).ok()?, op) {
            (PqMechanism::Sign { .. }, Op::Sign) => Some(CKO_PRIVATE_KEY),
            (PqMechanism::Sign { .. }, Op::Verify) => Some(CKO_PUBLIC_KEY),
            _ => None,
        }
    }

    fn signer(&self, m: &Mechanism, key: Key) -> Result<Box<dyn mechanism::Signer>> {
        let (prehash, params) = Self::sign_params(m)?;
        Ok(Box::new(PqSigner {
            key: key.private::<Arc<dyn PrivateKey>>()?.as_ref().clone(),
            prehash,
            params: params.clone(),
            message: Self::message(m, prehash),
        }))
    }

    fn verifier(&self, m: &Mechanism, key: Key) -> Result<Box<dyn mechanism::Verifier>> {
        let (prehash, params) = Self::sign_params(m)?;
        Ok(Box::new(PqVerifier {
            key: key.public::<Arc<dyn PublicKey>>()?.as_ref().clone(),
            prehash,
            params: params.clone(),
            message: Self::message(m, prehash),
        }))
    }

    fn generates(&self, m: &Mechanism) -> Option<Generates> {
        matches!(m.params(), Some(PqMechanism::KeyPairGen)).then_some(Generates::KeyPair(self.0.key_type()))
    }

    fn key_model(&self) -> Option<&dyn mechanism::KeyModel> {
        Some(self)
    }

    fn post_quantum(&self) -> Option<&'static dyn Family> {
        Some(self.0)
    }
}

struct PqSigner {
    key: Arc<dyn PrivateKey>,
    prehash: Option<HashAlg>,
    params: SignParams,
    message: Message,
}

impl Signer for PqSigner {
    fn signature_len(&self) -> usize {
        self.key.signature_len()
    }

    fn update(&mut self, data: &[u8]) -> Result<()> {
        self.message.update(data)
    }

    fn sign(&self, one_shot: Option<&[u8]>) -> Result<Vec<u8>> {
        let value = self.message.finish(one_shot)?;
        super::sign(self.key.as_ref(), self.prehash, &self.params, &value)
    }
}

struct PqVerifier {
    key: Arc<dyn PublicKey>,
    prehash: Option<HashAlg>,
    params: SignParams,
    message: Message,
}

impl Verifier for PqVerifier {
    fn update(&mut self, data: &[u8]) -> Result<()> {
        self.message.update(data)
    }

    fn verify(&self, one_shot: Option<&[u8]>, signature: &[u8]) -> Result<()> {
        let value = self.message.finish(one_shot)?;
        super::verify(self.key.as_ref(), self.prehash, &self.params, &value, signature)
    }
}
