//! ML-DSA (FIPS 204) as a post-quantum signature family (`pq::Family`): `CKK_ML_DSA` keys of
//! `CKP_ML_DSA_44/65/87`, generated from and stored with their 32-byte seed ξ (`CKA_SEED`) and
//! the expanded private key (`CKA_VALUE`, FIPS 204 skEncode); `CKM_ML_DSA` and the HashML-DSA
//! mechanisms that hash on the token. The arithmetic is RustCrypto's `ml-dsa`.

use super::pq::{self, unknown_set, Family, PreHash, PrivateKey, PublicKey};
use crate::error::{fail_because, Error, Result};
use cryptoki_sys::*;
use ml_dsa::pkcs8::DecodePrivateKey;
use ml_dsa::{Keypair, MlDsa44, MlDsa65, MlDsa87, MlDsaParams, Signature, SigningKey, VerifyingKey, B32};
use std::sync::Arc;
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, Zeroizing};

pub struct MlDsa;

/// The HashML-DSA mechanisms that hash on the token, one for each hash of PKCS#11 3.2.
const HASH_MECHANISMS: &[(CK_MECHANISM_TYPE, PreHash)] = &[
    (CKM_HASH_ML_DSA_SHA224, PreHash::Sha224),
    (CKM_HASH_ML_DSA_SHA256, PreHash::Sha256),
    (CKM_HASH_ML_DSA_SHA384, PreHash::Sha384),
    (CKM_HASH_ML_DSA_SHA512, PreHash::Sha512),
    (CKM_HASH_ML_DSA_SHA3_224, PreHash::Sha3_224),
    (CKM_HASH_ML_DSA_SHA3_256, PreHash::Sha3_256),
    (CKM_HASH_ML_DSA_SHA3_384, PreHash::Sha3_384),
    (CKM_HASH_ML_DSA_SHA3_512, PreHash::Sha3_512),
    (CKM_HASH_ML_DSA_SHAKE128, PreHash::Shake128),
    (CKM_HASH_ML_DSA_SHAKE256, PreHash::Shake256),
];

/// The seed ξ is 32 bytes in every parameter set.
pub const SEED_LEN: usize = 32;

/// The DER of id-ml-dsa-44/65/87 (2.16.840.1.101.3.4.3.17-19, RFC 9881).
fn oid(set: CK_ULONG) -> [u8; 11] {
    let last = match set {
        CKP_ML_DSA_44 => 17,
        CKP_ML_DSA_65 => 18,
        _ => 19,
    };
    [0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03, last]
}

