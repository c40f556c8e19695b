//! The AES family and the token's secret-key generation: `CKM_AES_KEY_GEN` and
//! `CKM_GENERIC_SECRET_KEY_GEN`, key wrapping (`wrap`: RFC 3394/5649), the block modes with
//! PKCS#11's multi-part rules (`modes`), and key derivation by encryption
//! (`CKM_AES_ECB_ENCRYPT_DATA`, `CKM_AES_CBC_ENCRYPT_DATA`). This file owns what the family
//! offers and how its parameters are checked.

pub mod modes;
pub mod wrap;

use crate::error::{fail, fail_because, Error, Result};
use crate::mechanism::key_model::MIN_SECRET_LEN;
use crate::mechanism::{
    info, params_of, AesMode, Crypter, Derived, Family, Generates, Key, Mechanism, Op, Param, ParamShape,
    Params, SecretKeyType,
};
use cryptoki_sys::*;
use modes::AesCrypt;
use std::sync::Arc;
use zeroize::Zeroizing;

pub struct Aes;

/// A mechanism of the family with its parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AesMechanism {
    KeyGen,
    GenericSecretKeyGen,
    /// `CKM_AES_KEY_WRAP` (`pad` false) or `CKM_AES_KEY_WRAP_PAD`.
    KeyWrap {
        pad: bool,
    },
    /// `CKM_AES_ECB`, `_CBC`, `_CBC_PAD`, `_CTR`, `_GCM` with their parameters.
    Mode(AesMode),
    /// `CKM_AES_ECB_ENCRYPT_DATA` (`iv` `None`) and `CKM_AES_CBC_ENCRYPT_DATA`: the derived
    /// key's value is the base key's encryption of `data` (whole blocks, no padding).
    EncryptData {
        iv: Option<[u8; 16]>,
        data: Vec<u8>,
    },
}

/// AES keys are 16, 24 or 32 bytes (`C_GetMechanismInfo` counts AES keys in bytes).
const KEY_MIN: CK_ULONG = 16;
const KEY_MAX: CK_ULONG = 32;

/// The longest generic secret `CKM_GENERIC_SECRET_KEY_GEN` makes, in bytes.
const GENERIC_MAX_GENERATED: usize = 512;

/// AES keys, and generic secrets: `MIN_SECRET_LEN` bytes or more, up to
/// `GENERIC_MAX_GENERATED` when generated.
static SECRET_KEY_TYPES: [SecretKeyType; 2] = [
    SecretKeyType {
        key_type: CKK_AES,
        name: "AES",
        lengths: &[16, 24, 32],
        max_generated: KEY_MAX as usize,
        check_value: Some(wrap::check_value),
    },
    SecretKeyType {
        key_type: CKK_GENERIC_SECRET,
        name: "generic secret",
        lengths: &[],
        max_generated: GENERIC_MAX_GENERATED,
        check_value: None,
    },
];

