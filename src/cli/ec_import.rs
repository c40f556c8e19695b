//! `import` of elliptic-curve keys: P-256, P-384 and P-521 private keys in PKCS#8 or SEC1
//! (RFC 5915) and Ed25519 and Ed448 keys in PKCS#8 (RFC 8410), PEM or DER, read with RustCrypto and
//! stored as a token key pair (the token checks the scalar and the point itself).

use super::module::explain;
use cryptoki::object::{Attribute, KeyType, ObjectClass};
use cryptoki::session::Session;
use zeroize::Zeroizing;

/// An EC private key as PKCS#11 attributes want it.
pub struct EcKey {
    pub key_type: KeyType,
    /// `CKA_EC_PARAMS`: the curve's OID, DER.
    pub params: &'static [u8],
    /// `CKA_VALUE`: the scalar (big-endian) or the EdDSA seed.
    pub value: Zeroizing<Vec<u8>>,
    /// The raw public point (uncompressed SEC1, or RFC 8032's 32 or 57 bytes).
    pub point: Vec<u8>,
    pub curve: &'static str,
}

/// Tries each curve's PKCS#8 and SEC1 decoders, PEM then DER.
macro_rules! try_weierstrass {
    ($c:ident, $name:expr, $bytes:expr) => {{
        use $c::elliptic_curve::sec1::ToSec1Point;
        use $c::pkcs8::DecodePrivateKey;
        let text = std::str::from_utf8($bytes).ok();
        let key = text
            .and_then(|t| {
                $c::SecretKey::from_pkcs8_pem(t)
                    .ok()
                    .or_else(|| $c::SecretKey::from_sec1_pem(t).ok())
            })
            .or_else(|| $c::SecretKey::from_pkcs8_der($bytes).ok())
            .or_else(|| $c::SecretKey::from_sec1_der($bytes).ok());
        if let Some(k) = key {
            let curve = crate::mechanism::ec_params::parse_ec_params(&printable($name)).ok();
            return curve.map(|c| EcKey {
                key_type: KeyType::EC,
                params: c.oid_der(),
                value: Zeroizing::new(k.to_bytes().to_vec()),
                point: k.public_key().to_sec1_point(false).as_bytes().to_vec(),
                curve: $name,
            });
        }
    }};
}

fn printable(name: &str) -> Vec<u8> {
    let mut v = vec![0x13, name.len() as u8];
    v.extend_from_slice(name.as_bytes());
    v
}

/// The EC key in `bytes`, if it is one.
pub fn read_ec_key(bytes: &[u8]) -> Option<EcKey> {
    try_weierstrass!(p256, "P-256", bytes);
    try_weierstrass!(p384, "P-384", bytes);
    try_weierstrass!(p521, "P-521", bytes);
    use ed25519_dalek::pkcs8::DecodePrivateKey;
    let text = std::str::from_utf8(bytes).ok();
    let ed448 = text
        .and_then(|t| ed448_goldilocks::SigningKey::from_pkcs8_pem(t).ok())
        .or_else(|| ed448_goldilocks::SigningKey::from_pkcs8_der(bytes).ok());
    if let Some(k) = ed448 {
        return Some(EcKey {
            key_type: KeyType::EC_EDWARDS,
            params: crate::mechanism::ec_params::Curve::Ed448.oid_der(),
            value: Zeroizing::new(k.to_bytes().to_vec()),
            point: k.verifying_key().to_bytes().to_vec(),
            curve: "Ed448",
        });
    }
    let ed = text
        .and_then(|t| ed25519_dalek::SigningKey::from_pkcs8_pem(t).ok())
        .or_else(|| ed25519_dalek::SigningKey::from_pkcs8_der(bytes).ok())?;
    Some(EcKey {
        key_type: KeyType::EC_EDWARDS,
        params: crate::mechanism::ec_params::Curve::Ed25519.oid_der(),
        value: Zeroizing::new(ed.to_bytes().to_vec()),
        point: ed.verifying_key().to_bytes().to_vec(),
        curve: "Ed25519",
    })
}

/// Stores `key` as a token private key and, unless `no_public_key`, its public key.
pub fn store(
    s: &Session,
    key: &EcKey,
    id: Vec<u8>,
    label: Vec<u8>,
    no_public_key: bool,
) -> Result<(), String> {
    let private = [
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(key.key_type),
        Attribute::Token(true),
        Attribute::Private(true),
        Attribute::Sensitive(true),
        Attribute::Extractable(false),
        Attribute::Sign(true),
        Attribute::Id(id.clone()),
        Attribute::Label(label.clone()),
        Attribute::EcParams(key.params.to_vec()),
        Attribute::Value(key.value.to_vec()),
    ];
    s.create_object(&private)
        .map_err(|e| explain("cannot store the private key", e))?;
    if !no_public_key {
        let public = [
            Attribute::Class(ObjectClass::PUBLIC_KEY),
            Attribute::KeyType(key.key_type),
            Attribute::Token(true),
            Attribute::Private(false),
            Attribute::Verify(true),
            Attribute::Id(id),
            Attribute::Label(label),
            Attribute::EcParams(key.params.to_vec()),
            Attribute::EcPoint(crate::mechanism::ec_params::wrap_point(&key.point)),
        ];
        s.create_object(&public)
            .map_err(|e| explain("cannot store the public key", e))?;
    }
    Ok(())
}