impl Family for MlDsa {
    fn name(&self) -> &'static str {
        "ML-DSA"
    }

    fn key_type(&self) -> CK_KEY_TYPE {
        CKK_ML_DSA
    }

    fn key_pair_gen(&self) -> CK_MECHANISM_TYPE {
        CKM_ML_DSA_KEY_PAIR_GEN
    }

    fn sign_mechanism(&self) -> CK_MECHANISM_TYPE {
        CKM_ML_DSA
    }

    fn hash_sign_mechanism(&self) -> CK_MECHANISM_TYPE {
        CKM_HASH_ML_DSA
    }

    fn hash_mechanisms(&self) -> &'static [(CK_MECHANISM_TYPE, PreHash)] {
        HASH_MECHANISMS
    }

    fn key_sizes(&self) -> (CK_ULONG, CK_ULONG) {
        (1312, 2592)
    }

    /// The seed ξ beside the expanded key.
    fn private_attributes(&self) -> &'static [CK_ATTRIBUTE_TYPE] {
        &[CKA_PARAMETER_SET, CKA_SEED, CKA_VALUE]
    }

    fn generate(&self, set: CK_ULONG) -> Result<Box<dyn PrivateKey>> {
        let mut seed = Zeroizing::new([0u8; SEED_LEN]);
        getrandom::fill(&mut seed[..]).map_err(|_| Error(CKR_FUNCTION_FAILED))?;
        from_seed(set, &seed[..])
    }

    fn private_key(
        &self,
        set: CK_ULONG,
        seed: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<Box<dyn PrivateKey>> {
        // The expanded key alone is refused (PKCS#11 3.2 lets a token ask for the seed): the
        // crate cannot check an expanded key and may panic on a malformed one.
        let Some(seed) = seed else {
            return fail_because(
                CKR_TEMPLATE_INCOMPLETE,
                "an ML-DSA private key needs CKA_SEED (the expanded key alone is not accepted)",
            );
        };
        let key = from_seed(set, seed)?;
        if let Some(value) = value {
            let expanded = key.material().into_iter().find(|(t, _)| *t == CKA_VALUE);
            let same = expanded.is_some_and(|(_, v)| bool::from(v.as_slice().ct_eq(value)));
            if !same {
                return fail_because(
                    CKR_TEMPLATE_INCONSISTENT,
                    "CKA_VALUE is not the expanded ML-DSA key of CKA_SEED",
                );
            }
        }
        Ok(key)
    }

    fn public_key(&self, set: CK_ULONG, value: &[u8]) -> Result<Box<dyn PublicKey>> {
        match set {
            CKP_ML_DSA_44 => Public::<MlDsa44>::decode(set, value),
            CKP_ML_DSA_65 => Public::<MlDsa65>::decode(set, value),
            CKP_ML_DSA_87 => Public::<MlDsa87>::decode(set, value),
            _ => unknown_set("ML-DSA", set),
        }
    }

    fn read_pkcs8(&self, der: &[u8]) -> Option<Box<dyn PrivateKey>> {
        // The crate reads the seed form of RFC 9881 (the expanded-only and "both" forms are
        // refused, as an expanded key alone is at creation).
        if let Ok(sk) = SigningKey::<MlDsa44>::from_pkcs8_der(der) {
            return Some(Box::new(Private::new(CKP_ML_DSA_44, sk)));
        }
        if let Ok(sk) = SigningKey::<MlDsa65>::from_pkcs8_der(der) {
            return Some(Box::new(Private::new(CKP_ML_DSA_65, sk)));
        }
        if let Ok(sk) = SigningKey::<MlDsa87>::from_pkcs8_der(der) {
            return Some(Box::new(Private::new(CKP_ML_DSA_87, sk)));
        }
        None
    }
}

fn from_seed(set: CK_ULONG, seed: &[u8]) -> Result<Box<dyn PrivateKey>> {
    // The copy is the key itself: zeroized on drop (the crate's array type does not).
    let Ok(seed) = B32::try_from(seed).map(Zeroizing::new) else {
        return fail_because(
            CKR_ATTRIBUTE_VALUE_INVALID,
            format!("an ML-DSA seed is {SEED_LEN} bytes, not {}", seed.len()),
        );
    };
    Ok(match set {
        CKP_ML_DSA_44 => Box::new(Private::new(set, SigningKey::<MlDsa44>::from_seed(&seed))),
        CKP_ML_DSA_65 => Box::new(Private::new(set, SigningKey::<MlDsa65>::from_seed(&seed))),
        CKP_ML_DSA_87 => Box::new(Private::new(set, SigningKey::<MlDsa87>::from_seed(&seed))),
        _ => return unknown_set("ML-DSA", set),
    })
}

/// A signing key (the crate zeroizes it on drop) and its public half, made once.
struct Private<P: MlDsaParams> {
    set: CK_ULONG,
    sk: SigningKey<P>,
    public: Arc<Public<P>>,
}

impl<P: MlDsaParams + 'static> Private<P> {
    fn new(set: CK_ULONG, sk: SigningKey<P>) -> Self {
        let public = Arc::new(Public {
            set,
            vk: sk.verifying_key(),
        });
        Private { set, sk, public }
    }
}

