//! Checkpoints: records whose `detail` is an Ed25519 signature, by the token's audit key, over
//! the token, the checkpoint's number and time, and the hash of the record before it, which
//! covers the whole chain up to there. The SO makes the key (`ferrohsm-util audit init`); its
//! public half goes to a file once, and whoever holds that file checks a log offline.
//!
//! Why a signature on top of the hash chain: anyone who can write the store can recompute
//! every hash after a change; nobody without the audit key can sign the result.

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};

const DOMAIN: &[u8] = b"ferrohsm audit checkpoint 1\n";

fn message(token: &str, seq: u64, time: &str, prev: &[u8]) -> Vec<u8> {
    let mut m = DOMAIN.to_vec();
    m.extend_from_slice(&(token.len() as u32).to_be_bytes());
    m.extend_from_slice(token.as_bytes());
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend_from_slice(&(time.len() as u32).to_be_bytes());
    m.extend_from_slice(time.as_bytes());
    m.extend_from_slice(prev);
    m
}

pub fn sign(key: &SigningKey, token: &str, seq: u64, time: &str, prev: &[u8]) -> [u8; 64] {
    key.sign(&message(token, seq, time, prev)).to_bytes()
}

pub fn check(key: &VerifyingKey, token: &str, seq: u64, time: &str, prev: &[u8], sig: &[u8]) -> bool {
    let Ok(sig) = Signature::from_slice(sig) else {
        return false;
    };
    key.verify(&message(token, seq, time, prev), &sig).is_ok()
}

/// The public half as the file `audit init` writes (SubjectPublicKeyInfo PEM, what
/// `openssl pkey -pubin` reads).
pub fn public_pem(key: &VerifyingKey) -> String {
    use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePublicKey};
    key.to_public_key_pem(LineEnding::LF)
        .expect("an Ed25519 public key encodes")
}

pub fn read_public_pem(text: &str) -> Option<VerifyingKey> {
    use ed25519_dalek::pkcs8::DecodePublicKey;
    VerifyingKey::from_public_key_pem(text.trim()).ok()
}
