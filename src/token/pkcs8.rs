//! Private keys as PKCS#8 `PrivateKeyInfo` DER (RFC 5208; RFC 8410 for Ed25519 and Ed448), the
//! form SoftHSM and OpenSSL put inside a wrapped private key: RSA keys and P-256, P-384, P-521,
//! Ed25519 and Ed448 keys, and ML-DSA and SLH-DSA keys (RFC 9881 seed form, RFC 9909; their
//! families read and write the DER), to and from the attributes of a private key object. The DER itself is read
//! and written by RustCrypto (`pkcs8`/`pkcs1` through the `rsa` crate, the curve crates'
//! PKCS#8 decoders, as `ferrohsm-util import` uses them); this file maps fields to attributes.
//! It checks nothing about the key itself: the object made from it goes through the same
//! consistency checks as `C_CreateObject` (`object::derive_key_attributes`).

use super::attributes::Attributes;
use super::object::ec_curve;
use crate::error::{fail_because, Error, Result};
use crate::mechanism::ec_params::Curve;
use cryptoki_sys::*;
use rsa::pkcs1;
use rsa::pkcs8::der::asn1::OctetStringRef;
use rsa::pkcs8::der::{Decode, Encode};
use rsa::pkcs8::{DecodePrivateKey, EncodePrivateKey, PrivateKeyInfoRef};
use zeroize::Zeroizing;

/// The key material a PKCS#8 blob holds, as `C_CreateObject` attributes of a private key.
pub struct PrivateKeyMaterial {
    pub key_type: CK_KEY_TYPE,
    pub attrs: Vec<(CK_ATTRIBUTE_TYPE, Zeroizing<Vec<u8>>)>,
}

fn invalid(why: &str) -> Error {
    log::info!("CKR_WRAPPED_KEY_INVALID: {why}");
    Error(CKR_WRAPPED_KEY_INVALID)
}

