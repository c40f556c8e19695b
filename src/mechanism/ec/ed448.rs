//! Ed448 (RFC 8032 §5.2, `CKM_EDDSA` on Ed448 keys) with RustCrypto's `ed448-goldilocks`: keys
//! from their PKCS#11 encodings, signing with or without a context and the verify-before-release
//! check, and verification. Ed448ph (the prehash variant) is refused where the mechanism
//! parameter is read (`eddsa.rs`).

use crate::error::{fail_because, Error, Result};
use cryptoki_sys::*;
use ed448_goldilocks::{Signature, SigningKey, VerifyingKey, SECRET_KEY_LENGTH, SIGNATURE_LENGTH};

/// The RFC 8032 private key (`CKA_VALUE`, 57 bytes). Every 57-byte string is one.
pub fn signing_key(value: &[u8]) -> Result<SigningKey> {
    if value.len() != SECRET_KEY_LENGTH {
        return fail_because(
            CKR_ATTRIBUTE_VALUE_INVALID,
            format!("an Ed448 private key is 57 bytes, not {}", value.len()),
        );
    }
    SigningKey::try_from(value).or_else(|_| fail_because(CKR_ATTRIBUTE_VALUE_INVALID, "an Ed448 private key"))
}

/// Ed448's field prime 2^448 - 2^224 - 1, little-endian.
const P: [u8; 56] = {
    let mut p = [0xff; 56];
    p[28] = 0xfe;
    p
};

/// Whether `enc` is a canonical RFC 8032 encoding (§5.2.3): the last byte holds only x's sign
/// bit, and y is below p. The crate's decoder reads y modulo p and ignores the spare bits, so
/// without this one point would have many encodings.
fn canonical(enc: &[u8; 57]) -> bool {
    if enc[56] & 0x7f != 0 {
        return false;
    }
    // y < p, compared from the most significant byte.
    for i in (0..56).rev() {
        if enc[i] != P[i] {
            return enc[i] < P[i];
        }
    }
    false
}

/// The public key of a 57-byte encoded point: refused unless it is a canonical encoding of a
/// curve point in the prime-order subgroup other than the identity.
pub fn verifying_key(raw: &[u8]) -> Result<VerifyingKey> {
    let bad =
        || fail_because::<VerifyingKey>(CKR_ATTRIBUTE_VALUE_INVALID, "CKA_EC_POINT is not an Ed448 point");
    let Ok(bytes) = <&[u8; 57]>::try_from(raw) else {
        return bad();
    };
    if !canonical(bytes) {
        return bad();
    }
    VerifyingKey::from_bytes(bytes).or_else(|_| bad())
}

/// Ed448 over `message` with `context` (at most 255 bytes, checked when the parameter was
/// read; empty without one), released only once the public key has verified it.
pub fn sign_checked(key: &SigningKey, context: &[u8], message: &[u8]) -> Result<Vec<u8>> {
    let sig = key.sign_ctx(context, message).or_else(|_| {
        fail_because(
            CKR_MECHANISM_PARAM_INVALID,
            "Ed448: a context longer than 255 bytes",
        )
    })?;
    let public = key.verifying_key();
    // Logged as the EC signatures are (`ec::release_checked`), without a call into `key`,
    // which calls this file.
    crate::mechanism::release_checked("EC", sig.to_bytes().to_vec(), |s| {
        verify(&public, context, message, s).map_err(|_| ())
    })
}

