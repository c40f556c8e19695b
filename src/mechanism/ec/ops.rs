//! The running signature and verification of both elliptic-curve families: ECDSA hashes its
//! message as it comes (or takes the hash), EdDSA keeps it whole with its context.

use super::{PrivateKey, PublicKey};
use crate::error::Result;
use crate::mechanism::message::Message;
use crate::mechanism::{Signer, Verifier};
use std::sync::Arc;

pub struct EcSigner {
    pub key: Arc<PrivateKey>,
    /// `CKM_EDDSA`'s context (empty for ECDSA and without one).
    pub context: Vec<u8>,
    pub message: Message,
}

impl Signer for EcSigner {
    fn signature_len(&self) -> usize {
        self.key.signature_len()
    }

    fn update(&mut self, data: &[u8]) -> Result<()> {
        self.message.update(data)
    }

    fn sign(&self, one_shot: Option<&[u8]>) -> Result<Vec<u8>> {
        self.key
            .sign_with_context(&self.message.finish(one_shot)?, &self.context)
    }
}

pub struct EcVerifier {
    pub key: Arc<PublicKey>,
    pub context: Vec<u8>,
    pub message: Message,
}

impl Verifier for EcVerifier {
    fn update(&mut self, data: &[u8]) -> Result<()> {
        self.message.update(data)
    }

    fn verify(&self, one_shot: Option<&[u8]>, signature: &[u8]) -> Result<()> {
        self.key
            .verify_with_context(&self.message.finish(one_shot)?, &self.context, signature)
    }
}
