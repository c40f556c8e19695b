//! The key model of `CKK_EC` (P-256, P-384, P-521; the `Ec` family's) and `CKK_EC_EDWARDS`
//! (Ed25519, Ed448; the `EdDsa` family's), one `KeyModel` for both since they are objects of
//! the same attributes: `CKA_EC_PARAMS` naming a curve of the key type, `CKA_EC_POINT`, and a
//! private key's `CKA_VALUE`. Checks and normalises the encodings (`ec_params`), makes the
//! usable keys (`key.rs`), generates pairs with their pairwise consistency test, and reads and
//! writes PKCS#8 (RFC 5915 through the curve crates, RFC 8410 for Ed25519 and Ed448).

use super::{PrivateKey, PublicKey};
use crate::attributes::Attributes;
use crate::error::{fail_because, Error, Result};
use crate::mechanism::ec_params::{self, Curve};
use crate::mechanism::key_model::{self, KeyModel, Material, UsableKey};
use cryptoki_sys::*;
use rsa::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use std::sync::Arc;
use zeroize::Zeroizing;

/// The keys of one EC key type.
pub struct EcKeys(CK_KEY_TYPE);

pub static EC_KEYS: EcKeys = EcKeys(CKK_EC);
pub static EDWARDS_KEYS: EcKeys = EcKeys(CKK_EC_EDWARDS);

/// `CKA_EC_POINT` on a private key is this token's addition: applications (OpenSSL's
/// provider among them) read the public point from the private key when they hold only it.
const PUBLIC: &[CK_ATTRIBUTE_TYPE] = &[CKA_EC_PARAMS, CKA_EC_POINT];
const PRIVATE: &[CK_ATTRIBUTE_TYPE] = &[CKA_EC_PARAMS, CKA_EC_POINT, CKA_VALUE];
const REQUIRED_PRIVATE: &[CK_ATTRIBUTE_TYPE] = &[CKA_EC_PARAMS, CKA_VALUE];
/// The scalar, or the RFC 8032 private key.
const SECRET: &[CK_ATTRIBUTE_TYPE] = &[CKA_VALUE];
/// The prepared forms of an EC key, without the ECDSA point table (`footprint` adds it).
const KEY_FOOTPRINT: usize = 1024;

/// The curve of an EC key's `CKA_EC_PARAMS`, which must suit its key type.
pub fn curve_of(a: &Attributes) -> Result<Curve> {
    let curve = ec_params::parse_ec_params(a.get(CKA_EC_PARAMS).unwrap_or(&[]))?;
    if Some(curve.key_type()) != a.key_type() {
        return fail_because(
            CKR_CURVE_NOT_SUPPORTED,
            format!(
                "curve {} is not one for key type 0x{:x}",
                curve.name(),
                a.key_type().unwrap_or(CK_UNAVAILABLE_INFORMATION)
            ),
        );
    }
    Ok(curve)
}

fn private(a: &Attributes) -> Result<PrivateKey> {
    PrivateKey::from_value(curve_of(a)?, a.get(CKA_VALUE).unwrap_or(&[]))
}

fn public(a: &Attributes) -> Result<PublicKey> {
    let curve = curve_of(a)?;
    let raw = ec_params::unwrap_point(curve, a.get(CKA_EC_POINT).unwrap_or(&[]))?;
    PublicKey::from_point(curve, &raw)
}

fn not_wrappable(why: &str) -> Error {
    log::info!("CKR_KEY_NOT_WRAPPABLE: {why}");
    Error(CKR_KEY_NOT_WRAPPABLE)
}

/// The curve and private value of a PKCS#8 key of key type `kt`'s curves.
fn decode_pkcs8(kt: CK_KEY_TYPE, der: &[u8]) -> Option<(Curve, Zeroizing<Vec<u8>>)> {
    let value = |v: &[u8]| Zeroizing::new(v.to_vec());
    if kt == CKK_EC_EDWARDS {
        if let Ok(k) = ed25519_dalek::SigningKey::from_pkcs8_der(der) {
            return Some((Curve::Ed25519, value(&k.to_bytes())));
        }
        if let Ok(k) = ed448_goldilocks::SigningKey::from_pkcs8_der(der) {
            return Some((Curve::Ed448, value(&k.to_bytes())));
        }
        return None;
    }
    if let Ok(k) = p256::SecretKey::from_pkcs8_der(der) {
        return Some((Curve::P256, value(&k.to_bytes())));
    }
    if let Ok(k) = p384::SecretKey::from_pkcs8_der(der) {
        return Some((Curve::P384, value(&k.to_bytes())));
    }
    if let Ok(k) = p521::SecretKey::from_pkcs8_der(der) {
        return Some((Curve::P521, value(&k.to_bytes())));
    }
    None
}