impl<P: MlDsaParams + 'static> PrivateKey for Private<P> {
    fn parameter_set(&self) -> CK_ULONG {
        self.set
    }

    fn material(&self) -> Vec<(CK_ATTRIBUTE_TYPE, Zeroizing<Vec<u8>>)> {
        // skEncode is what PKCS#11 3.2 calls CKA_VALUE; the crate marks it deprecated in favour
        // of the seed, which is stored beside it.
        #[allow(deprecated)]
        let mut encoded = self.sk.expanded_key().to_expanded();
        let expanded = Zeroizing::new(encoded.to_vec());
        encoded.zeroize();
        vec![
            (CKA_SEED, Zeroizing::new(self.sk.as_seed().to_vec())),
            (CKA_VALUE, expanded),
        ]
    }

    fn public(&self) -> Arc<dyn PublicKey> {
        self.public.clone()
    }

    fn signature_len(&self) -> usize {
        signature_len(self.set)
    }

    fn sign_internal(&self, message: &[&[u8]], hedged: bool) -> Result<Vec<u8>> {
        // rnd: fresh randomness for the hedged variant, zeros for the deterministic one
        // (FIPS 204 Algorithm 2).
        let mut rnd = B32::default();
        if hedged {
            getrandom::fill(&mut rnd).map_err(|_| Error(CKR_FUNCTION_FAILED))?;
        }
        let sig = self
            .sk
            .expanded_key()
            .sign_internal(message, &rnd)
            .encode()
            .to_vec();
        rnd.zeroize();
        Ok(sig)
    }

    fn to_pkcs8(&self) -> Result<Zeroizing<Vec<u8>>> {
        Ok(seed_pkcs8(self.set, self.sk.as_seed()))
    }
}

/// The PKCS#8 PrivateKeyInfo of RFC 9881's seed form, written out: SEQUENCE { version 0,
/// AlgorithmIdentifier { id-ml-dsa-* }, OCTET STRING { [0] IMPLICIT OCTET STRING seed } }.
/// (The crate's encoder asks for bounds a generic parameter set cannot name.)
fn seed_pkcs8(set: CK_ULONG, seed: &[u8]) -> Zeroizing<Vec<u8>> {
    let mut der = Zeroizing::new(Vec::with_capacity(54));
    der.extend_from_slice(&[0x30, 0x34, 0x02, 0x01, 0x00, 0x30, 0x0b]);
    der.extend_from_slice(&oid(set));
    der.extend_from_slice(&[0x04, 0x22, 0x80, 0x20]);
    der.extend_from_slice(seed);
    der
}

struct Public<P: MlDsaParams> {
    set: CK_ULONG,
    vk: VerifyingKey<P>,
}

impl<P: MlDsaParams + 'static> Public<P> {
    fn decode(set: CK_ULONG, value: &[u8]) -> Result<Box<dyn PublicKey>> {
        let Ok(enc) = ml_dsa::EncodedVerifyingKey::<P>::try_from(value) else {
            return fail_because(
                CKR_ATTRIBUTE_VALUE_INVALID,
                format!(
                    "an ML-DSA public key of this parameter set is not {} bytes",
                    value.len()
                ),
            );
        };
        // Every string of the right length is a public key (pkDecode has no failure).
        Ok(Box::new(Public {
            set,
            vk: VerifyingKey::<P>::decode(&enc),
        }))
    }
}

impl<P: MlDsaParams> PublicKey for Public<P> {
    fn value(&self) -> Vec<u8> {
        self.vk.encode().to_vec()
    }

    fn public_key_info(&self) -> Vec<u8> {
        pq::spki(&oid(self.set), &self.value())
    }

    fn signature_len(&self) -> usize {
        signature_len(self.set)
    }

    fn verify_internal(&self, message: &[&[u8]], signature: &[u8]) -> bool {
        let Ok(sig) = Signature::<P>::try_from(signature) else {
            return false;
        };
        self.vk.verify_internal(&message.concat(), &sig)
    }
}

/// FIPS 204 Table 2.
pub fn signature_len(set: CK_ULONG) -> usize {
    match set {
        CKP_ML_DSA_44 => 2420,
        CKP_ML_DSA_65 => 3309,
        _ => 4627,
    }
}

#[cfg(test)]
mod tests;
