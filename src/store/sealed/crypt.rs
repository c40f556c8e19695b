//! Encryption at rest: PIN-derived keys (Argon2id), the format-1 wrap of the token key under
//! them (read only: `owners` writes format 2), and AES-256-GCM of attribute values bound to
//! their token, object and attribute.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::Aes256Gcm;
use hmac::Mac;
use zeroize::Zeroizing;

pub type Key = Zeroizing<[u8; 32]>;

const WRAP_VERSION: u8 = 1;
const SALT_LEN: usize = 16;
const NONCE_LEN: usize = 12;

/// Argon2id parameters as stored with each wrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KdfParams {
    pub memory_kib: u32,
    pub passes: u32,
}

pub fn random_key() -> Key {
    let mut k = Zeroizing::new([0u8; 32]);
    getrandom::fill(&mut k[..]).expect("the OS random number generator failed");
    k
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).expect("the OS random number generator failed");
    b
}

pub fn derive_pin_key(pin: &[u8], salt: &[u8], p: KdfParams) -> Option<Key> {
    let params = argon2::Params::new(p.memory_kib, p.passes, 1, Some(32)).ok()?;
    let a = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut out = Zeroizing::new([0u8; 32]);
    a.hash_password_into(pin, salt, &mut out[..]).ok()?;
    Some(out)
}

/// A wrapped token key (format 1): version ‖ salt ‖ memory ‖ passes ‖ nonce ‖ AES-GCM(pin key, token key).
pub struct Wrap<'a>(pub &'a [u8]);

impl Wrap<'_> {
    pub fn salt(&self) -> Option<&[u8]> {
        self.0.get(1..1 + SALT_LEN)
    }

    pub fn params(&self) -> Option<KdfParams> {
        let b = self.0.get(1 + SALT_LEN..1 + SALT_LEN + 8)?;
        Some(KdfParams {
            memory_kib: u32::from_be_bytes(b[..4].try_into().ok()?),
            passes: u32::from_be_bytes(b[4..].try_into().ok()?),
        })
    }

    /// The token key, if `pin_key` opens this wrap (`None`: wrong PIN or damaged record).
    pub fn open(&self, pin_key: &Key, aad: &[u8]) -> Option<Key> {
        if self.0.first() != Some(&WRAP_VERSION) {
            return None;
        }
        let rest = self.0.get(1 + SALT_LEN + 8..)?;
        let plain = Cipher::new(pin_key).open(rest, aad)?;
        let mut k = Zeroizing::new([0u8; 32]);
        if plain.len() != 32 {
            return None;
        }
        k.copy_from_slice(&plain);
        Some(k)
    }
}

/// A wrap of format 1, as stores written before owner keys hold (`owners`): only tests write
/// them now.
#[cfg(test)]
pub fn wrap_with(token_key: &Key, pin_key: &Key, salt: &[u8], p: KdfParams, aad: &[u8]) -> Vec<u8> {
    let mut out = vec![WRAP_VERSION];
    out.extend_from_slice(salt);
    out.extend_from_slice(&p.memory_kib.to_be_bytes());
    out.extend_from_slice(&p.passes.to_be_bytes());
    out.extend_from_slice(&Cipher::new(pin_key).seal(&token_key[..], aad));
    out
}

/// AES-256-GCM under one key, a fresh nonce in front of each ciphertext: attribute values
/// under the token key (`aad` names token, object and attribute) and the token key under a
/// PIN key. Made once per record: expanding the key for every attribute cost more than
/// decrypting the attribute (half of a find by id, profiled). Its round keys are zeroized on drop.
pub struct Cipher(Aes256Gcm);

impl Cipher {
    pub fn new(key: &Key) -> Self {
        Cipher(Aes256Gcm::new_from_slice(&key[..]).expect("32-byte key"))
    }

    pub fn seal(&self, value: &[u8], aad: &[u8]) -> Vec<u8> {
        let nonce: [u8; NONCE_LEN] = random();
        let ct = self
            .0
            .encrypt((&nonce).into(), Payload { msg: value, aad })
            .expect("AES-GCM encryption");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ct);
        out
    }

    pub fn open(&self, sealed: &[u8], aad: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
        let (nonce, ct) = sealed.split_at_checked(NONCE_LEN)?;
        self.0
            .decrypt(nonce.try_into().ok()?, Payload { msg: ct, aad })
            .ok()
            .map(Zeroizing::new)
    }
}

/// Keyed hash of a lookup value of a private object, so it can be indexed without clear text.
pub fn lookup_hash(token_key: &Key, attr: u64, value: &[u8]) -> Vec<u8> {
    let mut m =
        <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&token_key[..]).expect("any key length");
    m.update(b"ferrohsm lookup");
    m.update(&attr.to_be_bytes());
    m.update(value);
    m.finalize().into_bytes().to_vec()
}