impl Family for Aes {
    fn name(&self) -> &'static str {
        "AES"
    }

    fn offers(&self) -> Vec<(CK_MECHANISM_TYPE, CK_MECHANISM_INFO)> {
        let crypt = CKF_ENCRYPT | CKF_DECRYPT;
        let aes = |flags| info(KEY_MIN, KEY_MAX, flags);
        let mut v = vec![
            (CKM_AES_KEY_GEN, aes(CKF_GENERATE)),
            // In bits, as PKCS#11 counts this mechanism's key sizes.
            (
                CKM_GENERIC_SECRET_KEY_GEN,
                info(
                    (MIN_SECRET_LEN * 8) as CK_ULONG,
                    (GENERIC_MAX_GENERATED * 8) as CK_ULONG,
                    CKF_GENERATE,
                ),
            ),
            (CKM_AES_KEY_WRAP, aes(CKF_WRAP | CKF_UNWRAP)),
            (CKM_AES_KEY_WRAP_PAD, aes(CKF_WRAP | CKF_UNWRAP)),
            (CKM_AES_ECB_ENCRYPT_DATA, aes(CKF_DERIVE)),
            (CKM_AES_CBC_ENCRYPT_DATA, aes(CKF_DERIVE)),
        ];
        for m in [CKM_AES_ECB, CKM_AES_CBC, CKM_AES_CTR, CKM_AES_GCM] {
            v.push((m, aes(crypt)));
        }
        // CBC-PAD also wraps keys (secret values, private keys as PKCS#8), as SoftHSM's does.
        v.push((CKM_AES_CBC_PAD, aes(crypt | CKF_WRAP | CKF_UNWRAP)));
        v
    }

    fn param_shape(&self, t: CK_MECHANISM_TYPE) -> Option<ParamShape> {
        Some(match t {
            CKM_AES_KEY_GEN
            | CKM_GENERIC_SECRET_KEY_GEN
            | CKM_AES_KEY_WRAP
            | CKM_AES_KEY_WRAP_PAD
            | CKM_AES_ECB => ParamShape::Length,
            CKM_AES_ECB_ENCRYPT_DATA => ParamShape::KeyDerivationStringData,
            CKM_AES_CBC_ENCRYPT_DATA => ParamShape::AesCbcEncryptData,
            CKM_AES_CBC | CKM_AES_CBC_PAD => ParamShape::Iv,
            CKM_AES_CTR => ParamShape::AesCtr,
            CKM_AES_GCM => ParamShape::Gcm,
            _ => return None,
        })
    }

    fn parse(&self, t: CK_MECHANISM_TYPE, param: Param<'_>) -> Result<Params> {
        Ok(Arc::new(match (t, param) {
            (CKM_AES_KEY_GEN, _) => AesMechanism::KeyGen,
            (CKM_GENERIC_SECRET_KEY_GEN, _) => AesMechanism::GenericSecretKeyGen,
            (CKM_AES_KEY_WRAP | CKM_AES_KEY_WRAP_PAD, Param::Length(n)) => {
                if n != 0 {
                    return fail_because(
                        CKR_MECHANISM_PARAM_INVALID,
                        "only the default AES key wrap IV is supported",
                    );
                }
                AesMechanism::KeyWrap {
                    pad: t == CKM_AES_KEY_WRAP_PAD,
                }
            }
            (CKM_AES_ECB_ENCRYPT_DATA, Param::KeyDerivationStringData { data }) => {
                AesMechanism::EncryptData {
                    iv: None,
                    data: data.read_required()?,
                }
            }
            (CKM_AES_ECB_ENCRYPT_DATA, _) => {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    "CKM_AES_ECB_ENCRYPT_DATA needs CK_KEY_DERIVATION_STRING_DATA",
                )
            }
            (CKM_AES_CBC_ENCRYPT_DATA, Param::AesCbcEncryptData { iv, data }) => AesMechanism::EncryptData {
                iv: Some(iv),
                data: data.read_required()?,
            },
            (CKM_AES_CBC_ENCRYPT_DATA, _) => {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    "CKM_AES_CBC_ENCRYPT_DATA needs CK_AES_CBC_ENCRYPT_DATA_PARAMS",
                )
            }
            (_, param) => AesMechanism::Mode(mode(t, param)?),
        }))
    }

    fn accepts_key_type(&self, m: &Mechanism, kt: CK_KEY_TYPE) -> bool {
        match m.params() {
            Some(AesMechanism::GenericSecretKeyGen) => kt == CKK_GENERIC_SECRET,
            _ => kt == CKK_AES,
        }
    }

    fn key_class(&self, m: &Mechanism, op: Op) -> Option<CK_OBJECT_CLASS> {
        let wraps = |mech: &AesMechanism| {
            matches!(
                mech,
                AesMechanism::KeyWrap { .. } | AesMechanism::Mode(AesMode::CbcPad { .. })
            )
        };
        match (params_of::<AesMechanism>(m).ok()?, op) {
            (AesMechanism::Mode(_), Op::Encrypt | Op::Decrypt) => Some(CKO_SECRET_KEY),
            (mech, Op::Wrap | Op::Unwrap) if wraps(mech) => Some(CKO_SECRET_KEY),
            (AesMechanism::EncryptData { .. }, Op::Derive) => Some(CKO_SECRET_KEY),
            _ => None,
        }
    }

    fn crypter(&self, m: &Mechanism, key: Key, encrypt: bool) -> Result<Box<dyn Crypter>> {
        let AesMechanism::Mode(mode) = params_of(m)? else {
            return fail(CKR_MECHANISM_INVALID);
        };
        Ok(Box::new(AesCrypter(AesCrypt::new(
            mode.clone(),
            key.secret()?,
            encrypt,
        )?)))
    }

    fn wrap(&self, m: &Mechanism, key: Key, value: &[u8]) -> Result<Vec<u8>> {
        let kek = key.secret()?;
        match params_of(m)? {
            AesMechanism::KeyWrap { pad } => wrap::wrap(kek, value, *pad).ok_or_else(|| {
                log::info!("CKR_KEY_SIZE_RANGE: CKM_AES_KEY_WRAP takes a multiple of 8 bytes, at least 16; CKM_AES_KEY_WRAP_PAD takes any length");
                Error(CKR_KEY_SIZE_RANGE)
            }),
            AesMechanism::Mode(mode @ AesMode::CbcPad { .. }) => {
                Ok(AesCrypt::new(mode.clone(), kek, true)?.single(value)?.to_vec())
            }
            _ => fail(CKR_MECHANISM_INVALID),
        }
    }

    fn unwrap(&self, m: &Mechanism, key: Key, wrapped: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        match params_of(m)? {
            AesMechanism::KeyWrap { pad } => Ok(Zeroizing::new(
                wrap::unwrap(key.secret()?, wrapped, *pad).ok_or(Error(CKR_WRAPPED_KEY_INVALID))?,
            )),
            AesMechanism::Mode(mode @ AesMode::CbcPad { .. }) => {
                if wrapped.is_empty() || !wrapped.len().is_multiple_of(16) {
                    return fail(CKR_WRAPPED_KEY_LEN_RANGE);
                }
                // Bad padding is one more malformed blob: the same code as a bad key.
                AesCrypt::new(mode.clone(), key.secret()?, false)?
                    .single(wrapped)
                    .map_err(|_| Error(CKR_WRAPPED_KEY_INVALID))
            }
            _ => fail(CKR_MECHANISM_INVALID),
        }
    }

    fn unwrap_reveals_nothing(&self, m: &Mechanism) -> bool {
        // RFC 3394 and 5649 check the blob's integrity value; CBC-PAD's padding is an oracle.
        matches!(params_of(m), Ok(AesMechanism::KeyWrap { .. }))
    }

    fn derive(&self, m: &Mechanism, key: Key) -> Result<Derived> {
        let AesMechanism::EncryptData { iv, data } = params_of(m)? else {
            return fail(CKR_MECHANISM_INVALID);
        };
        if data.is_empty() || !data.len().is_multiple_of(16) {
            return fail_because(
                CKR_MECHANISM_PARAM_INVALID,
                format!(
                    "mechanism 0x{:x}: the data is {} bytes; it must be a non-empty multiple of 16 (no padding is added)",
                    m.mechanism_type(),
                    data.len()
                ),
            );
        }
        let mode = match iv {
            Some(iv) => AesMode::Cbc { iv: *iv },
            None => AesMode::Ecb,
        };
        Ok(Derived {
            secret: AesCrypt::new(mode, key.secret()?, true)?.single(data)?,
            len_from_param: true,
        })
    }

    fn generates(&self, m: &Mechanism) -> Option<Generates> {
        match m.params()? {
            AesMechanism::KeyGen => Some(Generates::SecretKey(CKK_AES)),
            AesMechanism::GenericSecretKeyGen => Some(Generates::SecretKey(CKK_GENERIC_SECRET)),
            _ => None,
        }
    }

    fn secret_key_types(&self) -> &'static [SecretKeyType] {
        &SECRET_KEY_TYPES
    }
}

