//! State of the operations a session runs: signing and verifying (single and multi-part, with
//! private keys or, for MACs, secret keys), encryption, decryption, digesting, and object
//! searches.

use crate::engine::{PreparedKey, PublicKey};
use crate::error::{fail, fail_because, Result};
use crate::mechanism::aes_modes::AesCrypt;
use crate::mechanism::mac::Mac;
use crate::mechanism::{self, ec, ec_params, eddsa, pq, rsa, Hasher, Mechanism};
use cryptoki_sys::*;
use std::sync::Arc;
use zeroize::Zeroizing;

/// Whether an operation has taken multi-part input yet (one-shot calls are refused then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Fresh,
    MultiPart,
}

/// Most a multi-part EdDSA or pure ML-DSA/SLH-DSA operation buffers: pure Ed25519 hashes the
/// message twice, and SLH-DSA does too, so the whole of it is kept until the Final call.
const EDDSA_MAX_MESSAGE: usize = 64 << 20;

/// The data a sign or verify operation has taken so far.
pub struct Input {
    mech: Mechanism,
    hasher: Option<Hasher>,
    /// The message so far of a multi-part `CKM_EDDSA`, `CKM_ML_DSA` or `CKM_SLH_DSA`.
    buffer: Option<Vec<u8>>,
    /// The keyed state of a MAC mechanism: the MAC so far.
    mac: Option<Mac>,
    pub stage: Operation,
}

impl Input {
    fn new(mech: Mechanism, mac: Option<Mac>) -> Self {
        Input {
            hasher: mech.prehash().map(|h| h.hasher()),
            buffer: matches!(
                mech,
                Mechanism::EdDsa { .. } | Mechanism::PqSign { prehash: None, .. }
            )
            .then(Vec::new),
            mac,
            mech,
            stage: Operation::Fresh,
        }
    }

    fn update(&mut self, data: &[u8]) -> Result<()> {
        if let Some(m) = &mut self.mac {
            m.update(data);
            self.stage = Operation::MultiPart;
            return Ok(());
        }
        match (&mut self.hasher, &mut self.buffer) {
            (Some(h), _) => {
                h.update(data);
                self.stage = Operation::MultiPart;
                Ok(())
            }
            (None, Some(b)) => {
                if b.len() + data.len() > EDDSA_MAX_MESSAGE {
                    return fail_because(
                        CKR_DATA_LEN_RANGE,
                        format!(
                            "a multi-part message of this mechanism is limited to {EDDSA_MAX_MESSAGE} bytes"
                        ),
                    );
                }
                b.extend_from_slice(data);
                self.stage = Operation::MultiPart;
                Ok(())
            }
            (None, None) => fail_because(
                CKR_FUNCTION_NOT_SUPPORTED,
                format!(
                    "mechanism 0x{:x} is single-part only; use C_Sign/C_Verify",
                    self.mech.mechanism_type()
                ),
            ),
        }
    }

    /// Refuses a one-shot call once parts have been given (PKCS#11: only the Final call
    /// ends a multi-part operation).
    fn check_one_shot(&self, one_shot: Option<&[u8]>) -> Result<()> {
        if one_shot.is_some() && self.stage == Operation::MultiPart {
            return fail_because(
                CKR_OPERATION_ACTIVE,
                "a multi-part operation is running; finish it with the Final call",
            );
        }
        Ok(())
    }

    /// The MAC state with every part in, `None` for other mechanisms.
    fn finish_mac(&self, one_shot: Option<&[u8]>) -> Result<Option<Mac>> {
        self.check_one_shot(one_shot)?;
        Ok(self.mac.clone().map(|mut m| {
            if let Some(data) = one_shot {
                m.update(data);
            }
            m
        }))
    }

    /// `CKM_EDDSA`'s context (empty for every other mechanism).
    fn context(&self) -> &[u8] {
        match &self.mech {
            Mechanism::EdDsa { context } => context,
            _ => &[],
        }
    }

    /// The `CK_SIGN_ADDITIONAL_CONTEXT` and pre-hash of a post-quantum signature.
    fn pq_params(&self) -> Result<(Option<mechanism::HashAlg>, &pq::SignParams)> {
        match &self.mech {
            Mechanism::PqSign { prehash, params, .. } => Ok((*prehash, params)),
            _ => fail(CKR_OPERATION_NOT_INITIALIZED),
        }
    }

    /// Refuses, when the operation starts, an EdDSA context the key's curve cannot sign.
    fn check_context(&self, curve: ec_params::Curve) -> Result<()> {
        eddsa::check_context(curve, self.context())
    }

    /// The value the padding takes: the hash of everything, or the data of a one-shot raw call.
    fn finish(&self, one_shot: Option<&[u8]>) -> Result<Vec<u8>> {
        self.check_one_shot(one_shot)?;
        match (one_shot, &self.hasher) {
            (Some(data), Some(h)) => {
                let mut h = h.clone();
                h.update(data);
                Ok(h.finalize())
            }
            (Some(data), None) => Ok(data.to_vec()),
            (None, Some(h)) => Ok(h.clone().finalize()),
            (None, None) => match &self.buffer {
                Some(b) => Ok(b.clone()),
                None => fail(CKR_OPERATION_NOT_INITIALIZED),
            },
        }
    }
}

/// The private key of a signing operation.
#[derive(Clone)]
pub enum SignKey {
    Rsa(Arc<PreparedKey>),
    Ec(Arc<ec::PrivateKey>),
    /// A secret key of a MAC mechanism, keyed into the MAC's initial state (boxed: the hash
    /// states are large beside an `Arc`).
    Mac(Box<Mac>),
    /// A post-quantum private key (ML-DSA, SLH-DSA).
    Pq(Arc<dyn pq::PrivateKey>),
}

