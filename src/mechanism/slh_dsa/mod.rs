//! SLH-DSA (FIPS 205) as a post-quantum signature family (`pq::Family`): `CKK_SLH_DSA` keys of
//! the twelve SHA2 and SHAKE parameter sets (`CKP_SLH_DSA_*`), `CKA_VALUE` being
//! SK.seed‖SK.prf‖PK.seed‖PK.root (private) or PK.seed‖PK.root (public); `CKM_SLH_DSA` and the
//! HashSLH-DSA mechanisms that hash on the token. The arithmetic is RustCrypto's `slh-dsa`.

use super::pq::{self, unknown_set, Family, PreHash, PrivateKey, PublicKey};
use crate::error::{fail_because, Error, Result};
use cryptoki_sys::*;
use digest::typenum::Unsigned;
use rsa::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use slh_dsa::*;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, Zeroizing};

pub struct SlhDsa;

const HASH_MECHANISMS: &[(CK_MECHANISM_TYPE, PreHash)] = &[
    (CKM_HASH_SLH_DSA_SHA224, PreHash::Sha224),
    (CKM_HASH_SLH_DSA_SHA256, PreHash::Sha256),
    (CKM_HASH_SLH_DSA_SHA384, PreHash::Sha384),
    (CKM_HASH_SLH_DSA_SHA512, PreHash::Sha512),
    (CKM_HASH_SLH_DSA_SHA3_224, PreHash::Sha3_224),
    (CKM_HASH_SLH_DSA_SHA3_256, PreHash::Sha3_256),
    (CKM_HASH_SLH_DSA_SHA3_384, PreHash::Sha3_384),
    (CKM_HASH_SLH_DSA_SHA3_512, PreHash::Sha3_512),
    (CKM_HASH_SLH_DSA_SHAKE128, PreHash::Shake128),
    (CKM_HASH_SLH_DSA_SHAKE256, PreHash::Shake256),
];

/// Runs `$f::<P>($args)` with the crate's parameter set type of `$set`.
macro_rules! with_set {
    ($set:expr, $f:ident($($arg:expr),*)) => {
        match $set {
            CKP_SLH_DSA_SHA2_128S => $f::<Sha2_128s>($($arg),*),
            CKP_SLH_DSA_SHAKE_128S => $f::<Shake128s>($($arg),*),
            CKP_SLH_DSA_SHA2_128F => $f::<Sha2_128f>($($arg),*),
            CKP_SLH_DSA_SHAKE_128F => $f::<Shake128f>($($arg),*),
            CKP_SLH_DSA_SHA2_192S => $f::<Sha2_192s>($($arg),*),
            CKP_SLH_DSA_SHAKE_192S => $f::<Shake192s>($($arg),*),
            CKP_SLH_DSA_SHA2_192F => $f::<Sha2_192f>($($arg),*),
            CKP_SLH_DSA_SHAKE_192F => $f::<Shake192f>($($arg),*),
            CKP_SLH_DSA_SHA2_256S => $f::<Sha2_256s>($($arg),*),
            CKP_SLH_DSA_SHAKE_256S => $f::<Shake256s>($($arg),*),
            CKP_SLH_DSA_SHA2_256F => $f::<Sha2_256f>($($arg),*),
            CKP_SLH_DSA_SHAKE_256F => $f::<Shake256f>($($arg),*),
            other => unknown_set("SLH-DSA", other),
        }
    };
}

/// Every parameter set, for PKCS#8 decoding and tests.
pub const PARAMETER_SETS: [CK_ULONG; 12] = [
    CKP_SLH_DSA_SHA2_128S,
    CKP_SLH_DSA_SHAKE_128S,
    CKP_SLH_DSA_SHA2_128F,
    CKP_SLH_DSA_SHAKE_128F,
    CKP_SLH_DSA_SHA2_192S,
    CKP_SLH_DSA_SHAKE_192S,
    CKP_SLH_DSA_SHA2_192F,
    CKP_SLH_DSA_SHAKE_192F,
    CKP_SLH_DSA_SHA2_256S,
    CKP_SLH_DSA_SHAKE_256S,
    CKP_SLH_DSA_SHA2_256F,
    CKP_SLH_DSA_SHAKE_256F,
];

