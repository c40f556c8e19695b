//! RSA encodings from RFC 8017 (EMSA-PKCS1-v1_5, EMSA-PSS, RSAES-PKCS1-v1_5, RSAES-OAEP),
//! applied around the engine's raw operations. Decoding of secret data is constant time.

use crate::mechanism::hash::HashAlg;
use subtle::{ConditionallySelectable, ConstantTimeEq, ConstantTimeGreater, ConstantTimeLess};
use zeroize::Zeroizing;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadError {
    /// The message does not fit the modulus with this encoding.
    TooLong,
    /// The encoded block is malformed (verify: signature invalid; decrypt: bad ciphertext).
    Invalid,
}

fn random_bytes(buf: &mut [u8]) {
    getrandom::fill(buf).expect("the OS random number generator failed");
}

/// EMSA-PKCS1-v1_5 with `t` (a DigestInfo, or any data for CKM_RSA_PKCS) into `k` bytes.
pub fn pkcs1_sign_encode(t: &[u8], k: usize) -> Result<Vec<u8>, PadError> {
    if t.len() + 11 > k {
        return Err(PadError::TooLong);
    }
    let mut em = vec![0xffu8; k];
    em[0] = 0;
    em[1] = 1;
    em[k - t.len() - 1] = 0;
    em[k - t.len()..].copy_from_slice(t);
    Ok(em)
}

/// Recovers T from an EMSA-PKCS1-v1_5 block (public data: signature verification).
pub fn pkcs1_sign_decode(em: &[u8]) -> Result<&[u8], PadError> {
    if em.len() < 11 || em[0] != 0 || em[1] != 1 {
        return Err(PadError::Invalid);
    }
    let sep = em[2..].iter().position(|&b| b != 0xff).ok_or(PadError::Invalid)? + 2;
    if sep < 10 || em[sep] != 0 {
        return Err(PadError::Invalid);
    }
    Ok(&em[sep + 1..])
}

/// RSAES-PKCS1-v1_5 encryption padding of `m` into `k` bytes with random non-zero bytes.
pub fn pkcs1_encrypt_pad(m: &[u8], k: usize) -> Result<Vec<u8>, PadError> {
    if m.len() + 11 > k {
        return Err(PadError::TooLong);
    }
    let mut em = vec![0u8; k];
    em[1] = 2;
    let ps_end = k - m.len() - 1;
    for b in &mut em[2..ps_end] {
        while *b == 0 {
            let mut r = [0u8; 1];
            random_bytes(&mut r);
            *b = r[0];
        }
    }
    em[ps_end + 1..].copy_from_slice(m);
    Ok(em)
}

/// RSAES-PKCS1-v1_5 decryption with implicit rejection: a malformed block yields a
/// deterministic pseudo-random message derived from the key and the ciphertext instead of an
/// error, so the caller learns nothing a padding oracle could use. `kdk_secret` is a
/// per-key secret (a hash of the private exponent); the timing does not depend on the block.
pub fn pkcs1_decrypt_unpad(em: &[u8], ciphertext: &[u8], kdk_secret: &[u8]) -> Zeroizing<Vec<u8>> {
    let k = em.len();
    let synthetic = implicit_rejection_message(kdk_secret, ciphertext, k);
    let mut good = em[0].ct_eq(&0) & em[1].ct_eq(&2);
    // Index of the first zero byte after the padding string, found without branching.
    let mut found = subtle::Choice::from(0);
    let mut zero_index: u32 = 0;
    for (i, &b) in em.iter().enumerate().skip(2) {
        let is_zero = b.ct_eq(&0);
        let first = is_zero & !found;
        zero_index.conditional_assign(&(i as u32), first);
        found |= is_zero;
    }
    good &= found & zero_index.ct_gt(&9);
    let real_len = (k as u32).wrapping_sub(zero_index).wrapping_sub(1);
    let msg_len = u32::conditional_select(&(synthetic.1 as u32), &real_len, good) as usize;
    // Assemble the result from the tail of either block, reading every byte of both.
    let mut out = Zeroizing::new(vec![0u8; k]);
    for i in 0..k {
        out[i] = u8::conditional_select(&synthetic.0[i], &em[i], good);
    }
    Zeroizing::new(out[k - msg_len..].to_vec())
}

