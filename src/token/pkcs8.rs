//! Private keys as PKCS#8 `PrivateKeyInfo` DER (RFC 5208), the form SoftHSM and OpenSSL put
//! inside a wrapped private key, to and from the attributes of a private key object. What the
//! DER holds is each key type's model's to read and write (`KeyModel::to_pkcs8`,
//! `read_pkcs8`); this file keeps what holds for every key type: the envelope, SoftHSM's
//! padding after it, and the errors. It checks nothing about the key itself: the object made
//! from it goes through the same consistency checks as `C_CreateObject`
//! (`object::derive_key_attributes`).

use super::attributes::Attributes;
use crate::error::{fail_because, Error, Result};
use crate::mechanism::{key_model, key_models};
use cryptoki_sys::*;
use rsa::pkcs8::der::Decode;
use rsa::pkcs8::PrivateKeyInfoRef;
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
    let (_, rest) =
        PrivateKeyInfoRef::from_der_partial(der).map_err(|_| invalid("not a PKCS#8 PrivateKeyInfo"))?;
    // SoftHSM zero-pads the PKCS#8 to a multiple of 8 bytes before CKM_AES_KEY_WRAP_PAD, so
    // the padding is inside the wrapped data: up to 7 zero bytes after the DER are accepted.
    if rest.len() >= 8 || rest.iter().any(|b| *b != 0) {
        return Err(invalid("data after the PKCS#8 PrivateKeyInfo"));
    }
    let der = &der[..der.len() - rest.len()];
    for model in key_models() {
        if let Some(attrs) = model.read_pkcs8(der) {
            return Ok(PrivateKeyMaterial {
                key_type: model.key_type(),
                attrs: attrs?,
            });
        }
    }
    let held: Vec<&str> = key_models().map(|m| m.name()).collect();
    Err(invalid(&format!(
        "a PKCS#8 key of an algorithm or curve the token does not hold (it holds {})",
        held.join(", ")
    )))
}

/// The PKCS#8 DER of a private key object.
pub fn encode(a: &Attributes) -> Result<Zeroizing<Vec<u8>>> {
    match a.key_type().and_then(key_model) {
        Some(model) => model.to_pkcs8(a),
        None => fail_because(
            CKR_KEY_NOT_WRAPPABLE,
            "only private keys of a key type the token has can be wrapped as PKCS#8",
        ),
    }
}
