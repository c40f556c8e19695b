//! What the post-quantum signature families (FIPS 204 ML-DSA, FIPS 205 SLH-DSA) share. A
//! family is a folder that implements `Family` here and one line `Pq(&...)` in
//! `mechanism::REGISTRY`; everything around it (mechanism list, parameter parsing and running
//! operations in `adapter.rs`; key objects, generation and PKCS#8 wrapping, the family's
//! `KeyModel`, in `keys.rs`; the pre-hashes of HashML-DSA and HashSLH-DSA in `prehash.rs`) goes
//! through this folder. What the families share lives here too: the
//! `CK_SIGN_ADDITIONAL_CONTEXT` choices, the message framing M' of FIPS 204 §5.2/§5.4 and FIPS
//! 205 §10.2/§10.3 (pure and pre-hash), and the check before release.

mod adapter;
mod keys;
mod prehash;

pub use adapter::Pq;
pub use prehash::{PreHash, PreHasher};

use crate::error::{fail_because, Error, Result};
use cryptoki_sys::*;
use std::sync::Arc;
use zeroize::Zeroizing;

/// The post-quantum families among `mechanism::REGISTRY`.
pub fn families() -> impl Iterator<Item = &'static dyn Family> {
    super::REGISTRY.iter().filter_map(|f| f.post_quantum())
}

/// A post-quantum signature family: its key type, mechanisms and keys.
pub trait Family: Sync {
    /// The family's name, as FIPS 204/205 give it.
    fn name(&self) -> &'static str;
    fn key_type(&self) -> CK_KEY_TYPE;
    fn key_pair_gen(&self) -> CK_MECHANISM_TYPE;
    /// The pure signature mechanism (`CKM_ML_DSA`, `CKM_SLH_DSA`).
    fn sign_mechanism(&self) -> CK_MECHANISM_TYPE;
    /// The pre-hash mechanism whose data is PH(M), hashed by the caller, its hash named in
    /// `CK_HASH_SIGN_ADDITIONAL_CONTEXT` (`CKM_HASH_ML_DSA`, `CKM_HASH_SLH_DSA`).
    fn hash_sign_mechanism(&self) -> CK_MECHANISM_TYPE;
    /// The pre-hash mechanisms that hash on the token, with their hash.
    fn hash_mechanisms(&self) -> &'static [(CK_MECHANISM_TYPE, PreHash)];
    /// Smallest and largest public key in bytes (`C_GetMechanismInfo`'s unit for these keys).
    fn key_sizes(&self) -> (CK_ULONG, CK_ULONG);
    /// The key-material attributes of its private key objects: `CKA_PARAMETER_SET`,
    /// `CKA_VALUE`, and `CKA_SEED` where PKCS#11 3.2 gives the family one. (Public key
    /// objects have `CKA_PARAMETER_SET` and `CKA_VALUE` in every family.)
    fn private_attributes(&self) -> &'static [CK_ATTRIBUTE_TYPE];
    /// A new key of parameter set `set`.
    fn generate(&self, set: CK_ULONG) -> Result<Box<dyn PrivateKey>>;
    /// The private key of an object's `CKA_PARAMETER_SET`, `CKA_SEED` and `CKA_VALUE`.
    fn private_key(
        &self,
        set: CK_ULONG,
        seed: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<Box<dyn PrivateKey>>;
    /// The public key of an object's `CKA_PARAMETER_SET` and `CKA_VALUE`.
    fn public_key(&self, set: CK_ULONG, value: &[u8]) -> Result<Box<dyn PublicKey>>;
    /// The key inside a PKCS#8 `PrivateKeyInfo`, if it is one of this family's.
    fn read_pkcs8(&self, der: &[u8]) -> Option<Box<dyn PrivateKey>>;
}

/// A private key, expanded once per object. Implementations zeroize on drop.
pub trait PrivateKey: Send + Sync {
    fn parameter_set(&self) -> CK_ULONG;
    /// The attributes a private key object holds for it (`CKA_SEED`, `CKA_VALUE`).
    fn material(&self) -> Vec<(CK_ATTRIBUTE_TYPE, Zeroizing<Vec<u8>>)>;
    fn public(&self) -> Arc<dyn PublicKey>;
    fn signature_len(&self) -> usize;
    /// `Sign_internal` over M' given in parts: hedged (fresh randomness) or deterministic.
    fn sign_internal(&self, message: &[&[u8]], hedged: bool) -> Result<Vec<u8>>;
    fn to_pkcs8(&self) -> Result<Zeroizing<Vec<u8>>>;
}

pub trait PublicKey: Send + Sync {
    /// `CKA_VALUE` of the public key (FIPS 204 pkEncode, FIPS 205 PK.seed‖PK.root).
    fn value(&self) -> Vec<u8>;
    /// `CKA_PUBLIC_KEY_INFO`: the DER SubjectPublicKeyInfo.
    fn public_key_info(&self) -> Vec<u8>;
    /// `Verify_internal` over M' given in parts.
    fn verify_internal(&self, message: &[&[u8]], signature: &[u8]) -> bool;
    /// The set's signature length: C_Verify refuses any other with CKR_SIGNATURE_LEN_RANGE.
    fn signature_len(&self) -> usize;
}

pub fn family(key_type: CK_KEY_TYPE) -> Option<&'static dyn Family> {
    families().find(|f| f.key_type() == key_type)
}