/// An AES mode as a running operation of the token.
struct AesCrypter(AesCrypt);

impl Crypter for AesCrypter {
    fn is_multipart(&self) -> bool {
        self.0.is_multipart()
    }

    fn single_len(&self, n: usize) -> Result<usize> {
        self.0.single_len(n)
    }

    fn single(&self, data: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        self.0.single(data)
    }

    fn update_len(&self, n: usize) -> Result<usize> {
        Ok(self.0.update_len(n))
    }

    fn update(&mut self, data: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        let (out, next) = self.0.try_update(data)?;
        self.0 = next;
        Ok(out)
    }

    fn final_len(&self) -> Result<usize> {
        Ok(self.0.final_len())
    }

    fn finish(&self) -> Result<Zeroizing<Vec<u8>>> {
        self.0.try_finish()
    }
}

/// The AES mode of an encryption mechanism, its parameter checked.
fn mode(t: CK_MECHANISM_TYPE, param: Param<'_>) -> Result<AesMode> {
    let what = |detail: &str| -> Result<AesMode> {
        fail_because(
            CKR_MECHANISM_PARAM_INVALID,
            format!("mechanism 0x{t:x}: {detail}"),
        )
    };
    match (t, param) {
        (CKM_AES_ECB, Param::Length(0)) => Ok(AesMode::Ecb),
        (CKM_AES_ECB, _) => what("takes no parameter"),
        (CKM_AES_CBC, Param::Iv(iv)) => Ok(AesMode::Cbc { iv }),
        (CKM_AES_CBC_PAD, Param::Iv(iv)) => Ok(AesMode::CbcPad { iv }),
        (CKM_AES_CBC | CKM_AES_CBC_PAD, _) => what("needs a 16-byte IV"),
        (CKM_AES_CTR, Param::AesCtr { counter_bits, cb }) => Ok(AesMode::Ctr {
            counter_bits: counter_bits as usize,
            block: cb,
        }),
        (CKM_AES_CTR, _) => what("needs CK_AES_CTR_PARAMS"),
        (_, Param::Gcm { iv, aad, tag_bits }) => {
            let (iv, aad) = (iv.read()?, aad.read()?);
            // The tag length is checked with the other parameters in `AesCrypt::new`.
            let tag_bits = usize::try_from(tag_bits).unwrap_or(usize::MAX);
            Ok(AesMode::Gcm { iv, aad, tag_bits })
        }
        _ => what("needs CK_GCM_PARAMS"),
    }
}
