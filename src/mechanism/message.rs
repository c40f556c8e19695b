//! The message of a signature or verification as its parts arrive, for the families that sign
//! with public-key algorithms: hashed as it comes (hash-and-sign mechanisms), kept whole until
//! the Final call (pure EdDSA, ML-DSA and SLH-DSA hash the message more than once), or not
//! taken in parts at all (mechanisms whose input is a hash or a raw block).

use super::{HashAlg, Hasher};
use crate::error::{fail, fail_because, Result};
use cryptoki_sys::*;

/// Most a multi-part EdDSA or pure ML-DSA/SLH-DSA operation buffers: pure Ed25519 hashes the
/// message twice, and SLH-DSA does too, so the whole of it is kept until the Final call.
const MAX_BUFFERED: usize = 64 << 20;

pub struct Message {
    /// The mechanism, for the error of a single-part one given parts.
    mechanism: CK_MECHANISM_TYPE,
    hasher: Option<Hasher>,
    buffer: Option<Vec<u8>>,
}

impl Message {
    /// Hashed with `prehash` as it comes; single-part without one.
    pub fn hashed(mechanism: CK_MECHANISM_TYPE, prehash: Option<HashAlg>) -> Self {
        Message {
            mechanism,
            hasher: prehash.map(|h| h.hasher()),
            buffer: None,
        }
    }

    /// Kept whole until the Final call.
    pub fn buffered(mechanism: CK_MECHANISM_TYPE) -> Self {
        Message {
            mechanism,
            hasher: None,
            buffer: Some(Vec::new()),
        }
    }

    pub fn update(&mut self, data: &[u8]) -> Result<()> {
        match (&mut self.hasher, &mut self.buffer) {
            (Some(h), _) => {
                h.update(data);
                Ok(())
            }
            (None, Some(b)) => {
                if b.len() + data.len() > MAX_BUFFERED {
                    return fail_because(
                        CKR_DATA_LEN_RANGE,
                        format!("a multi-part message of this mechanism is limited to {MAX_BUFFERED} bytes"),
                    );
                }
                b.extend_from_slice(data);
                Ok(())
            }
            (None, None) => fail_because(
                CKR_FUNCTION_NOT_SUPPORTED,
                format!(
                    "mechanism 0x{:x} is single-part only; use C_Sign/C_Verify",
                    self.mechanism
                ),
            ),
        }
    }

    /// The value the scheme takes: the hash of everything, or the data of a one-shot call, or
    /// the buffered message.
    pub fn finish(&self, one_shot: Option<&[u8]>) -> Result<Vec<u8>> {
        match (one_shot, &self.hasher) {
            (Some(data), Some(h)) => {
                let mut h = h.clone();
                h.update(data);
                Ok(h.finalize())
            }
            (Some(data), None) => Ok(data.to_vec()),
            (None, Some(h)) => Ok(h.clone().finalize()),
            (None, None) => match &self.buffer {
                Some(b) => Ok(b.clone()),
                None => fail(CKR_OPERATION_NOT_INITIALIZED),
            },
        }
    }
}
