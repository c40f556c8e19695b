//! SoftHSM's protection of private data: PIN keys (iterated SHA-256), the PIN blobs that wrap
//! the token's AES-256 master key, and AES-256-CBC of private attributes.

use crate::Error;
use aes::cipher::{block_padding::Pkcs7, BlockModeDecrypt, KeyIvInit};
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

/// AES-256-CBC decryption with PKCS#7 padding removed (the `cbc` crate); `None` when the key
/// or IV has the wrong length, the ciphertext is not whole blocks, or the padding is wrong.
pub fn cbc_decrypt(key: &[u8], iv: &[u8], ct: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
    let mode = cbc::Decryptor::<aes::Aes256>::new_from_slices(key, iv).ok()?;
    // Decrypted into a buffer that is zeroized when dropped: it holds key material.
    let mut out = Zeroizing::new(vec![0u8; ct.len()]);
    let len = mode.decrypt_padded_b2b::<Pkcs7>(ct, &mut out).ok()?.len();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    const KEY: &str = "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4";
    const IV: &str = "000102030405060708090a0b0c0d0e0f";

    /// Ciphertexts made by `openssl enc -aes-256-cbc -K KEY -iv IV` (PKCS#7 padding).
    #[test]
    fn decrypts_what_openssl_encrypted() {
        let (k, iv) = (unhex(KEY), unhex(IV));
        let ct = unhex("0524a33eefaa425a09ca8843e8a522f8e1465d08fec6f796fa32b652e22c092d");
        assert_eq!(
            &cbc_decrypt(&k, &iv, &ct).unwrap()[..],
            b"softhsm private attribute"
        );
        // A whole block of plaintext gets a whole block of padding.
        let ct = unhex("af7982f678f498be053f0ec06bc547caf81dab9022f1009991cdf5a02a864a5d");
        assert_eq!(&cbc_decrypt(&k, &iv, &ct).unwrap()[..], b"0123456789abcdef");
    }

    #[test]
    fn refuses_bad_lengths_and_padding() {
        let (k, iv) = (unhex(KEY), unhex(IV));
        let ct = unhex("0524a33eefaa425a09ca8843e8a522f8e1465d08fec6f796fa32b652e22c092d");
        assert!(cbc_decrypt(&k, &iv, &ct[..31]).is_none(), "not whole blocks");
        assert!(cbc_decrypt(&k, &iv, &[]).is_none(), "empty");
        assert!(cbc_decrypt(&k[..16], &iv, &ct).is_none(), "AES-128 key");
        assert!(cbc_decrypt(&k, &iv[..8], &ct).is_none(), "short IV");
        let mut bad_pad = ct.clone();
        bad_pad[15] ^= 0x07; // flips the last plaintext byte (0x07 → 0x00): padding 0
        assert!(cbc_decrypt(&k, &iv, &bad_pad).is_none(), "padding byte 0");
    }
}