/// RFC 8032 verification: a non-canonical S or an R that is not a point is refused (the
/// signature's length is checked by the caller).
pub fn verify(key: &VerifyingKey, context: &[u8], message: &[u8], sig: &[u8]) -> Result<()> {
    let Ok(bytes) = <&[u8; SIGNATURE_LENGTH]>::try_from(sig) else {
        return Err(Error(CKR_SIGNATURE_LEN_RANGE));
    };
    let sig = Signature::from_bytes(bytes);
    key.verify_ctx(&sig, context, message)
        .map_err(|_| Error(CKR_SIGNATURE_INVALID))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 8032 §7.4, "1 octet" and "1 octet (with context)": the same key, message 0x03.
    #[test]
    fn rfc8032_test_vectors_with_and_without_context() {
        let k = signing_key(&hex(
            "c4eab05d357007c632f3dbb48489924d552b08fe0c353a0d4a1f00acda2c463a
             fbea67c5e8d2877c5e3bc397a659949ef8021e954e0a12274e",
        ))
        .unwrap();
        assert_eq!(
            k.verifying_key().to_bytes().to_vec(),
            hex("43ba28f430cdff456ae531545f7ecd0ac834a55d9358c0372bfa0c6c6798c086
                 6aea01eb00742802b8438ea4cb82169c235160627b4c3a9480")
        );
        let plain = sign_checked(&k, b"", &[0x03]).unwrap();
        assert_eq!(
            plain,
            hex("26b8f91727bd62897af15e41eb43c377efb9c610d48f2335cb0bd0087810f435
                 2541b143c4b981b7e18f62de8ccdf633fc1bf037ab7cd779805e0dbcc0aae1cb
                 cee1afb2e027df36bc04dcecbf154336c19f0af7e0a6472905e799f1953d2a0f
                 f3348ab21aa4adafd1d234441cf807c03a00")
        );
        let with_context = sign_checked(&k, b"foo", &[0x03]).unwrap();
        assert_eq!(
            with_context,
            hex("d4f8f6131770dd46f40867d6fd5d5055de43541f8c5e35abbcd001b32a89f7d2
                 151f7647f11d8ca2ae279fb842d607217fce6e042f6815ea000c85741de5c8da
                 1144a6a1aba7f96de42505d7a7298524fda538fccbbb754f578c1cad10d54d0d
                 5428407e85dcbc98a49155c13764e66c3c00")
        );
        let public = k.verifying_key();
        verify(&public, b"foo", &[0x03], &with_context).unwrap();
        // The context is signed: another one, or none, fails.
        assert_eq!(
            verify(&public, b"", &[0x03], &with_context).unwrap_err().0,
            CKR_SIGNATURE_INVALID
        );
        assert_eq!(
            verify(&public, b"fo", &[0x03], &with_context).unwrap_err().0,
            CKR_SIGNATURE_INVALID
        );
        assert_eq!(
            verify(&public, b"", &[0x03], &plain[1..]).unwrap_err().0,
            CKR_SIGNATURE_LEN_RANGE
        );
    }

    #[test]
    fn bad_lengths_and_points_are_refused() {
        for v in [&[1u8; 56][..], &[1u8; 58], &[]] {
            assert_eq!(signing_key(v).err().unwrap().0, CKR_ATTRIBUTE_VALUE_INVALID);
        }
        let mut p = signing_key(&[7u8; 57])
            .unwrap()
            .verifying_key()
            .to_bytes()
            .to_vec();
        assert!(verifying_key(&p).is_ok());
        assert_eq!(
            verifying_key(&p[1..]).err().unwrap().0,
            CKR_ATTRIBUTE_VALUE_INVALID
        );
        // Non-canonical encodings: a good point with a spare bit of the last byte set; y = p
        // and y = p + 1 (0 and 1 written with p added; p + 1 is 0 x 28 bytes, then 0xff x 28).
        let mut spare = p.clone();
        spare[56] |= 0x01;
        assert_eq!(
            verifying_key(&spare).err().unwrap().0,
            CKR_ATTRIBUTE_VALUE_INVALID
        );
        let mut y_is_p = [0u8; 57];
        y_is_p[..56].copy_from_slice(&P);
        let mut y_is_p_plus_1 = [0xffu8; 57];
        y_is_p_plus_1[..28].fill(0);
        y_is_p_plus_1[56] = 0;
        let mut y_is_p_minus_1 = y_is_p;
        y_is_p_minus_1[0] = 0xfe;
        assert!(!canonical(&y_is_p) && !canonical(&y_is_p_plus_1) && canonical(&y_is_p_minus_1));
        // The identity (y = 1) and points that are not on the curve are refused.
        p.iter_mut().for_each(|b| *b = 0);
        p[0] = 1;
        assert_eq!(verifying_key(&p).err().unwrap().0, CKR_ATTRIBUTE_VALUE_INVALID);
        let off_curve = (2u8..40)
            .map(|y| {
                let mut e = [0u8; 57];
                e[0] = y;
                e
            })
            .filter(|e| verifying_key(e).is_err())
            .count();
        assert!(
            off_curve > 5,
            "about half of all y are not on the curve: {off_curve} of 38"
        );
    }
}
