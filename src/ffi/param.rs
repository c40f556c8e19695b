//! Mechanism parameters read from C: the `CK_MECHANISM`'s parameter copied out as the C
//! structure its family names (`ParamShape`), into plain Rust values (`Param`). Pointers inside
//! a structure become `Pointed`s, followed only when the family asks. Nothing here knows what a
//! mechanism means; the families check the values.

use super::slice::copied;
use crate::error::{fail_because, Result};
use crate::mechanism::{Param, ParamShape, Pointed};
use cryptoki_sys::*;
use std::ptr;

/// `CK_GCM_PARAMS` of PKCS#11 2.40 as many headers and applications still have it (without
/// `ulIvBits`), told apart from the 3.0 struct by its size.
#[repr(C)]
#[derive(Clone, Copy)]
struct GcmParams240 {
    p_iv: *mut CK_BYTE,
    ul_iv_len: CK_ULONG,
    p_aad: *mut CK_BYTE,
    ul_aad_len: CK_ULONG,
    ul_tag_bits: CK_ULONG,
}

/// The parameter of `m` as a `T`, copied out (the caller's struct may be unaligned); `None`
/// when there is none.
///
/// # Safety
/// `m.pParameter` is NULL or valid for reading `m.ulParameterLen` bytes.
unsafe fn param<T: Copy>(m: &CK_MECHANISM) -> Result<Option<T>> {
    if m.pParameter.is_null() || m.ulParameterLen == 0 {
        return Ok(None);
    }
    if m.ulParameterLen as usize != std::mem::size_of::<T>() {
        return fail_because(
            CKR_MECHANISM_PARAM_INVALID,
            format!(
                "mechanism 0x{:x}: parameter is {} bytes, expected {}",
                m.mechanism,
                m.ulParameterLen,
                std::mem::size_of::<T>()
            ),
        );
    }
    // SAFETY: `size_of::<T>()` readable bytes (checked length, the caller's contract); T is a
    // plain C struct of integers and pointers, valid for any bytes.
    Ok(Some(unsafe { ptr::read_unaligned(m.pParameter as *const T) }))
}

/// The `len` bytes at `p`, copied within `slice`'s limits when the family asks.
///
/// # Safety
/// `p` is NULL or valid for reading `len` bytes for as long as the `Pointed` lives: the
/// duration of the C call whose argument it is, as every `Param` is used and dropped inside
/// `convert::mechanism`.
unsafe fn pointed<'a>(p: *const u8, len: CK_ULONG) -> Pointed<'a> {
    Pointed::new(len, move |required| {
        // SAFETY: this function's contract.
        unsafe { copied(p, len, required) }
    })
}

/// `m`'s parameter read as `shape`.
///
/// # Safety
/// `m.pParameter` is NULL or valid for `m.ulParameterLen` bytes, and every pointer in the
/// structure is NULL or valid for its length, for the duration of the C call.
pub unsafe fn read<'a>(m: &CK_MECHANISM, shape: ParamShape) -> Result<Param<'a>> {
    // SAFETY (every block below): the caller's contract covers the parameter and the memory
    // its pointers name.
    unsafe {
        Ok(match shape {
            ParamShape::Length => Param::Length(m.ulParameterLen as usize),
            ParamShape::Iv => param::<[u8; 16]>(m)?.map_or(Param::Absent, Param::Iv),
            ParamShape::Ulong => param::<CK_MAC_GENERAL_PARAMS>(m)?.map_or(Param::Absent, Param::Ulong),
            ParamShape::RsaPkcsPss => match param::<CK_RSA_PKCS_PSS_PARAMS>(m)? {
                Some(p) => Param::RsaPkcsPss {
                    hash_alg: p.hashAlg,
                    mgf: p.mgf,
                    s_len: p.sLen,
                },
                None => Param::Absent,
            },
            ParamShape::RsaPkcsOaep => match param::<CK_RSA_PKCS_OAEP_PARAMS>(m)? {
                Some(p) => Param::RsaPkcsOaep {
                    hash_alg: p.hashAlg,
                    mgf: p.mgf,
                    source: p.source,
                    source_data: pointed(p.pSourceData as *const u8, p.ulSourceDataLen),
                },
                None => Param::Absent,
            },
            ParamShape::AesCtr => match param::<CK_AES_CTR_PARAMS>(m)? {
                Some(p) => Param::AesCtr {
                    counter_bits: p.ulCounterBits,
                    cb: p.cb,
                },
                None => Param::Absent,
            },
            ParamShape::Gcm => {
                let p = if m.ulParameterLen as usize == std::mem::size_of::<GcmParams240>() {
                    param::<GcmParams240>(m)?
                        .map(|p| (p.p_iv, p.ul_iv_len, p.p_aad, p.ul_aad_len, p.ul_tag_bits))
                } else {
                    param::<CK_GCM_PARAMS>(m)?.map(|p| (p.pIv, p.ulIvLen, p.pAAD, p.ulAADLen, p.ulTagBits))
                };
                match p {
                    Some((iv, iv_len, aad, aad_len, tag_bits)) => Param::Gcm {
                        iv: pointed(iv, iv_len),
                        aad: pointed(aad, aad_len),
                        tag_bits,
                    },
                    None => Param::Absent,
                }
            }
            ParamShape::Ecdh1Derive => match param::<CK_ECDH1_DERIVE_PARAMS>(m)? {
                Some(p) => Param::Ecdh1Derive {
                    kdf: p.kdf,
                    shared_data_len: p.ulSharedDataLen,
                    public_data: pointed(p.pPublicData as *const u8, p.ulPublicDataLen),
                },
                None => Param::Absent,
            },
            ParamShape::Eddsa => match param::<CK_EDDSA_PARAMS>(m)? {
                Some(p) => Param::Eddsa {
                    ph_flag: p.phFlag != 0,
                    context: pointed(p.pContextData, p.ulContextDataLen),
                },
                None => Param::Absent,
            },
            ParamShape::KeyDerivationStringData => match param::<CK_KEY_DERIVATION_STRING_DATA>(m)? {
                Some(p) => Param::KeyDerivationStringData {
                    data: pointed(p.pData as *const u8, p.ulLen),
                },
                None => Param::Absent,
            },
            ParamShape::AesCbcEncryptData => match param::<CK_AES_CBC_ENCRYPT_DATA_PARAMS>(m)? {
                Some(p) => Param::AesCbcEncryptData {
                    iv: p.iv,
                    data: pointed(p.pData as *const u8, p.length),
                },
                None => Param::Absent,
            },
            ParamShape::SignAdditionalContext => match param::<CK_SIGN_ADDITIONAL_CONTEXT>(m)? {
                Some(p) => Param::SignAdditionalContext {
                    hedge: p.hedgeVariant,
                    context: pointed(p.pContext, p.ulContextLen),
                },
                None => Param::Absent,
            },
            ParamShape::HashSignAdditionalContext => match param::<CK_HASH_SIGN_ADDITIONAL_CONTEXT>(m)? {
                Some(p) => Param::HashSignAdditionalContext {
                    hedge: p.hedgeVariant,
                    context: pointed(p.pContext, p.ulContextLen),
                    hash: p.hash,
                },
                None => Param::Absent,
            },
        })
    }
}
