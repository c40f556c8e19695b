//! The running RSA operations: signature and verification over a message taken in parts
//! (hash-and-sign mechanisms) or whole, and single-part encryption and decryption.

use super::Scheme;
use crate::engine::{PreparedKey, PublicKey};
use crate::error::{fail_because, Result};
use crate::mechanism::message::Message;
use crate::mechanism::{Crypter, Signer, Verifier};
use cryptoki_sys::*;
use std::sync::Arc;
use zeroize::Zeroizing;

pub struct RsaSigner {
    pub scheme: Scheme,
    pub key: Arc<PreparedKey>,
    pub message: Message,
}

impl Signer for RsaSigner {
    fn signature_len(&self) -> usize {
        self.key.modulus_len()
    }

    fn update(&mut self, data: &[u8]) -> Result<()> {
        self.message.update(data)
    }

    fn sign(&self, one_shot: Option<&[u8]>) -> Result<Vec<u8>> {
        super::sign(&self.scheme, &self.key, &self.message.finish(one_shot)?)
    }
}

pub struct RsaVerifier {
    pub scheme: Scheme,
    pub key: Arc<PublicKey>,
    pub message: Message,
}

impl Verifier for RsaVerifier {
    fn update(&mut self, data: &[u8]) -> Result<()> {
        self.message.update(data)
    }

    fn verify(&self, one_shot: Option<&[u8]>, signature: &[u8]) -> Result<()> {
        super::verify(
            &self.scheme,
            &self.key,
            &self.message.finish(one_shot)?,
            signature,
        )
    }
}

/// RSA encryption (with the public key) or decryption (with the prepared private key):
/// single-part only.
pub enum RsaCrypt {
    Encrypt(Scheme, Arc<PublicKey>),
    Decrypt(Scheme, Arc<PreparedKey>),
}

fn single_part<T>() -> Result<T> {
    fail_because(
        CKR_MECHANISM_INVALID,
        "RSA encryption and decryption are single-part: use C_Encrypt/C_Decrypt",
    )
}

impl Crypter for RsaCrypt {
    fn is_multipart(&self) -> bool {
        false
    }

    /// The modulus length: exact for encryption, an upper bound for decryption.
    fn single_len(&self, _: usize) -> Result<usize> {
        Ok(match self {
            RsaCrypt::Encrypt(_, k) => k.modulus_len(),
            RsaCrypt::Decrypt(_, k) => k.modulus_len(),
        })
    }

    fn single(&self, data: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        match self {
            RsaCrypt::Encrypt(s, k) => super::encrypt(s, k, data).map(Zeroizing::new),
            RsaCrypt::Decrypt(s, k) => super::decrypt(s, k, data),
        }
    }

    fn update_len(&self, _: usize) -> Result<usize> {
        single_part()
    }

    fn update(&mut self, _: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        single_part()
    }

    fn final_len(&self) -> Result<usize> {
        single_part()
    }

    fn finish(&self) -> Result<Zeroizing<Vec<u8>>> {
        single_part()
    }
}
