//! The portable path: constant-time arithmetic from the `rsa` crate (crypto-bigint), used on
//! every CPU and as the reference the fast kernels are checked against.

use super::{left_pad, strip_zeros, EngineError, KeyComponents};
use rsa::hazmat::{rsa_decrypt, rsa_encrypt};
use rsa::traits::{PrivateKeyParts, PublicKeyParts};
use rsa::BoxedUint;
use zeroize::Zeroizing;

type NoRng = rand_core::UnwrapErr<getrandom::SysRng>;

pub(super) struct PortablePublic {
    key: rsa::PublicKey,
    precision: u32,
}

impl PortablePublic {
    pub(super) fn new(modulus: &[u8], public_exponent: &[u8]) -> Result<Self, EngineError> {
        let n = strip_zeros(modulus);
        let e = strip_zeros(public_exponent);
        if n.is_empty() || e.is_empty() || e.len() > 8 || n[n.len() - 1] & 1 == 0 {
            return Err(EngineError::InvalidKey);
        }
        let bits = (n.len() * 8) as u32;
        let n = BoxedUint::from_be_slice(n, bits).map_err(|_| EngineError::InvalidKey)?;
        let e = BoxedUint::from_be_slice(e, 64).map_err(|_| EngineError::InvalidKey)?;
        let key =
            rsa::PublicKey::new_with_size_limits(n, e, 512..=16384).map_err(|_| EngineError::InvalidKey)?;
        let precision = key.n_bits_precision();
        Ok(PortablePublic { key, precision })
    }

    pub(super) fn spki_der(&self) -> Option<Vec<u8>> {
        use rsa::pkcs8::EncodePublicKey;
        self.key.to_public_key_der().ok().map(|d| d.as_bytes().to_vec())
    }

    pub(super) fn public_op(&self, input: &[u8]) -> Result<Vec<u8>, EngineError> {
        let k = input.len();
        let m = BoxedUint::from_be_slice(input, self.precision).map_err(|_| EngineError::InputOutOfRange)?;
        if m >= self.key.n().as_ref() {
            return Err(EngineError::InputOutOfRange);
        }
        let c = rsa_encrypt(&self.key, &m).map_err(|_| EngineError::InputOutOfRange)?;
        let bytes = c.to_be_bytes();
        Ok(bytes[bytes.len() - k..].to_vec())
    }
}

pub struct PortableKey {
    key: rsa::PrivateKey,
    pub(super) public: PortablePublic,
}

impl PortableKey {
    pub fn new(c: &KeyComponents) -> Result<Self, EngineError> {
        let n = strip_zeros(&c.modulus);
        if n.is_empty() || strip_zeros(&c.public_exponent).len() > 8 {
            return Err(EngineError::InvalidKey);
        }
        let bits = (n.len() * 8) as u32;
        let big =
            |b: &[u8]| BoxedUint::from_be_slice(strip_zeros(b), bits).map_err(|_| EngineError::InvalidKey);
        let e = BoxedUint::from_be_slice(strip_zeros(&c.public_exponent), 64)
            .map_err(|_| EngineError::InvalidKey)?;
        let key = rsa::PrivateKey::from_components(
            big(n)?,
            e,
            big(&c.private_exponent)?,
            vec![big(&c.prime_1)?, big(&c.prime_2)?],
        )
        .map_err(|_| EngineError::InvalidKey)?;
        // CRT parts supplied by the caller must be the ones the primes imply; a key whose
        // stored dP, dQ or qInv disagree is corrupt, whatever the other parts say.
        let same = |given: &[u8], ours: Option<Box<[u8]>>| match ours {
            Some(ours) => given.is_empty() || strip_zeros(given) == strip_zeros(&ours),
            None => false,
        };
        let ok = same(&c.exponent_1, key.dp().map(|v| v.to_be_bytes()))
            && same(&c.exponent_2, key.dq().map(|v| v.to_be_bytes()))
            && same(&c.coefficient, key.crt_coefficient().map(|v| v.to_be_bytes()));
        if !ok {
            return Err(EngineError::InvalidKey);
        }
        let public = PortablePublic::new(&c.modulus, &c.public_exponent)?;
        Ok(PortableKey { key, public })
    }

    pub(super) fn components(&self) -> KeyComponents {
        components_of(&self.key)
    }

    /// One private-key operation, verified by re-encrypting with the public exponent.
    pub(super) fn private_op_checked(
        &self,
        input: &[u8],
        k: usize,
    ) -> Result<Zeroizing<Vec<u8>>, EngineError> {
        let precision = self.key.n_bits_precision();
        let c = BoxedUint::from_be_slice(input, precision).map_err(|_| EngineError::InputOutOfRange)?;
        if c >= self.key.n().as_ref() {
            return Err(EngineError::InputOutOfRange);
        }
        let m = rsa_decrypt(None::<&mut NoRng>, &self.key, &c).map_err(|_| EngineError::InputOutOfRange)?;
        let check = rsa_encrypt(&self.key, &m).map_err(|_| EngineError::FaultDetected)?;
        if check != c {
            return Err(EngineError::FaultDetected);
        }
        let bytes = Zeroizing::new(m.to_be_bytes().into_vec());
        left_pad(&bytes, k).ok_or(EngineError::FaultDetected)
    }
}

/// Reads every component of a key the engine made, as big-endian bytes.
pub(super) fn components_of(key: &rsa::PrivateKey) -> KeyComponents {
    let trimmed = |v: &BoxedUint| Zeroizing::new(strip_zeros(&v.to_be_bytes()).to_vec());
    let primes = key.primes();
    KeyComponents {
        modulus: key.n_bytes().into_vec(),
        public_exponent: key.e_bytes().into_vec(),
        private_exponent: trimmed(key.d()),
        prime_1: trimmed(primes[0].as_ref()),
        prime_2: trimmed(primes[1].as_ref()),
        exponent_1: key.dp().map(trimmed).unwrap_or_default(),
        exponent_2: key.dq().map(trimmed).unwrap_or_default(),
        coefficient: key.crt_coefficient().as_ref().map(trimmed).unwrap_or_default(),
    }
}