/// The family and pre-hash of a signature mechanism type that hashes on the token (or none).
pub fn sign_mechanism(m: CK_MECHANISM_TYPE) -> Option<(&'static dyn Family, Option<PreHash>)> {
    families().find_map(|f| {
        if f.sign_mechanism() == m {
            return Some((f, None));
        }
        f.hash_mechanisms()
            .iter()
            .find(|(t, _)| *t == m)
            .map(|(_, h)| (f, Some(*h)))
    })
}

/// The family of a key pair generation mechanism type.
pub fn key_pair_gen(m: CK_MECHANISM_TYPE) -> Option<&'static dyn Family> {
    families().find(|f| f.key_pair_gen() == m)
}

/// The mechanism type of a signature mechanism of `key_type` with `prehash`.
pub fn mechanism_type(key_type: CK_KEY_TYPE, prehash: Option<PreHash>) -> CK_MECHANISM_TYPE {
    let Some(f) = family(key_type) else {
        return CK_UNAVAILABLE_INFORMATION;
    };
    match prehash {
        None => f.sign_mechanism(),
        Some(h) => f
            .hash_mechanisms()
            .iter()
            .find(|(_, x)| *x == h)
            .map_or(CK_UNAVAILABLE_INFORMATION, |(t, _)| *t),
    }
}

/// `CK_SIGN_ADDITIONAL_CONTEXT` as checked: the hedge choice and the context string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignParams {
    pub hedge: CK_HEDGE_TYPE,
    pub context: Vec<u8>,
}

impl Default for SignParams {
    /// No parameter: `CKH_HEDGE_PREFERRED` and the empty context (PKCS#11 3.2).
    fn default() -> Self {
        SignParams {
            hedge: CKH_HEDGE_PREFERRED,
            context: Vec::new(),
        }
    }
}

/// FIPS 204 and 205 limit the context to 255 bytes (its length is one byte of M').
pub const MAX_CONTEXT: usize = 255;

/// Checks a parameter's hedge choice and context length before the context is read.
pub fn check_params(hedge: CK_HEDGE_TYPE, context_len: CK_ULONG) -> Result<()> {
    if !matches!(
        hedge,
        CKH_HEDGE_PREFERRED | CKH_HEDGE_REQUIRED | CKH_DETERMINISTIC_REQUIRED
    ) {
        return fail_because(
            CKR_MECHANISM_PARAM_INVALID,
            format!("hedgeVariant 0x{hedge:x} is none of CKH_HEDGE_PREFERRED, CKH_HEDGE_REQUIRED, CKH_DETERMINISTIC_REQUIRED"),
        );
    }
    if context_len > MAX_CONTEXT as CK_ULONG {
        return fail_because(
            CKR_MECHANISM_PARAM_INVALID,
            format!("a context of {context_len} bytes; FIPS 204 and 205 allow at most {MAX_CONTEXT}"),
        );
    }
    Ok(())
}

/// M' as its parts (FIPS 204 Algorithms 2 and 4, FIPS 205 Algorithms 22 and 23): the domain
/// byte (0 pure, 1 pre-hash) and the context's length, the context, then the message M, or the
/// hash's OID and PH(M). The context was kept to 255 bytes when the parameter was read
/// (`check_params`); a value that is not PH(M)'s length is refused here, as `CKM_HASH_ML_DSA`
/// takes PH(M) from the caller.
struct MPrime<'a> {
    header: [u8; 2],
    context: &'a [u8],
    oid: Option<[u8; 11]>,
    value: &'a [u8],
}

impl<'a> MPrime<'a> {
    fn new(prehash: Option<PreHash>, params: &'a SignParams, value: &'a [u8]) -> Result<Self> {
        if let Some(h) = prehash {
            if value.len() != h.output_len() {
                return fail_because(
                    CKR_DATA_LEN_RANGE,
                    format!("PH(M) of {h:?} is {} bytes, not {}", h.output_len(), value.len()),
                );
            }
        }
        let len = u8::try_from(params.context.len()).map_err(|_| Error(CKR_MECHANISM_PARAM_INVALID))?;
        Ok(MPrime {
            header: [prehash.is_some() as u8, len],
            context: &params.context,
            oid: prehash.map(PreHash::oid),
            value,
        })
    }

    fn parts(&self) -> [&[u8]; 4] {
        let oid: &[u8] = match &self.oid {
            Some(o) => o,
            None => &[],
        };
        [&self.header, self.context, oid, self.value]
    }
}

