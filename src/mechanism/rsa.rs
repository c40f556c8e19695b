//! RSA signature and encryption schemes: padding from `rsa_pad`, arithmetic from the engine.

use super::rsa_pad::{self, PadError};
use super::{HashAlg, Mechanism};
use crate::engine::{left_pad, EngineError, PreparedKey, PublicKey};
use crate::error::{fail, fail_because, Error, Result};
use cryptoki_sys::*;
use zeroize::Zeroizing;

fn engine_err(e: EngineError, input_rv: CK_RV) -> Error {
    match e {
        EngineError::InputOutOfRange => Error(input_rv),
        EngineError::FaultDetected => Error(CKR_DEVICE_ERROR),
        _ => Error(CKR_GENERAL_ERROR),
    }
}

/// The hash a mechanism applies to the data before padding (hash-and-sign mechanisms).
pub fn prehash(mech: &Mechanism) -> Option<HashAlg> {
    match mech {
        Mechanism::HashRsaPkcs(h) => Some(*h),
        Mechanism::RsaPss { prehash, .. } => *prehash,
        _ => None,
    }
}

/// The encoded message (k bytes) that the private-key operation turns into a signature.
/// `input` is the data for CKM_RSA_PKCS/X_509 and the hash for every other scheme.
fn signature_block(mech: &Mechanism, k: usize, bits: usize, input: &[u8]) -> Result<Vec<u8>> {
    let block = match mech {
        Mechanism::RsaPkcs => rsa_pad::pkcs1_sign_encode(input, k),
        Mechanism::HashRsaPkcs(h) => {
            let mut t = h.digest_info_prefix().to_vec();
            t.extend_from_slice(input);
            rsa_pad::pkcs1_sign_encode(&t, k)
        }
        Mechanism::RsaX509 => {
            return left_pad(input, k)
                .map(|v| v.to_vec())
                .ok_or(Error(CKR_DATA_LEN_RANGE))
        }
        Mechanism::RsaPss { params, .. } => {
            if input.len() != params.hash.output_len() {
                return fail_because(
                    CKR_DATA_LEN_RANGE,
                    format!(
                        "PSS input is {} bytes; the parameters' hash gives {}",
                        input.len(),
                        params.hash.output_len()
                    ),
                );
            }
            rsa_pad::pss_encode(input, bits, params.hash, params.mgf, params.salt_len)
        }
        _ => return fail(CKR_MECHANISM_INVALID),
    };
    block.map_err(|_| Error(CKR_DATA_LEN_RANGE))
}

pub fn sign(mech: &Mechanism, key: &PreparedKey, input: &[u8]) -> Result<Vec<u8>> {
    let block = signature_block(mech, key.modulus_len(), key.modulus_bits(), input)?;
    let sig = key
        .private_op(&block)
        .map_err(|e| engine_err(e, CKR_DATA_INVALID))?;
    Ok(sig.to_vec())
}

pub fn verify(mech: &Mechanism, key: &PublicKey, input: &[u8], signature: &[u8]) -> Result<()> {
    let k = key.modulus_len();
    if signature.len() != k {
        return fail(CKR_SIGNATURE_LEN_RANGE);
    }
    let block = key
        .public_op(signature)
        .map_err(|e| engine_err(e, CKR_SIGNATURE_INVALID))?;
    let ok = match mech {
        Mechanism::RsaPss { params, .. } => {
            if input.len() != params.hash.output_len() {
                return fail(CKR_DATA_LEN_RANGE);
            }
            rsa_pad::pss_verify(
                input,
                &block,
                key.modulus_bits(),
                params.hash,
                params.mgf,
                params.salt_len,
            )
            .is_ok()
        }
        Mechanism::RsaX509 => match left_pad(input, k) {
            Some(expected) => expected[..] == block[..],
            None => return fail(CKR_DATA_LEN_RANGE),
        },
        _ => {
            // Encoding the expected block and comparing rejects every non-canonical encoding.
            let expected = signature_block(mech, k, key.modulus_bits(), input)?;
            expected == block
        }
    };
    if ok {
        Ok(())
    } else {
        fail(CKR_SIGNATURE_INVALID)
    }
}

pub fn encrypt(mech: &Mechanism, key: &PublicKey, data: &[u8]) -> Result<Vec<u8>> {
    let k = key.modulus_len();
    let block = match mech {
        Mechanism::RsaPkcs => rsa_pad::pkcs1_encrypt_pad(data, k),
        Mechanism::RsaOaep(p) => rsa_pad::oaep_encode(data, k, p.hash, p.mgf, &p.label),
        Mechanism::RsaX509 => left_pad(data, k).map(|v| v.to_vec()).ok_or(PadError::TooLong),
        _ => return fail(CKR_MECHANISM_INVALID),
    }
    .map_err(|_| Error(CKR_DATA_LEN_RANGE))?;
    key.public_op(&block).map_err(|e| engine_err(e, CKR_DATA_INVALID))
}

pub fn decrypt(mech: &Mechanism, key: &PreparedKey, ciphertext: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
    let k = key.modulus_len();
    if ciphertext.len() != k {
        return fail(CKR_ENCRYPTED_DATA_LEN_RANGE);
    }
    let block = key
        .private_op(ciphertext)
        .map_err(|e| engine_err(e, CKR_ENCRYPTED_DATA_INVALID))?;
    match mech {
        Mechanism::RsaX509 => Ok(block),
        Mechanism::RsaPkcs => Ok(rsa_pad::pkcs1_decrypt_unpad(
            &block,
            ciphertext,
            key.implicit_rejection_secret(),
        )),
        Mechanism::RsaOaep(p) => rsa_pad::oaep_decode(&block, p.hash, p.mgf, &p.label)
            .map_err(|_| Error(CKR_ENCRYPTED_DATA_INVALID)),
        _ => fail(CKR_MECHANISM_INVALID),
    }
}