impl KeyModel for EcKeys {
    fn name(&self) -> &'static str {
        if self.0 == CKK_EC_EDWARDS {
            "EdDSA"
        } else {
            "EC"
        }
    }

    fn key_type(&self) -> CK_KEY_TYPE {
        self.0
    }

    fn attributes(&self, class: CK_OBJECT_CLASS) -> &'static [CK_ATTRIBUTE_TYPE] {
        match class {
            CKO_PUBLIC_KEY => PUBLIC,
            _ => PRIVATE,
        }
    }

    fn required(&self, class: CK_OBJECT_CLASS) -> &'static [CK_ATTRIBUTE_TYPE] {
        match class {
            CKO_PUBLIC_KEY => PUBLIC,
            _ => REQUIRED_PRIVATE,
        }
    }

    fn secret(&self) -> &'static [CK_ATTRIBUTE_TYPE] {
        SECRET
    }

    /// ECDSA, EdDSA and ECDH (which `CKA_DERIVE` governs): no encrypting, wrapping or
    /// recovering.
    fn signs_only(&self) -> bool {
        true
    }

    /// `CKA_EC_PARAMS` to the curve's OID, `CKA_EC_POINT` to the DER OCTET STRING of the
    /// uncompressed point (a private key gets the point of its scalar, which must equal a
    /// point given with it), a private `CKA_VALUE` to the order's length; `CKA_PUBLIC_KEY_INFO`
    /// from the point.
    fn complete(&self, a: &mut Attributes, class: CK_OBJECT_CLASS) -> Result<()> {
        let curve = curve_of(a)?;
        let given = match a.get(CKA_EC_POINT) {
            Some(_) => Some(public(a)?),
            None => None,
        };
        let public = if class == CKO_PRIVATE_KEY {
            let key = private(a)?;
            let public = key.public();
            if given.as_ref().is_some_and(|g| g.point() != public.point()) {
                return fail_because(
                    CKR_TEMPLATE_INCONSISTENT,
                    "CKA_EC_POINT is not the public point of the private key's CKA_VALUE",
                );
            }
            a.set_zeroizing(CKA_VALUE, key.value());
            public
        } else {
            match given {
                Some(p) => p,
                None => return fail_because(CKR_TEMPLATE_INCOMPLETE, "CKA_EC_POINT is required"),
            }
        };
        let point = public.point();
        a.set(CKA_EC_PARAMS, curve.oid_der().to_vec());
        a.set(CKA_EC_POINT, ec_params::wrap_point(&point));
        a.set(CKA_PUBLIC_KEY_INFO, ec_params::public_key_info(curve, &point));
        Ok(())
    }

    /// An `ec::PrivateKey`, prepared once per object (checked when the object was made).
    fn private_key(&self, a: &Attributes) -> Result<UsableKey> {
        Ok(Arc::new(private(a)?))
    }

    /// An `ec::PublicKey` from `CKA_EC_POINT` (which private objects carry too; one that does
    /// not gets the point of its scalar).
    fn public_key(&self, a: &Attributes) -> Result<UsableKey> {
        let key = match a.class() {
            Some(CKO_PRIVATE_KEY) if !a.contains(CKA_EC_POINT) => private(a).map(|k| k.public()),
            _ => public(a),
        };
        Ok(Arc::new(key?))
    }

    /// The curve from the public template's `CKA_EC_PARAMS` (the private template's when only
    /// it has one).
    fn check_generation(&self, public: &mut Attributes, private: &mut Attributes) -> Result<()> {
        key_model::refuse_material(public, private, &[CKA_EC_POINT, CKA_VALUE])?;
        key_model::shared_parameter(public, private, CKA_EC_PARAMS, "CKA_EC_PARAMS")?;
        curve_of(public).map(|_| ())
    }

    fn generate(&self, public: &mut Attributes, private: &mut Attributes) -> Result<()> {
        // `generate` runs the pairwise consistency test before the key is seen here.
        let key = PrivateKey::generate(curve_of(public)?)?;
        private.set_zeroizing(CKA_VALUE, key.value());
        public.set(CKA_EC_POINT, key.public().point());
        Ok(())
    }

    fn to_pkcs8(&self, a: &Attributes) -> Result<Zeroizing<Vec<u8>>> {
        let value = a.get(CKA_VALUE).unwrap_or(&[]);
        let bad = |_| not_wrappable("the EC private value does not fit its curve");
        let doc = match curve_of(a)? {
            Curve::P256 => p256::SecretKey::from_slice(value).map_err(bad)?.to_pkcs8_der(),
            Curve::P384 => p384::SecretKey::from_slice(value).map_err(bad)?.to_pkcs8_der(),
            Curve::P521 => p521::SecretKey::from_slice(value).map_err(bad)?.to_pkcs8_der(),
            // Version 1 (no public key), the form OpenSSL and SoftHSM write.
            Curve::Ed25519 => ed25519_dalek::pkcs8::KeypairBytes {
                secret_key: value
                    .try_into()
                    .map_err(|_| not_wrappable("an Ed25519 seed is 32 bytes"))?,
                public_key: None,
            }
            .to_pkcs8_der(),
            Curve::Ed448 => ed448::pkcs8::KeypairBytes {
                secret_key: value
                    .try_into()
                    .map_err(|_| not_wrappable("an Ed448 seed is 57 bytes"))?,
                public_key: None,
            }
            .to_pkcs8_der(),
        }
        .map_err(|_| not_wrappable("PKCS#8 encoding failed"))?;
        Ok(Zeroizing::new(doc.as_bytes().to_vec()))
    }

    fn read_pkcs8(&self, der: &[u8]) -> Option<Result<Material>> {
        let (curve, value) = decode_pkcs8(self.0, der)?;
        Some(Ok(vec![
            (CKA_EC_PARAMS, Zeroizing::new(curve.oid_der().to_vec())),
            (CKA_VALUE, value),
        ]))
    }

    fn footprint(&self, a: &Attributes, class: CK_OBJECT_CLASS) -> usize {
        // The point table, made on first use, is most of it (128 KiB on P-256, 120 KiB on an
        // Ed25519 private key).
        KEY_FOOTPRINT
            + match curve_of(a) {
                Ok(Curve::P256) => crate::engine::ec::p256::KeyTable::BYTES,
                Ok(Curve::P384) => crate::engine::ec::check::KeyTable::<p384::NistP384>::BYTES,
                Ok(Curve::P521) => crate::engine::ec::check::KeyTable::<p521::NistP521>::BYTES,
                // Only the private key keeps one (`C_Verify` runs the crate's strict check).
                Ok(Curve::Ed25519) if class == CKO_PRIVATE_KEY => crate::engine::ec::ed25519::KeyTable::BYTES,
                _ => 0,
            }
    }
}