/// The synthetic message of the implicit-rejection method: a key-derivation key
/// HMAC-SHA256(kdk_secret, C), then a PRF stream for the length and the bytes.
fn implicit_rejection_message(kdk_secret: &[u8], c: &[u8], k: usize) -> (Zeroizing<Vec<u8>>, usize) {
    use hmac::{KeyInit, Mac};
    type HmacSha256 = hmac::Hmac<sha2::Sha256>;
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(kdk_secret).expect("any key length");
    mac.update(c);
    let kdk = Zeroizing::new(mac.finalize().into_bytes().to_vec());
    let prf = |label: &[u8], out_bits: usize| -> Zeroizing<Vec<u8>> {
        let mut out = Zeroizing::new(Vec::with_capacity(out_bits / 8 + 32));
        let mut i: u16 = 0;
        while out.len() * 8 < out_bits {
            let mut m = <HmacSha256 as KeyInit>::new_from_slice(&kdk).expect("any key length");
            m.update(&i.to_be_bytes());
            m.update(label);
            m.update(&(out_bits as u16).to_be_bytes());
            out.extend_from_slice(&m.finalize().into_bytes());
            i += 1;
        }
        out.truncate(out_bits / 8);
        out
    };
    let message = prf(b"message", k * 8);
    let lengths = prf(b"length", 128 * 16);
    let max_len = k.saturating_sub(11) as u16;
    let mask = (max_len as u32).next_power_of_two().saturating_sub(1) as u16;
    let mut len: u16 = 0;
    for pair in lengths.chunks_exact(2) {
        let cand = u16::from_be_bytes([pair[0], pair[1]]) & mask;
        len.conditional_assign(&cand, cand.ct_lt(&max_len.wrapping_add(1)));
    }
    let mut padded = Zeroizing::new(vec![0u8; k]);
    padded.copy_from_slice(&message);
    (padded, len as usize)
}

/// MGF1 mask generation (RFC 8017 B.2.1), XORed into `out`.
fn mgf1_xor(hash: HashAlg, seed: &[u8], out: &mut [u8]) {
    let mut counter: u32 = 0;
    let mut offset = 0;
    while offset < out.len() {
        let mut h = hash.hasher();
        h.update(seed);
        h.update(&counter.to_be_bytes());
        let block = h.finalize();
        for (o, b) in out[offset..].iter_mut().zip(block.iter()) {
            *o ^= b;
        }
        offset += block.len();
        counter += 1;
    }
}

/// EMSA-PSS-ENCODE of the message hash `m_hash` for a modulus of `mod_bits` bits.
pub fn pss_encode(
    m_hash: &[u8],
    mod_bits: usize,
    hash: HashAlg,
    mgf: HashAlg,
    salt_len: usize,
) -> Result<Vec<u8>, PadError> {
    let em_bits = mod_bits - 1;
    let em_len = em_bits.div_ceil(8);
    let h_len = hash.output_len();
    if em_len < h_len + salt_len + 2 {
        return Err(PadError::TooLong);
    }
    let mut salt = vec![0u8; salt_len];
    random_bytes(&mut salt);
    let mut h = hash.hasher();
    h.update(&[0u8; 8]);
    h.update(m_hash);
    h.update(&salt);
    let h_val = h.finalize();
    let db_len = em_len - h_len - 1;
    let mut em = vec![0u8; em_len];
    em[db_len - salt_len - 1] = 1;
    em[db_len - salt_len..db_len].copy_from_slice(&salt);
    mgf1_xor(mgf, &h_val, &mut em[..db_len]);
    em[0] &= 0xffu8 >> (8 * em_len - em_bits);
    em[db_len..db_len + h_len].copy_from_slice(&h_val);
    em[em_len - 1] = 0xbc;
    // The engine works on k-byte blocks; emLen is one shorter when modBits ≡ 1 (mod 8).
    let k = mod_bits.div_ceil(8);
    let mut out = vec![0u8; k - em_len];
    out.extend_from_slice(&em);
    Ok(out)
}

/// EMSA-PSS-VERIFY of `block` (the k-byte public-key result) against `m_hash`.
pub fn pss_verify(
    m_hash: &[u8],
    block: &[u8],
    mod_bits: usize,
    hash: HashAlg,
    mgf: HashAlg,
    salt_len: usize,
) -> Result<(), PadError> {
    let em_bits = mod_bits - 1;
    let em_len = em_bits.div_ceil(8);
    let h_len = hash.output_len();
    if block.len() < em_len || block[..block.len() - em_len].iter().any(|&b| b != 0) {
        return Err(PadError::Invalid);
    }
    let em = &block[block.len() - em_len..];
    if m_hash.len() != h_len || em_len < h_len + salt_len + 2 || em[em_len - 1] != 0xbc {
        return Err(PadError::Invalid);
    }
    let db_len = em_len - h_len - 1;
    let top_mask = 0xffu8 >> (8 * em_len - em_bits);
    if em[0] & !top_mask != 0 {
        return Err(PadError::Invalid);
    }
    let h_val = &em[db_len..db_len + h_len];
    let mut db = em[..db_len].to_vec();
    mgf1_xor(mgf, h_val, &mut db);
    db[0] &= top_mask;
    let ps_len = db_len - salt_len - 1;
    if db[..ps_len].iter().any(|&b| b != 0) || db[ps_len] != 1 {
        return Err(PadError::Invalid);
    }
    let mut h = hash.hasher();
    h.update(&[0u8; 8]);
    h.update(m_hash);
    h.update(&db[db_len - salt_len..]);
    if h.finalize() != h_val {
        return Err(PadError::Invalid);
    }
    Ok(())
}