/// Signs `value` (the message, or its hash with `prehash`) and releases the signature only if
/// the key's own public half verifies it, as RSA and EC signatures are released.
pub fn sign(
    key: &dyn PrivateKey,
    prehash: Option<PreHash>,
    params: &SignParams,
    value: &[u8],
) -> Result<Vec<u8>> {
    let m_prime = MPrime::new(prehash, params, value)?;
    let message = m_prime.parts();
    let hedged = params.hedge != CKH_DETERMINISTIC_REQUIRED;
    let sig = key.sign_internal(&message, hedged)?;
    let public = key.public();
    super::release_checked("post-quantum", sig, |s| {
        public.verify_internal(&message, s).then_some(()).ok_or(())
    })
}

pub fn verify(
    key: &dyn PublicKey,
    prehash: Option<PreHash>,
    params: &SignParams,
    value: &[u8],
    sig: &[u8],
) -> Result<()> {
    if sig.len() != key.signature_len() {
        return fail_because(
            CKR_SIGNATURE_LEN_RANGE,
            format!(
                "this key's signatures are {} bytes, not {}",
                key.signature_len(),
                sig.len()
            ),
        );
    }
    let m_prime = MPrime::new(prehash, params, value)?;
    if key.verify_internal(&m_prime.parts(), sig) {
        Ok(())
    } else {
        Err(Error(CKR_SIGNATURE_INVALID))
    }
}

/// A parameter set named by `CKA_PARAMETER_SET` that the family does not have.
pub fn unknown_set<T>(family: &str, set: CK_ULONG) -> Result<T> {
    fail_because(
        CKR_PARAMETER_SET_NOT_SUPPORTED,
        format!("{family}: parameter set 0x{set:x} is not supported"),
    )
}

/// A DER SubjectPublicKeyInfo with an algorithm of no parameters (RFC 9881, RFC 9909):
/// SEQUENCE { SEQUENCE { OID }, BIT STRING (0 unused bits) key }.
pub fn spki(oid_der: &[u8], key: &[u8]) -> Vec<u8> {
    fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        let n = body.len();
        if n < 0x80 {
            v.push(n as u8);
        } else if n < 0x100 {
            v.extend([0x81, n as u8]);
        } else {
            v.extend([0x82, (n >> 8) as u8, n as u8]);
        }
        v.extend_from_slice(body);
        v
    }
    let alg = tlv(0x30, oid_der);
    let mut bits = vec![0u8];
    bits.extend_from_slice(key);
    let mut body = alg;
    body.extend(tlv(0x03, &bits));
    tlv(0x30, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_outside_the_spec_are_refused() {
        check_params(CKH_HEDGE_PREFERRED, 0).unwrap();
        check_params(CKH_DETERMINISTIC_REQUIRED, 255).unwrap();
        assert_eq!(check_params(3, 0).unwrap_err().0, CKR_MECHANISM_PARAM_INVALID);
        assert_eq!(
            check_params(CKH_HEDGE_REQUIRED, 256).unwrap_err().0,
            CKR_MECHANISM_PARAM_INVALID
        );
    }

    #[test]
    fn every_mechanism_names_its_family() {
        for f in families() {
            assert_eq!(sign_mechanism(f.sign_mechanism()).unwrap().1, None);
            assert_eq!(key_pair_gen(f.key_pair_gen()).unwrap().key_type(), f.key_type());
            for (m, h) in f.hash_mechanisms() {
                assert_eq!(mechanism_type(f.key_type(), Some(*h)), *m);
            }
        }
    }

    /// M' of HashML-DSA as FIPS 204 Algorithm 4 writes it (and HashSLH-DSA's, FIPS 205
    /// Algorithm 23, the same): 0x01, the context's length in one byte, the context, the DER of
    /// the hash's OID (SHA-256: 2.16.840.1.101.3.4.2.1), PH(M). Pure: 0x00, length, context, M.
    #[test]
    fn m_prime_is_fips_204_algorithm_4() {
        let params = SignParams {
            hedge: CKH_HEDGE_PREFERRED,
            context: b"ctx".to_vec(),
        };
        let ph = [0xabu8; 32];
        let m = MPrime::new(Some(PreHash::Sha256), &params, &ph).unwrap();
        let mut expected = vec![0x01, 0x03, b'c', b't', b'x'];
        expected.extend([0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01]);
        expected.extend([0xab; 32]);
        assert_eq!(m.parts().concat(), expected);
        let none = SignParams::default();
        let m = MPrime::new(Some(PreHash::Shake256), &none, &[7; 64]).unwrap();
        let mut expected = vec![
            0x01, 0x00, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x0c,
        ];
        expected.extend([7; 64]);
        assert_eq!(m.parts().concat(), expected);
        let pure = MPrime::new(None, &params, b"M").unwrap();
        assert_eq!(pure.parts().concat(), b"\x00\x03ctxM");
        // PH(M) of another length than the hash's is no HashML-DSA input.
        for len in [31, 33, 0] {
            let e = MPrime::new(Some(PreHash::Sha256), &params, &vec![0; len])
                .err()
                .unwrap();
            assert_eq!(e.0, CKR_DATA_LEN_RANGE);
        }
    }
}