/// The public key of a verification.
#[derive(Clone)]
pub enum VerifyKey {
    Rsa(Arc<PublicKey>),
    Ec(Arc<ec::PublicKey>),
    /// A secret key of a MAC mechanism, keyed into the MAC's initial state (boxed: the hash
    /// states are large beside an `Arc`).
    Mac(Box<Mac>),
    /// A post-quantum public key (ML-DSA, SLH-DSA).
    Pq(Arc<dyn pq::PublicKey>),
}

pub struct SignOp {
    pub input: Input,
    pub key: SignKey,
    /// `CKA_ALWAYS_AUTHENTICATE` keys need `C_Login(CKU_CONTEXT_SPECIFIC)` before use.
    pub needs_auth: bool,
}

impl SignOp {
    pub fn new(mech: Mechanism, key: SignKey, needs_auth: bool) -> Result<Self> {
        let mac = match &key {
            SignKey::Mac(m) => Some(Mac::clone(m)),
            _ => None,
        };
        let input = Input::new(mech, mac);
        if let SignKey::Ec(k) = &key {
            input.check_context(k.curve())?;
        }
        Ok(SignOp {
            input,
            key,
            needs_auth,
        })
    }

    pub fn signature_len(&self) -> usize {
        match &self.key {
            SignKey::Rsa(k) => k.modulus_len(),
            SignKey::Ec(k) => k.signature_len(),
            SignKey::Mac(m) => m.output_len(),
            SignKey::Pq(k) => k.signature_len(),
        }
    }

    pub fn update(&mut self, data: &[u8]) -> Result<()> {
        self.input.update(data)
    }

    pub fn sign(&self, one_shot: Option<&[u8]>) -> Result<Vec<u8>> {
        if self.needs_auth {
            return fail_because(
                CKR_USER_NOT_LOGGED_IN,
                "this key has CKA_ALWAYS_AUTHENTICATE: call C_Login with CKU_CONTEXT_SPECIFIC first",
            );
        }
        if let Some(mac) = self.input.finish_mac(one_shot)? {
            return mac.finalize();
        }
        let value = self.input.finish(one_shot)?;
        match &self.key {
            SignKey::Rsa(k) => rsa::sign(&self.input.mech, k, &value),
            SignKey::Ec(k) => k.sign_with_context(&value, self.input.context()),
            SignKey::Pq(k) => {
                let (prehash, params) = self.input.pq_params()?;
                pq::sign(k.as_ref(), prehash, params, &value)
            }
            SignKey::Mac(_) => fail(CKR_OPERATION_NOT_INITIALIZED),
        }
    }
}

pub struct VerifyOp {
    pub input: Input,
    pub key: VerifyKey,
}

impl VerifyOp {
    pub fn new(mech: Mechanism, key: VerifyKey) -> Result<Self> {
        let mac = match &key {
            VerifyKey::Mac(m) => Some(Mac::clone(m)),
            _ => None,
        };
        let input = Input::new(mech, mac);
        if let VerifyKey::Ec(k) = &key {
            input.check_context(k.curve())?;
        }
        Ok(VerifyOp { input, key })
    }

    pub fn update(&mut self, data: &[u8]) -> Result<()> {
        self.input.update(data)
    }

    pub fn verify(&self, one_shot: Option<&[u8]>, signature: &[u8]) -> Result<()> {
        if let Some(mac) = self.input.finish_mac(one_shot)? {
            return mac.verify(signature);
        }
        let value = self.input.finish(one_shot)?;
        match &self.key {
            VerifyKey::Rsa(k) => rsa::verify(&self.input.mech, k, &value, signature),
            VerifyKey::Ec(k) => k.verify_with_context(&value, self.input.context(), signature),
            VerifyKey::Pq(k) => {
                let (prehash, params) = self.input.pq_params()?;
                pq::verify(k.as_ref(), prehash, params, &value, signature)
            }
            VerifyKey::Mac(_) => fail(CKR_OPERATION_NOT_INITIALIZED),
        }
    }
}

/// The key of an encryption or decryption operation.
pub enum CryptKey {
    Public(Arc<PublicKey>),
    Private(Arc<PreparedKey>),
}

/// An encryption or decryption: RSA (single-part only) or an AES mode (single or multi-part).
pub enum CryptOp {
    Rsa(RsaCrypt),
    Aes(AesCrypt),
}

pub struct RsaCrypt {
    pub mech: Mechanism,
    pub key: CryptKey,
    pub needs_auth: bool,
}

impl RsaCrypt {
    /// Upper bound of the output length (exact for encryption).
    pub fn output_len(&self) -> usize {
        match &self.key {
            CryptKey::Public(k) => k.modulus_len(),
            CryptKey::Private(k) => k.modulus_len(),
        }
    }

    pub fn run(&self, data: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        match &self.key {
            CryptKey::Public(k) => rsa::encrypt(&self.mech, k, data).map(Zeroizing::new),
            CryptKey::Private(k) => {
                if self.needs_auth {
                    return fail_because(
                        CKR_USER_NOT_LOGGED_IN,
                        "this key has CKA_ALWAYS_AUTHENTICATE: call C_Login with CKU_CONTEXT_SPECIFIC first",
                    );
                }
                rsa::decrypt(&self.mech, k, data)
            }
        }
    }
}

pub struct DigestOp {
    pub hasher: Hasher,
    pub alg: mechanism::HashAlg,
    pub stage: Operation,
}

pub struct FindOp {
    pub results: Vec<CK_OBJECT_HANDLE>,
    pub pos: usize,
    /// The store generation the results were found at (`Token::still_visible`).
    pub generation: u64,
}