/// RSAES-OAEP encoding of `m` with `label` into `k` bytes.
pub fn oaep_encode(
    m: &[u8],
    k: usize,
    hash: HashAlg,
    mgf: HashAlg,
    label: &[u8],
) -> Result<Vec<u8>, PadError> {
    let h_len = hash.output_len();
    if k < 2 * h_len + 2 || m.len() > k - 2 * h_len - 2 {
        return Err(PadError::TooLong);
    }
    let mut em = vec![0u8; k];
    let (seed, db) = em[1..].split_at_mut(h_len);
    db[..h_len].copy_from_slice(&hash.digest(label));
    let db_len = db.len();
    db[db_len - m.len() - 1] = 1;
    db[db_len - m.len()..].copy_from_slice(m);
    random_bytes(seed);
    mgf1_xor(mgf, seed, db);
    mgf1_xor(mgf, db, seed);
    Ok(em)
}

/// RSAES-OAEP decoding; one error for every failure, and no early exit on secret data.
pub fn oaep_decode(
    em: &[u8],
    hash: HashAlg,
    mgf: HashAlg,
    label: &[u8],
) -> Result<Zeroizing<Vec<u8>>, PadError> {
    let k = em.len();
    let h_len = hash.output_len();
    if k < 2 * h_len + 2 {
        return Err(PadError::Invalid);
    }
    let mut buf = Zeroizing::new(em.to_vec());
    let (y, rest) = buf.split_at_mut(1);
    let (seed, db) = rest.split_at_mut(h_len);
    mgf1_xor(mgf, db, seed);
    mgf1_xor(mgf, seed, db);
    let l_hash = hash.digest(label);
    let mut good = y[0].ct_eq(&0) & db[..h_len].ct_eq(&l_hash);
    let mut found = subtle::Choice::from(0);
    let mut one_index: u32 = 0;
    for (i, &b) in db.iter().enumerate().skip(h_len) {
        let is_one = b.ct_eq(&1);
        let is_zero = b.ct_eq(&0);
        let first = is_one & !found;
        one_index.conditional_assign(&(i as u32), first);
        // Anything but zeros before the 0x01 separator is malformed.
        good &= found | is_zero | is_one;
        found |= is_one;
    }
    good &= found;
    if !bool::from(good) {
        return Err(PadError::Invalid);
    }
    Ok(Zeroizing::new(db[one_index as usize + 1..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkcs1_sign_roundtrip() {
        let em = pkcs1_sign_encode(b"abc", 64).unwrap();
        assert_eq!(pkcs1_sign_decode(&em).unwrap(), b"abc");
        assert_eq!(pkcs1_sign_encode(&[0u8; 54], 64), Err(PadError::TooLong));
    }

    #[test]
    fn pkcs1_decrypt_good_and_bad() {
        let em = pkcs1_encrypt_pad(b"secret", 128).unwrap();
        assert_eq!(&pkcs1_decrypt_unpad(&em, b"c", b"k")[..], b"secret");
        let mut bad = em.clone();
        bad[1] = 3;
        let a = pkcs1_decrypt_unpad(&bad, b"c", b"k");
        let b = pkcs1_decrypt_unpad(&bad, b"c", b"k");
        assert_eq!(a, b, "implicit rejection must be deterministic");
        assert_ne!(&a[..], b"secret");
        assert!(a.len() <= 128 - 11);
    }

    #[test]
    fn oaep_roundtrip_and_label() {
        let em = oaep_encode(b"m", 256, HashAlg::Sha256, HashAlg::Sha1, b"L").unwrap();
        assert_eq!(
            &oaep_decode(&em, HashAlg::Sha256, HashAlg::Sha1, b"L").unwrap()[..],
            b"m"
        );
        assert!(oaep_decode(&em, HashAlg::Sha256, HashAlg::Sha1, b"X").is_err());
    }

    #[test]
    fn pss_roundtrip_odd_bits() {
        for bits in [1024usize, 1025, 2047] {
            let h = HashAlg::Sha256.digest(b"x");
            let em = pss_encode(&h, bits, HashAlg::Sha256, HashAlg::Sha256, 32).unwrap();
            assert_eq!(em.len(), bits.div_ceil(8));
            pss_verify(&h, &em, bits, HashAlg::Sha256, HashAlg::Sha256, 32).unwrap();
            let h2 = HashAlg::Sha256.digest(b"y");
            assert!(pss_verify(&h2, &em, bits, HashAlg::Sha256, HashAlg::Sha256, 32).is_err());
        }
    }
}