impl Family for SlhDsa {
    fn name(&self) -> &'static str {
        "SLH-DSA"
    }

    fn key_type(&self) -> CK_KEY_TYPE {
        CKK_SLH_DSA
    }

    fn key_pair_gen(&self) -> CK_MECHANISM_TYPE {
        CKM_SLH_DSA_KEY_PAIR_GEN
    }

    fn sign_mechanism(&self) -> CK_MECHANISM_TYPE {
        CKM_SLH_DSA
    }

    fn hash_sign_mechanism(&self) -> CK_MECHANISM_TYPE {
        CKM_HASH_SLH_DSA
    }

    fn hash_mechanisms(&self) -> &'static [(CK_MECHANISM_TYPE, PreHash)] {
        HASH_MECHANISMS
    }

    fn key_sizes(&self) -> (CK_ULONG, CK_ULONG) {
        (32, 64)
    }

    /// No `CKA_SEED`: the seeds are inside `CKA_VALUE`.
    fn private_attributes(&self) -> &'static [CK_ATTRIBUTE_TYPE] {
        &[CKA_PARAMETER_SET, CKA_VALUE]
    }

    fn generate(&self, set: CK_ULONG) -> Result<Box<dyn PrivateKey>> {
        with_set!(set, generate(set))
    }

    fn private_key(
        &self,
        set: CK_ULONG,
        seed: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<Box<dyn PrivateKey>> {
        // PKCS#11 3.2 gives SLH-DSA keys no CKA_SEED: refused rather than stored unchecked
        // (generation refuses it too).
        if seed.is_some() {
            return fail_because(
                CKR_ATTRIBUTE_TYPE_INVALID,
                "an SLH-DSA private key has no CKA_SEED (its seeds are inside CKA_VALUE)",
            );
        }
        let Some(value) = value else {
            return fail_because(CKR_TEMPLATE_INCOMPLETE, "an SLH-DSA private key needs CKA_VALUE");
        };
        with_set!(set, private_from_value(set, value))
    }

    fn public_key(&self, set: CK_ULONG, value: &[u8]) -> Result<Box<dyn PublicKey>> {
        with_set!(set, public_from_value(set, value))
    }

    fn read_pkcs8(&self, der: &[u8]) -> Option<Box<dyn PrivateKey>> {
        PARAMETER_SETS
            .iter()
            .find_map(|&set| with_set!(set, from_pkcs8(set, der)).ok())
    }
}

fn generate<P: ParameterSet + 'static>(set: CK_ULONG) -> Result<Box<dyn PrivateKey>> {
    let n = <P as VerifyingKeyLen>::VkLen::USIZE / 2;
    let mut seeds = Zeroizing::new(vec![0u8; 3 * n]);
    getrandom::fill(&mut seeds).map_err(|_| Error(CKR_FUNCTION_FAILED))?;
    // FIPS 205 Algorithm 21: SK.seed, SK.prf and PK.seed are n random bytes each.
    let sk = SigningKey::<P>::slh_keygen_internal(&seeds[..n], &seeds[n..2 * n], &seeds[2 * n..]);
    Ok(Box::new(Private::new(set, sk)))
}

/// The private key of its 4n bytes; PK.root is computed again from the seeds and must be the
/// one given, so that a key and its public half always belong together.
fn private_from_value<P: ParameterSet + 'static>(set: CK_ULONG, value: &[u8]) -> Result<Box<dyn PrivateKey>> {
    let n = <P as VerifyingKeyLen>::VkLen::USIZE / 2;
    if value.len() != 4 * n {
        return fail_because(
            CKR_ATTRIBUTE_VALUE_INVALID,
            format!(
                "an SLH-DSA private key of this parameter set is {} bytes, not {}",
                4 * n,
                value.len()
            ),
        );
    }
    let sk = SigningKey::<P>::slh_keygen_internal(&value[..n], &value[n..2 * n], &value[2 * n..3 * n]);
    let root = sk.as_ref().to_bytes();
    if !bool::from(root[n..].ct_eq(&value[3 * n..])) {
        return fail_because(
            CKR_TEMPLATE_INCONSISTENT,
            "the SLH-DSA private key's PK.root is not the root of its SK.seed and PK.seed",
        );
    }
    Ok(Box::new(Private::new(set, sk)))
}

