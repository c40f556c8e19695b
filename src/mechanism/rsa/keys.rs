//! The key model of `CKK_RSA` (`KeyModel` for `RsaKeys`): the attributes of RSA public and
//! private key objects, their check (n = p·q, d·e ≡ 1 and the CRT parts, once, by
//! `PreparedKey::new`), the engine forms made of them, key pair generation by the engine, and
//! the PKCS#8 `PrivateKeyInfo` of RFC 5208 with its PKCS#1 `RSAPrivateKey` (RustCrypto's
//! `pkcs8`/`pkcs1` through the `rsa` crate).

use super::family::RSA_MIN_BITS;
use crate::attributes::Attributes;
use crate::engine::{self, KeyComponents, PreparedKey, PublicKey};
use crate::error::{fail_because, Error, Result};
use crate::mechanism::key_model::{self, KeyModel, Material, UsableKey};
use cryptoki_sys::*;
use rsa::pkcs1;
use rsa::pkcs8::der::asn1::OctetStringRef;
use rsa::pkcs8::der::{Decode, Encode};
use rsa::pkcs8::PrivateKeyInfoRef;
use std::sync::Arc;
use zeroize::Zeroizing;

pub struct RsaKeys;

const PUBLIC: &[CK_ATTRIBUTE_TYPE] = &[CKA_MODULUS, CKA_MODULUS_BITS, CKA_PUBLIC_EXPONENT];
/// In `RSAPrivateKey` field order: PKCS#8 unwrapping pairs them with its fields.
const PRIVATE: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_MODULUS,
    CKA_PUBLIC_EXPONENT,
    CKA_PRIVATE_EXPONENT,
    CKA_PRIME_1,
    CKA_PRIME_2,
    CKA_EXPONENT_1,
    CKA_EXPONENT_2,
    CKA_COEFFICIENT,
];
/// Everything of the private key after its public modulus and exponent.
const SECRET: &[CK_ATTRIBUTE_TYPE] = PRIVATE.split_at(2).1;
/// An RSA private key is prepared for every kernel family the CPU runs (IFMA, AVX2, MULX,
/// portable, reference): this many bytes per modulus byte, measured with
/// `benches/store_scale`; a public key holds a few copies of the modulus.
const PREPARED_PER_BYTE: usize = 72;
const PUBLIC_PER_BYTE: usize = 4;

/// The components of an RSA key object (empty where an attribute is absent).
pub fn components(a: &Attributes) -> KeyComponents {
    let secret = |t| Zeroizing::new(a.get(t).unwrap_or(&[]).to_vec());
    KeyComponents {
        modulus: a.get(CKA_MODULUS).unwrap_or(&[]).to_vec(),
        public_exponent: a.get(CKA_PUBLIC_EXPONENT).unwrap_or(&[]).to_vec(),
        private_exponent: secret(CKA_PRIVATE_EXPONENT),
        prime_1: secret(CKA_PRIME_1),
        prime_2: secret(CKA_PRIME_2),
        exponent_1: secret(CKA_EXPONENT_1),
        exponent_2: secret(CKA_EXPONENT_2),
        coefficient: secret(CKA_COEFFICIENT),
    }
}

/// Refuses a modulus shorter than `RSA_MIN_BITS`, the least `C_GetMechanismInfo` gives for
/// every RSA mechanism and key generation makes, with `CKR_KEY_SIZE_RANGE` (why that code and
/// not `CKR_ATTRIBUTE_VALUE_INVALID`: `key_model::check_secret_len`). A 512-bit modulus is
/// factored in hours on rented machines; the engine (and the `rsa` crate under it) would sign
/// with one from 512 bits up, so the token's own limit is checked here.
pub fn check_modulus_bits(bits: usize) -> Result<()> {
    if (bits as CK_ULONG) < RSA_MIN_BITS {
        return fail_because(
            CKR_KEY_SIZE_RANGE,
            format!(
                "an RSA key of {bits} bits is too small: the token takes RSA keys of {RSA_MIN_BITS} bits or more; make a new key of 2048 bits or more"
            ),
        );
    }
    Ok(())
}

fn not_wrappable(why: &str) -> Error {
    log::info!("CKR_KEY_NOT_WRAPPABLE: {why}");
    Error(CKR_KEY_NOT_WRAPPABLE)
}

fn wrapped_invalid(why: &str) -> Error {
    log::info!("CKR_WRAPPED_KEY_INVALID: {why}");
    Error(CKR_WRAPPED_KEY_INVALID)
}

