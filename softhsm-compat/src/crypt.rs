//! SoftHSM's protection of private data: PIN keys (iterated SHA-256), the PIN blobs that wrap
//! the token's AES-256 master key, and AES-256-CBC of private attributes.

use crate::Error;
use aes::cipher::{BlockCipherDecrypt, KeyInit};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// PIN key: n = 1500 + salt[7] rounds; H1 = SHA-256(salt ‖ PIN), Hi = SHA-256(Hi−1).
pub fn pin_key(salt: &[u8; 8], pin: &[u8]) -> Zeroizing<[u8; 32]> {
    let rounds = 1500 + salt[7] as usize;
    let mut h = Sha256::new();
    h.update(salt);
    h.update(pin);
    let mut k = Zeroizing::new([0u8; 32]);
    k.copy_from_slice(&h.finalize());
    for _ in 1..rounds {
        let next = Sha256::digest(&k[..]);
        k.copy_from_slice(&next);
    }
    k
}

/// AES-256-CBC decryption with PKCS#7 padding removed; `None` when the padding is wrong.
pub fn cbc_decrypt(key: &[u8], iv: &[u8], ct: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
    if ct.is_empty() || !ct.len().is_multiple_of(16) || iv.len() != 16 {
        return None;
    }
    let cipher = aes::Aes256::new_from_slice(key).ok()?;
    let mut out = Zeroizing::new(Vec::with_capacity(ct.len()));
    let mut prev: [u8; 16] = iv.try_into().ok()?;
    for block in ct.chunks_exact(16) {
        let mut b = aes::Block::default();
        b.copy_from_slice(block);
        cipher.decrypt_block(&mut b);
        out.extend(b.iter().zip(prev.iter()).map(|(x, y)| x ^ y));
        prev.copy_from_slice(block);
    }
    let pad = *out.last()? as usize;
    if pad == 0 || pad > 16 || out[out.len() - pad..].iter().any(|&b| b as usize != pad) {
        return None;
    }
    let len = out.len() - pad;
    out.truncate(len);
    Some(out)
}

/// Opens a 72-byte PIN blob (salt ‖ IV ‖ CBC("RJR" ‖ master key)) with `pin`.
pub fn open_pin_blob(blob: &[u8], pin: &[u8]) -> Result<Zeroizing<[u8; 32]>, Error> {
    if blob.len() != 72 {
        return Err(Error::Corrupt(format!(
            "PIN blob of {} bytes (72 expected)",
            blob.len()
        )));
    }
    let salt: [u8; 8] = blob[..8].try_into().expect("8 bytes");
    let key = pin_key(&salt, pin);
    let plain = cbc_decrypt(&key[..], &blob[8..24], &blob[24..]).ok_or(Error::WrongPin)?;
    if plain.len() != 35 || &plain[..3] != b"RJR" {
        return Err(Error::WrongPin);
    }
    let mut master = Zeroizing::new([0u8; 32]);
    master.copy_from_slice(&plain[3..]);
    Ok(master)
}

/// A private attribute: IV ‖ AES-256-CBC(master key, PKCS#7(value)).
pub fn decrypt_attribute(master: &[u8; 32], data: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
    if data.len() < 32 {
        return None;
    }
    cbc_decrypt(master, &data[..16], &data[16..])
}