fn public_from_value<P: ParameterSet + 'static>(_set: CK_ULONG, value: &[u8]) -> Result<Box<dyn PublicKey>> {
    match VerifyingKey::<P>::try_from(value) {
        Ok(vk) => Ok(Box::new(Public::<P> { vk })),
        Err(_) => fail_because(
            CKR_ATTRIBUTE_VALUE_INVALID,
            format!(
                "an SLH-DSA public key of this parameter set is not {} bytes",
                value.len()
            ),
        ),
    }
}

fn from_pkcs8<P: ParameterSet + 'static>(set: CK_ULONG, der: &[u8]) -> Result<Box<dyn PrivateKey>> {
    let sk = SigningKey::<P>::from_pkcs8_der(der).map_err(|_| Error(CKR_WRAPPED_KEY_INVALID))?;
    // The same consistency check as an imported CKA_VALUE.
    let mut bytes = sk.to_bytes();
    let key = private_from_value::<P>(set, &bytes);
    bytes.zeroize();
    key
}

struct Private<P: ParameterSet> {
    set: CK_ULONG,
    sk: SigningKey<P>,
    public: Arc<Public<P>>,
}

impl<P: ParameterSet> Private<P> {
    fn new(set: CK_ULONG, sk: SigningKey<P>) -> Self {
        let public = Arc::new(Public {
            vk: sk.as_ref().clone(),
        });
        Private { set, sk, public }
    }
}

impl<P: ParameterSet + 'static> PrivateKey for Private<P> {
    fn parameter_set(&self) -> CK_ULONG {
        self.set
    }

    fn material(&self) -> Vec<(CK_ATTRIBUTE_TYPE, Zeroizing<Vec<u8>>)> {
        let mut bytes = self.sk.to_bytes();
        let value = Zeroizing::new(bytes.to_vec());
        bytes.zeroize();
        vec![(CKA_VALUE, value)]
    }

    fn public(&self) -> Arc<dyn PublicKey> {
        self.public.clone()
    }

    fn signature_len(&self) -> usize {
        <P as SignatureLen>::SigLen::USIZE
    }

    fn sign_internal(&self, message: &[&[u8]], hedged: bool) -> Result<Vec<u8>> {
        // opt_rand: n fresh bytes when hedged; without it the crate uses PK.seed, FIPS 205's
        // deterministic variant.
        let n = <P as VerifyingKeyLen>::VkLen::USIZE / 2;
        let mut rand = Zeroizing::new(vec![0u8; n]);
        if hedged {
            getrandom::fill(&mut rand).map_err(|_| Error(CKR_FUNCTION_FAILED))?;
        }
        let opt_rand = hedged.then_some(rand.as_slice());
        Ok(self.sk.slh_sign_internal(message, opt_rand).to_vec())
    }

    fn to_pkcs8(&self) -> Result<Zeroizing<Vec<u8>>> {
        let doc = self.sk.to_pkcs8_der().map_err(|_| {
            log::info!("CKR_KEY_NOT_WRAPPABLE: SLH-DSA PKCS#8 encoding failed");
            Error(CKR_KEY_NOT_WRAPPABLE)
        })?;
        Ok(Zeroizing::new(doc.as_bytes().to_vec()))
    }
}

struct Public<P: ParameterSet> {
    vk: VerifyingKey<P>,
}

impl<P: ParameterSet> PublicKey for Public<P> {
    fn value(&self) -> Vec<u8> {
        self.vk.to_vec()
    }

    fn public_key_info(&self) -> Vec<u8> {
        let body = P::ALGORITHM_OID.as_bytes();
        let mut oid = vec![0x06, body.len() as u8];
        oid.extend_from_slice(body);
        pq::spki(&oid, &self.value())
    }

    fn signature_len(&self) -> usize {
        <P as SignatureLen>::SigLen::USIZE
    }

    fn verify_internal(&self, message: &[&[u8]], signature: &[u8]) -> bool {
        let Ok(sig) = Signature::<P>::try_from(signature) else {
            return false;
        };
        self.vk.slh_verify_internal(message, &sig).is_ok()
    }
}

#[cfg(test)]
mod tests;