impl KeyModel for RsaKeys {
    fn name(&self) -> &'static str {
        "RSA"
    }

    fn key_type(&self) -> CK_KEY_TYPE {
        CKK_RSA
    }

    fn attributes(&self, class: CK_OBJECT_CLASS) -> &'static [CK_ATTRIBUTE_TYPE] {
        match class {
            CKO_PUBLIC_KEY => PUBLIC,
            _ => PRIVATE,
        }
    }

    fn required(&self, class: CK_OBJECT_CLASS) -> &'static [CK_ATTRIBUTE_TYPE] {
        match class {
            CKO_PUBLIC_KEY => &[CKA_MODULUS, CKA_PUBLIC_EXPONENT],
            _ => &[CKA_MODULUS, CKA_PUBLIC_EXPONENT, CKA_PRIVATE_EXPONENT],
        }
    }

    fn secret(&self) -> &'static [CK_ATTRIBUTE_TYPE] {
        SECRET
    }

    fn signs_only(&self) -> bool {
        false
    }

    /// A modulus of `RSA_MIN_BITS` or more (`check_modulus_bits`); a private key needs its
    /// primes and gets its missing CRT parts; a public key its `CKA_MODULUS_BITS`; both
    /// `CKA_PUBLIC_KEY_INFO`. Every new RSA key object passes here: created, generated,
    /// unwrapped (`object::derive_key_attributes`).
    fn complete(&self, a: &mut Attributes, class: CK_OBJECT_CLASS) -> Result<()> {
        let n = a.get(CKA_MODULUS).unwrap_or(&[]).to_vec();
        let e = a.get(CKA_PUBLIC_EXPONENT).unwrap_or(&[]).to_vec();
        let public = PublicKey::new(&n, &e).map_err(|err| {
            log::info!("RSA key rejected: {err}");
            Error(CKR_ATTRIBUTE_VALUE_INVALID)
        })?;
        check_modulus_bits(public.modulus_bits())?;
        if class == CKO_PRIVATE_KEY {
            let c = components(a);
            if c.prime_1.is_empty() || c.prime_2.is_empty() {
                return fail_because(
                    CKR_TEMPLATE_INCOMPLETE,
                    "RSA private keys need CKA_PRIME_1 and CKA_PRIME_2",
                );
            }
            // n = p·q, d·e ≡ 1 and the CRT parts are all checked here, once.
            let key = PreparedKey::new(&c).map_err(|err| {
                log::info!("RSA private key rejected: {err}");
                Error(CKR_TEMPLATE_INCONSISTENT)
            })?;
            let full = engine::full_components(&key);
            a.set(CKA_EXPONENT_1, full.exponent_1.to_vec());
            a.set(CKA_EXPONENT_2, full.exponent_2.to_vec());
            a.set(CKA_COEFFICIENT, full.coefficient.to_vec());
        } else {
            let bits = public.modulus_bits() as CK_ULONG;
            if a.ulong(CKA_MODULUS_BITS).is_some_and(|b| b != bits) {
                return fail_because(
                    CKR_TEMPLATE_INCONSISTENT,
                    "CKA_MODULUS_BITS does not match CKA_MODULUS",
                );
            }
            a.set_ulong(CKA_MODULUS_BITS, bits);
        }
        if let Some(spki) = engine::public_key_info(&n, &e) {
            a.set(CKA_PUBLIC_KEY_INFO, spki);
        }
        Ok(())
    }

    /// The engine's `PreparedKey`.
    fn private_key(&self, a: &Attributes) -> Result<UsableKey> {
        match PreparedKey::new(&components(a)) {
            Ok(k) => Ok(Arc::new(k)),
            Err(err) => {
                log::error!("RSA private key unusable: {err}");
                Err(Error(CKR_KEY_HANDLE_INVALID))
            }
        }
    }

    /// The engine's `PublicKey`, of a public or a private key object.
    fn public_key(&self, a: &Attributes) -> Result<UsableKey> {
        let n = a.get(CKA_MODULUS).unwrap_or(&[]);
        let e = a.get(CKA_PUBLIC_EXPONENT).unwrap_or(&[]);
        match PublicKey::new(n, e) {
            Ok(k) => Ok(Arc::new(k)),
            Err(err) => {
                log::error!("RSA public key unusable: {err}");
                Err(Error(CKR_KEY_HANDLE_INVALID))
            }
        }
    }

    /// `CKA_MODULUS_BITS` from the public template (any length from 1024 to 16384 bits), the
    /// exponent from it or 65537.
    fn check_generation(&self, public: &mut Attributes, private: &mut Attributes) -> Result<()> {
        let bits = match public.ulong(CKA_MODULUS_BITS) {
            Some(b) => b as usize,
            None => return fail_because(CKR_TEMPLATE_INCOMPLETE, "CKA_MODULUS_BITS is required"),
        };
        let (min, max) = engine::keygen_limits();
        if bits < min || bits > max {
            return fail_because(
                CKR_KEY_SIZE_RANGE,
                format!("RSA keys are {min} to {max} bits, not {bits}"),
            );
        }
        key_model::refuse_material(public, private, &[CKA_MODULUS, CKA_PRIVATE_EXPONENT, CKA_PRIME_1])
    }

    /// The engine makes the key; its components are checked again when the private object is
    /// completed (`complete`: n = p·q, d·e ≡ 1, the CRT parts).
    fn generate(&self, public: &mut Attributes, private: &mut Attributes) -> Result<()> {
        let bits = public.ulong(CKA_MODULUS_BITS).unwrap_or(0) as usize;
        let e = public
            .get(CKA_PUBLIC_EXPONENT)
            .map(|e| e.to_vec())
            .unwrap_or(vec![1, 0, 1]);
        let c = engine::generate(bits, &e).map_err(|err| {
            log::info!("RSA key generation refused: {err}");
            Error(CKR_TEMPLATE_INCONSISTENT)
        })?;
        public.set(CKA_MODULUS, c.modulus.clone());
        public.set(CKA_PUBLIC_EXPONENT, c.public_exponent.clone());
        public.set_ulong(CKA_MODULUS_BITS, bits as CK_ULONG);
        private.set(CKA_MODULUS, c.modulus.clone());
        private.set(CKA_PUBLIC_EXPONENT, c.public_exponent.clone());
        private.set(CKA_PRIVATE_EXPONENT, c.private_exponent.to_vec());
        private.set(CKA_PRIME_1, c.prime_1.to_vec());
        private.set(CKA_PRIME_2, c.prime_2.to_vec());
        private.set(CKA_EXPONENT_1, c.exponent_1.to_vec());
        private.set(CKA_EXPONENT_2, c.exponent_2.to_vec());
        private.set(CKA_COEFFICIENT, c.coefficient.to_vec());
        Ok(())
    }

    /// With its CRT parts.
    fn to_pkcs8(&self, a: &Attributes) -> Result<Zeroizing<Vec<u8>>> {
        let field = |t| {
            pkcs1::UintRef::new(a.get(t).unwrap_or(&[]))
                .map_err(|_| not_wrappable("an RSA key component is not an integer"))
        };
        let key = pkcs1::RsaPrivateKeyRef {
            modulus: field(CKA_MODULUS)?,
            public_exponent: field(CKA_PUBLIC_EXPONENT)?,
            private_exponent: field(CKA_PRIVATE_EXPONENT)?,
            prime1: field(CKA_PRIME_1)?,
            prime2: field(CKA_PRIME_2)?,
            exponent1: field(CKA_EXPONENT_1)?,
            exponent2: field(CKA_EXPONENT_2)?,
            coefficient: field(CKA_COEFFICIENT)?,
            other_prime_infos: None,
        };
        let inner = Zeroizing::new(
            key.to_der()
                .map_err(|_| not_wrappable("RSAPrivateKey encoding failed"))?,
        );
        let octets = OctetStringRef::new(&inner).map_err(|_| not_wrappable("RSAPrivateKey too long"))?;
        let info = PrivateKeyInfoRef::new(pkcs1::ALGORITHM_ID, octets);
        Ok(Zeroizing::new(
            info.to_der()
                .map_err(|_| not_wrappable("PrivateKeyInfo encoding failed"))?,
        ))
    }

    /// The `RSAPrivateKey` fields as given, CRT parts included, so that the object's
    /// consistency check sees exactly what arrived.
    fn read_pkcs8(&self, der: &[u8]) -> Option<Result<Material>> {
        let info = PrivateKeyInfoRef::from_der(der).ok()?;
        if info.algorithm.oid != pkcs1::ALGORITHM_OID {
            return None;
        }
        let read = || {
            let k = pkcs1::RsaPrivateKeyRef::from_der(info.private_key.as_bytes())
                .map_err(|_| wrapped_invalid("not an RSAPrivateKey"))?;
            if k.other_prime_infos.is_some() {
                return Err(wrapped_invalid("multi-prime RSA keys are not supported"));
            }
            let fields = [
                k.modulus,
                k.public_exponent,
                k.private_exponent,
                k.prime1,
                k.prime2,
                k.exponent1,
                k.exponent2,
                k.coefficient,
            ];
            Ok(PRIVATE
                .iter()
                .zip(fields)
                .map(|(t, v)| (*t, Zeroizing::new(v.as_bytes().to_vec())))
                .collect())
        };
        Some(read())
    }

    fn footprint(&self, a: &Attributes, class: CK_OBJECT_CLASS) -> usize {
        let n = a.get(CKA_MODULUS).map_or(0, |n| n.len());
        match class {
            CKO_PRIVATE_KEY => n * PREPARED_PER_BYTE,
            _ => n * PUBLIC_PER_BYTE,
        }
    }
}