/// Reads a PKCS#8 private key; anything else (or a key type the token has not) is
/// `CKR_WRAPPED_KEY_INVALID`.
pub fn decode(der: &[u8]) -> Result<PrivateKeyMaterial> {
    let (info, rest) =
        PrivateKeyInfoRef::from_der_partial(der).map_err(|_| invalid("not a PKCS#8 PrivateKeyInfo"))?;
    // SoftHSM zero-pads the PKCS#8 to a multiple of 8 bytes before CKM_AES_KEY_WRAP_PAD, so
    // the padding is inside the wrapped data: up to 7 zero bytes after the DER are accepted.
    if rest.len() >= 8 || rest.iter().any(|b| *b != 0) {
        return Err(invalid("data after the PKCS#8 PrivateKeyInfo"));
    }
    let der = &der[..der.len() - rest.len()];
    if info.algorithm.oid == pkcs1::ALGORITHM_OID {
        // The RSAPrivateKey fields as given, CRT parts included, so that the object's
        // consistency check sees exactly what arrived.
        let k = pkcs1::RsaPrivateKeyRef::from_der(info.private_key.as_bytes())
            .map_err(|_| invalid("not an RSAPrivateKey"))?;
        if k.other_prime_infos.is_some() {
            return Err(invalid("multi-prime RSA keys are not supported"));
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
        let attrs = super::policy::RSA_PRIVATE
            .iter()
            .zip(fields)
            .map(|(t, v)| (*t, Zeroizing::new(v.as_bytes().to_vec())))
            .collect();
        return Ok(PrivateKeyMaterial {
            key_type: CKK_RSA,
            attrs,
        });
    }
    let ec = |curve: Curve, value: Zeroizing<Vec<u8>>| PrivateKeyMaterial {
        key_type: curve.key_type(),
        attrs: vec![
            (CKA_EC_PARAMS, Zeroizing::new(curve.oid_der().to_vec())),
            (CKA_VALUE, value),
        ],
    };
    if let Ok(k) = p256::SecretKey::from_pkcs8_der(der) {
        return Ok(ec(Curve::P256, Zeroizing::new(k.to_bytes().to_vec())));
    }
    if let Ok(k) = p384::SecretKey::from_pkcs8_der(der) {
        return Ok(ec(Curve::P384, Zeroizing::new(k.to_bytes().to_vec())));
    }
    if let Ok(k) = p521::SecretKey::from_pkcs8_der(der) {
        return Ok(ec(Curve::P521, Zeroizing::new(k.to_bytes().to_vec())));
    }
    if let Ok(k) = ed25519_dalek::SigningKey::from_pkcs8_der(der) {
        return Ok(ec(Curve::Ed25519, Zeroizing::new(k.to_bytes().to_vec())));
    }
    if let Ok(k) = ed448_goldilocks::SigningKey::from_pkcs8_der(der) {
        return Ok(ec(Curve::Ed448, Zeroizing::new(k.to_bytes().to_vec())));
    }
    for f in crate::mechanism::pq::families() {
        if let Some(k) = f.read_pkcs8(der) {
            let mut attrs = vec![(
                CKA_PARAMETER_SET,
                Zeroizing::new(k.parameter_set().to_ne_bytes().to_vec()),
            )];
            attrs.extend(k.material());
            return Ok(PrivateKeyMaterial {
                key_type: f.key_type(),
                attrs,
            });
        }
    }
    Err(invalid(
        "a PKCS#8 key of an algorithm or curve the token does not hold (RSA, P-256, P-384, P-521, Ed25519, Ed448, ML-DSA in the seed form, SLH-DSA)",
    ))
}

/// The PKCS#8 DER of a private key object (RSA with its CRT parts, or EC).
pub fn encode(a: &Attributes) -> Result<Zeroizing<Vec<u8>>> {
    let cannot = |why: &str| -> Error {
        log::info!("CKR_KEY_NOT_WRAPPABLE: {why}");
        Error(CKR_KEY_NOT_WRAPPABLE)
    };
    match a.key_type() {
        Some(CKK_RSA) => {
            let field = |t| {
                pkcs1::UintRef::new(a.get(t).unwrap_or(&[]))
                    .map_err(|_| cannot("an RSA key component is not an integer"))
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
                    .map_err(|_| cannot("RSAPrivateKey encoding failed"))?,
            );
            let octets = OctetStringRef::new(&inner).map_err(|_| cannot("RSAPrivateKey too long"))?;
            let info = PrivateKeyInfoRef::new(pkcs1::ALGORITHM_ID, octets);
            Ok(Zeroizing::new(
                info.to_der()
                    .map_err(|_| cannot("PrivateKeyInfo encoding failed"))?,
            ))
        }
        Some(CKK_EC | CKK_EC_EDWARDS) => {
            let value = a.get(CKA_VALUE).unwrap_or(&[]);
            let bad = |_| cannot("the EC private value does not fit its curve");
            let doc = match ec_curve(a)? {
                Curve::P256 => p256::SecretKey::from_slice(value).map_err(bad)?.to_pkcs8_der(),
                Curve::P384 => p384::SecretKey::from_slice(value).map_err(bad)?.to_pkcs8_der(),
                Curve::P521 => p521::SecretKey::from_slice(value).map_err(bad)?.to_pkcs8_der(),
                // Version 1 (no public key), the form OpenSSL and SoftHSM write.
                Curve::Ed25519 => ed25519_dalek::pkcs8::KeypairBytes {
                    secret_key: value
                        .try_into()
                        .map_err(|_| cannot("an Ed25519 seed is 32 bytes"))?,
                    public_key: None,
                }
                .to_pkcs8_der(),
                Curve::Ed448 => ed448::pkcs8::KeypairBytes {
                    secret_key: value
                        .try_into()
                        .map_err(|_| cannot("an Ed448 seed is 57 bytes"))?,
                    public_key: None,
                }
                .to_pkcs8_der(),
            }
            .map_err(|_| cannot("PKCS#8 encoding failed"))?;
            Ok(Zeroizing::new(doc.as_bytes().to_vec()))
        }
        Some(kt) if crate::mechanism::pq::family(kt).is_some() => {
            let f = crate::mechanism::pq::family(kt).ok_or(Error(CKR_KEY_NOT_WRAPPABLE))?;
            super::object::pq_private(f, a)
                .map_err(|_| cannot("the post-quantum private key is not usable"))?
                .to_pkcs8()
        }
        _ => fail_because(
            CKR_KEY_NOT_WRAPPABLE,
            "only RSA, EC, ML-DSA and SLH-DSA private keys can be wrapped as PKCS#8",
        ),
    }
}
