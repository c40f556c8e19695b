//! A post-quantum family as a family of `mechanism::REGISTRY` (`Pq(&MlDsa)`): its mechanisms
//! offered, parsed and run the same way for every family, so that a family's folder needs to
//! implement `pq::Family` only.

use super::{check_params, Family, PreHash, PreHasher, PrivateKey, PublicKey, SignParams};
use crate::error::{fail, fail_because, Result};
use crate::mechanism::message::Message;
use crate::mechanism::{
    self, info, params_of, Generates, Key, Mechanism, Op, Param, ParamShape, Params, Signer, Verifier,
};
use cryptoki_sys::*;
use std::sync::Arc;

pub struct Pq(pub &'static dyn Family);

/// A mechanism of a post-quantum family with its parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PqMechanism {
    KeyPairGen,
    /// A signature (`CKM_ML_DSA`, `CKM_SLH_DSA`, or with `prehash` their `CKM_HASH_*`
    /// mechanisms) with its `CK_SIGN_ADDITIONAL_CONTEXT`. `hashed_by_caller`: the data is
    /// PH(M) (`CKM_HASH_ML_DSA`, `CKM_HASH_SLH_DSA`), not M.
    Sign {
        prehash: Option<PreHash>,
        hashed_by_caller: bool,
        params: SignParams,
    },
}

impl Pq {
    fn sign_params(m: &Mechanism) -> Result<(Option<PreHash>, &SignParams, Data)> {
        match params_of(m)? {
            PqMechanism::Sign {
                prehash,
                hashed_by_caller,
                params,
            } => Ok((*prehash, params, Data::new(m, *prehash, *hashed_by_caller))),
            PqMechanism::KeyPairGen => fail(CKR_MECHANISM_INVALID),
        }
    }
}

/// The data of a signature as it arrives: a pure signature keeps the message whole (it is
/// hashed more than once), one that hashes on the token hashes it as it comes, and PH(M) from
/// the caller comes in one piece (PKCS#11 3.2: `CKM_HASH_ML_DSA` is single-part).
enum Data {
    Kept(Message),
    Hashing(PreHasher),
}

impl Data {
    fn new(m: &Mechanism, prehash: Option<PreHash>, hashed_by_caller: bool) -> Data {
        match prehash {
            Some(h) if !hashed_by_caller => Data::Hashing(h.hasher()),
            Some(_) => Data::Kept(Message::hashed(m.mechanism_type(), None)),
            None => Data::Kept(Message::buffered(m.mechanism_type())),
        }
    }

    fn update(&mut self, data: &[u8]) -> Result<()> {
        match self {
            Data::Kept(m) => m.update(data),
            Data::Hashing(h) => {
                h.update(data);
                Ok(())
            }
        }
    }

    /// M, PH(M) as given, or PH(M) of every part (and `one_shot` when it is the whole message).
    fn finish(&self, one_shot: Option<&[u8]>) -> Result<Vec<u8>> {
        match self {
            Data::Kept(m) => m.finish(one_shot),
            Data::Hashing(h) => {
                let mut h = h.clone();
                if let Some(data) = one_shot {
                    h.update(data);
                }
                Ok(h.finalize())
            }
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
            (f.hash_sign_mechanism(), info(CKF_SIGN | CKF_VERIFY)),
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
        } else if t == f.hash_sign_mechanism() {
            Some(ParamShape::HashSignAdditionalContext)
        } else {
            None
        }
    }

    fn parse(&self, t: CK_MECHANISM_TYPE, param: Param<'_>) -> Result<Params> {
        let f = self.0;
        if t == f.key_pair_gen() {
            return Ok(Arc::new(PqMechanism::KeyPairGen));
        }
        let mut prehash = f.hash_mechanisms().iter().find(|(m, _)| *m == t).map(|(_, h)| *h);
        let hashed_by_caller = t == f.hash_sign_mechanism();
        let params = match param {
            Param::SignAdditionalContext { hedge, context } => {
                check_params(hedge, context.len())?;
                SignParams {
                    hedge,
                    context: context.read()?,
                }
            }
            Param::HashSignAdditionalContext { hedge, context, hash } => {
                check_params(hedge, context.len())?;
                let Some(h) = PreHash::from_mechanism(hash) else {
                    return fail_because(
                        CKR_MECHANISM_PARAM_INVALID,
                        format!("hash 0x{hash:x} is no pre-hash of FIPS 204/205 that the token has"),
                    );
                };
                prehash = Some(h);
                SignParams {
                    hedge,
                    context: context.read()?,
                }
            }
            // CK_HASH_SIGN_ADDITIONAL_CONTEXT is required: it names the hash.
            _ if hashed_by_caller => {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    "CKM_HASH_ML_DSA/CKM_HASH_SLH_DSA need a CK_HASH_SIGN_ADDITIONAL_CONTEXT",
                )
            }
            _ => SignParams::default(),
        };
        Ok(Arc::new(PqMechanism::Sign {
            prehash,
            hashed_by_caller,
            params,
        }))
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
        let (prehash, params, message) = Self::sign_params(m)?;
        Ok(Box::new(PqSigner {
            key: key.private::<Arc<dyn PrivateKey>>()?.as_ref().clone(),
            prehash,
            params: params.clone(),
            message,
        }))
    }

    fn verifier(&self, m: &Mechanism, key: Key) -> Result<Box<dyn mechanism::Verifier>> {
        let (prehash, params, message) = Self::sign_params(m)?;
        Ok(Box::new(PqVerifier {
            key: key.public::<Arc<dyn PublicKey>>()?.as_ref().clone(),
            prehash,
            params: params.clone(),
            message,
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
    prehash: Option<PreHash>,
    params: SignParams,
    message: Data,
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
    prehash: Option<PreHash>,
    params: SignParams,
    message: Data,
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
