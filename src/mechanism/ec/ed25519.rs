//! Ed25519 (RFC 8032, pure: `CKM_EDDSA` without prehash or context) with `ed25519-dalek`:
//! keys from their PKCS#11 encodings, signing with the verify-before-release check (on the
//! engine's tables, `engine::ec::ed25519`), strict verification; and the `CK_EDDSA_PARAMS`
//! the token accepts for either Edwards curve (Ed448 itself is `ed448`). The EdDSA family
//! around both is `eddsa.rs`.

use crate::engine::ec::ed25519::KeyTable;
use crate::error::{fail_because, Error, Result};
use crate::mechanism::ec_params::Curve;
use cryptoki_sys::*;
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use std::sync::OnceLock;

/// The RFC 8032 private key (`CKA_VALUE`, 32 bytes). Every 32-byte string is one.
pub fn signing_key(value: &[u8]) -> Result<SigningKey> {
    let seed: &[u8; 32] = value.try_into().or_else(|_| {
        fail_because(
            CKR_ATTRIBUTE_VALUE_INVALID,
            format!("an Ed25519 private key is 32 bytes, not {}", value.len()),
        )
    })?;
    Ok(SigningKey::from_bytes(seed))
}

/// The public key of a 32-byte encoded point: refused unless it decodes to a curve point.
pub fn verifying_key(raw: &[u8]) -> Result<VerifyingKey> {
    let bad = || {
        fail_because::<VerifyingKey>(
            CKR_ATTRIBUTE_VALUE_INVALID,
            "CKA_EC_POINT is not an Ed25519 point",
        )
    };
    let Ok(bytes) = <&[u8; 32]>::try_from(raw) else {
        return bad();
    };
    let key = VerifyingKey::from_bytes(bytes).or_else(|_| bad())?;
    // A point of small order (the identity among them) is no one's key: every signature
    // verification refuses it, and docs/architecture.md says creation does too.
    if key.is_weak() {
        return fail_because(
            CKR_ATTRIBUTE_VALUE_INVALID,
            "CKA_EC_POINT is an Ed25519 point of small order, which no private key has",
        );
    }
    Ok(key)
}

/// Signs, and releases the signature only if it verifies under the key's public point: the
/// RFC 8032 equation [s]B = R + [k]A recomputed and R compared in its encoding, over the key's
/// cached table (`engine::ec::ed25519`, made here on the first signature). Not the strict
/// verification `C_Verify` runs: its extra work (decompressing R to refuse small-order points)
/// guards against a signer's chosen R and A, and here R = [r]B and A are the token's own; what
/// a fault would change, s or the encoding of R, the equation catches.
pub fn sign_checked(key: &SigningKey, table: &OnceLock<Option<KeyTable>>, message: &[u8]) -> Result<Vec<u8>> {
    let sig = key.sign(message).to_bytes().to_vec();
    release(key, table, message, sig)
}

/// Releases `sig` only if it verifies under the key's public point (`sign_checked`; the fault
/// table below hands it faulty signatures).
fn release(
    key: &SigningKey,
    table: &OnceLock<Option<KeyTable>>,
    message: &[u8],
    sig: Vec<u8>,
) -> Result<Vec<u8>> {
    let public = key.verifying_key();
    let table = table.get_or_init(|| KeyTable::new(public.as_bytes()));
    // Logged as the EC signatures are (`ec::release_checked`), without a call into `key`,
    // which calls this file.
    crate::mechanism::release_checked("EC", sig, |s| {
        let s: &[u8; 64] = s.try_into().map_err(|_| ())?;
        let good = match table {
            Some(t) => crate::engine::ec::ed25519::verify(t, message, s),
            // A key whose encoding the table refuses (never one the token made): the crate's
            // equation, as before the table.
            None => {
                use ed25519_dalek::Verifier;
                public
                    .verify(message, &ed25519_dalek::Signature::from_bytes(s))
                    .is_ok()
            }
        };
        good.then_some(()).ok_or(())
    })
}

/// Strict RFC 8032 verification: non-canonical encodings and small-order keys are refused.
pub fn verify(key: &VerifyingKey, message: &[u8], sig: &[u8]) -> Result<()> {
    let sig = ed25519_dalek::Signature::from_slice(sig).map_err(|_| Error(CKR_SIGNATURE_INVALID))?;
    key.verify_strict(message, &sig)
        .map_err(|_| Error(CKR_SIGNATURE_INVALID))
}

/// RFC 8032's limit on a context string (its length is one byte of dom2/dom4).
pub const MAX_CONTEXT: usize = 255;

