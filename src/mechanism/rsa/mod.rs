//! The RSA family: PKCS#1 v1.5, PSS, raw X.509 and OAEP signature and encryption schemes,
//! with the padding from `pad` and the arithmetic from the engine; what the family offers and
//! how it reads its parameters is in `family`, the running operations in `ops`, its key
//! objects (`CKK_RSA`) in `keys`.

mod family;
pub mod keys;
mod ops;
pub mod pad;

pub use family::{hash_pkcs_mechanism, hash_pss_mechanism, Rsa, RSA_MIN_BITS};

use super::HashAlg;
use crate::engine::{left_pad, EngineError, PreparedKey, PublicKey};
use crate::error::{fail, fail_because, Error, Result};
use cryptoki_sys::*;
use pad::PadError;
use zeroize::Zeroizing;

/// Parameters of PSS as the application gave them (`CK_RSA_PKCS_PSS_PARAMS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PssParams {
    pub hash: HashAlg,
    pub mgf: HashAlg,
    pub salt_len: usize,
}

/// Parameters of OAEP (`CK_RSA_PKCS_OAEP_PARAMS`); the label is the `pSourceData`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OaepParams {
    pub hash: HashAlg,
    pub mgf: HashAlg,
    pub label: Vec<u8>,
}

/// An RSA mechanism with its parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheme {
    KeyPairGen,
    /// `CKM_RSA_PKCS`.
    Pkcs,
    /// `CKM_RSA_X_509`.
    X509,
    /// `CKM_RSA_PKCS_PSS` (prehash `None`, input is the hash) or `CKM_SHAx_RSA_PKCS_PSS`.
    Pss {
        prehash: Option<HashAlg>,
        params: PssParams,
    },
    /// `CKM_SHAx_RSA_PKCS`: hash, DigestInfo, PKCS#1 v1.5.
    HashPkcs(HashAlg),
    Oaep(OaepParams),
}

fn engine_err(e: EngineError, input_rv: CK_RV) -> Error {
    match e {
        EngineError::InputOutOfRange => Error(input_rv),
        EngineError::FaultDetected => Error(CKR_DEVICE_ERROR),
        _ => Error(CKR_GENERAL_ERROR),
    }
}

/// The hash a mechanism applies to the data before padding (hash-and-sign mechanisms).
pub fn prehash(mech: &Scheme) -> Option<HashAlg> {
    match mech {
        Scheme::HashPkcs(h) => Some(*h),
        Scheme::Pss { prehash, .. } => *prehash,
        _ => None,
    }
}

/// The encoded message (k bytes) that the private-key operation turns into a signature.
/// `input` is the data for CKM_RSA_PKCS/X_509 and the hash for every other scheme.
fn signature_block(mech: &Scheme, k: usize, bits: usize, input: &[u8]) -> Result<Vec<u8>> {
    let block = match mech {
        Scheme::Pkcs => pad::pkcs1_sign_encode(input, k),
        Scheme::HashPkcs(h) => {
            let mut t = h.digest_info_prefix().to_vec();
            t.extend_from_slice(input);
            pad::pkcs1_sign_encode(&t, k)
        }
        Scheme::X509 => {
            return left_pad(input, k)
                .map(|v| v.to_vec())
                .ok_or(Error(CKR_DATA_LEN_RANGE))
        }
        Scheme::Pss { params, .. } => {
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
            pad::pss_encode(input, bits, params.hash, params.mgf, params.salt_len)
        }
        _ => return fail(CKR_MECHANISM_INVALID),
    };
    block.map_err(|_| Error(CKR_DATA_LEN_RANGE))
}

pub fn sign(mech: &Scheme, key: &PreparedKey, input: &[u8]) -> Result<Vec<u8>> {
    let block = signature_block(mech, key.modulus_len(), key.modulus_bits(), input)?;
    let sig = key
        .private_op(&block)
        .map_err(|e| engine_err(e, CKR_DATA_INVALID))?;
    Ok(sig.to_vec())
}

pub fn verify(mech: &Scheme, key: &PublicKey, input: &[u8], signature: &[u8]) -> Result<()> {
    let k = key.modulus_len();
    if signature.len() != k {
        return fail(CKR_SIGNATURE_LEN_RANGE);
    }
    let block = key
        .public_op(signature)
        .map_err(|e| engine_err(e, CKR_SIGNATURE_INVALID))?;
    let ok = match mech {
        Scheme::Pss { params, .. } => {
            if input.len() != params.hash.output_len() {
                return fail(CKR_DATA_LEN_RANGE);
            }
            pad::pss_verify(
                input,
                &block,
                key.modulus_bits(),
                params.hash,
                params.mgf,
                params.salt_len,
            )
            .is_ok()
        }
        Scheme::X509 => match left_pad(input, k) {
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

pub fn encrypt(mech: &Scheme, key: &PublicKey, data: &[u8]) -> Result<Vec<u8>> {
    let k = key.modulus_len();
    let block = match mech {
        Scheme::Pkcs => pad::pkcs1_encrypt_pad(data, k),
        Scheme::Oaep(p) => pad::oaep_encode(data, k, p.hash, p.mgf, &p.label),
        Scheme::X509 => left_pad(data, k).map(|v| v.to_vec()).ok_or(PadError::TooLong),
        _ => return fail(CKR_MECHANISM_INVALID),
    }
    .map_err(|_| Error(CKR_DATA_LEN_RANGE))?;
    key.public_op(&block).map_err(|e| engine_err(e, CKR_DATA_INVALID))
}

pub fn decrypt(mech: &Scheme, key: &PreparedKey, ciphertext: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
    let k = key.modulus_len();
    if ciphertext.len() != k {
        return fail(CKR_ENCRYPTED_DATA_LEN_RANGE);
    }
    let block = key
        .private_op(ciphertext)
        .map_err(|e| engine_err(e, CKR_ENCRYPTED_DATA_INVALID))?;
    match mech {
        Scheme::X509 => Ok(block),
        Scheme::Pkcs => Ok(pad::pkcs1_decrypt_unpad(
            &block,
            ciphertext,
            key.implicit_rejection_secret(),
        )),
        Scheme::Oaep(p) => {
            pad::oaep_decode(&block, p.hash, p.mgf, &p.label).map_err(|_| Error(CKR_ENCRYPTED_DATA_INVALID))
        }
        _ => fail(CKR_MECHANISM_INVALID),
    }
}