/// Checks an optional `CK_EDDSA_PARAMS` (flag, context length) before the key is known: the
/// prehash variants (Ed25519ph, Ed448ph) are refused, a context is at most 255 bytes. What a
/// context means depends on the key's curve: `check_context`.
pub fn check_params(ph_flag: bool, context_len: usize) -> Result<()> {
    if ph_flag {
        return fail_because(
            CKR_MECHANISM_PARAM_INVALID,
            "CKM_EDDSA: phFlag asks for Ed25519ph or Ed448ph (prehash), which the token does not \
             support; pure Ed25519 and Ed448 (with or without a context) are",
        );
    }
    if context_len > MAX_CONTEXT {
        return fail_because(
            CKR_MECHANISM_PARAM_INVALID,
            format!("CKM_EDDSA: a context of {context_len} bytes; RFC 8032 allows at most {MAX_CONTEXT}"),
        );
    }
    Ok(())
}

/// Checks a context against the key's curve when the operation starts: Ed448 signs any
/// context (RFC 8032's Ed448 always has one, empty by default); for Ed25519 a context would
/// mean Ed25519ctx, which the token does not support. A parameter with `phFlag` false and no
/// context is pure Ed25519, which some applications send to say so explicitly.
pub fn check_context(curve: Curve, context: &[u8]) -> Result<()> {
    if curve == Curve::Ed25519 && !context.is_empty() {
        return fail_because(
            CKR_MECHANISM_PARAM_INVALID,
            "CKM_EDDSA: a context with an Ed25519 key asks for Ed25519ctx, which the token does \
             not support (Ed448 keys take a context)",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8032 §7.1, TEST 1: the empty message.
    #[test]
    fn rfc8032_test_vector_one() {
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let k = signing_key(&hex(
            "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        ))
        .unwrap();
        assert_eq!(
            k.verifying_key().to_bytes().to_vec(),
            hex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
        );
        let sig = sign_checked(&k, &OnceLock::new(), b"").unwrap();
        assert_eq!(
            sig,
            hex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
        );
    }

    /// What a glitch in the signer would release, as the ECDSA fault table
    /// (`engine::ec::sign::fault`) has it: a bit of R flipped; a bit of s flipped; s made with
    /// another nonce after R was computed (s + δ for r + δ); s made with another secret
    /// scalar (a + 1, bit 0 of a clamped scalar flipped: s + k). The check withholds each one
    /// (CKR_DEVICE_ERROR) and releases the signature as made.
    #[test]
    fn a_faulty_ed25519_signature_is_withheld() {
        use curve25519_dalek::scalar::Scalar;
        use sha2::{Digest, Sha512};
        let key = SigningKey::from_bytes(&[0x42; 32]);
        let msg = b"zone data to sign";
        let table = OnceLock::new();
        let good = key.sign(msg).to_bytes();
        assert_eq!(release(&key, &table, msg, good.to_vec()).unwrap(), good.to_vec());
        let s = Scalar::from_canonical_bytes(good[32..].try_into().unwrap()).unwrap();
        let k = Scalar::from_bytes_mod_order_wide(
            &Sha512::new()
                .chain_update(&good[..32])
                .chain_update(key.verifying_key().as_bytes())
                .chain_update(msg)
                .finalize()
                .into(),
        );
        let with_s = |s: Scalar| {
            let mut sig = good;
            sig[32..].copy_from_slice(&s.to_bytes());
            sig
        };
        let flip = |i: usize| {
            let mut sig = good;
            sig[i] ^= 1;
            sig
        };
        let faults = [
            ("R", flip(0)),
            ("s", flip(32)),
            ("nonce after R", with_s(s + Scalar::ONE)),
            ("key", with_s(s + k)),
        ];
        for (what, sig) in faults {
            assert_eq!(
                release(&key, &table, msg, sig.to_vec()).unwrap_err().0,
                CKR_DEVICE_ERROR,
                "{what}"
            );
        }
    }

    #[test]
    fn prehash_long_contexts_and_ed25519ctx_are_refused() {
        check_params(false, 0).unwrap();
        check_params(false, 255).unwrap();
        assert_eq!(check_params(true, 0).unwrap_err().0, CKR_MECHANISM_PARAM_INVALID);
        assert_eq!(
            check_params(false, 256).unwrap_err().0,
            CKR_MECHANISM_PARAM_INVALID
        );
        check_context(Curve::Ed25519, b"").unwrap();
        check_context(Curve::Ed448, b"ctx").unwrap();
        assert_eq!(
            check_context(Curve::Ed25519, b"ctx").unwrap_err().0,
            CKR_MECHANISM_PARAM_INVALID
        );
    }
}
