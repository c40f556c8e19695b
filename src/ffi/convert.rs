//! Pointer conversions, done once at the boundary: input slices, output values, templates,
//! mechanisms with their parameters, and the two-call output convention.

use crate::error::{fail, fail_because, Error, Result};
use crate::mechanism::{self, AesMode, HashAlg, Mechanism, OaepParams, PssParams};
use crate::token::attributes::Template;
use crate::token::Output;
use cryptoki_sys::*;
use std::ptr;

// Every `unsafe fn` here has one contract, the one PKCS#11 gives the caller: a pointer is NULL
// or points to live memory of the type and length the specification pairs it with. Structures
// are copied out with `read_unaligned` (C callers pack and cast freely); byte slices have no
// alignment to keep.

/// `len` bytes at `p`; NULL is accepted only for an empty input.
///
/// # Safety
/// `p` is NULL or valid for reading `len` bytes for the lifetime `'a`.
pub unsafe fn bytes<'a>(p: *const u8, len: CK_ULONG) -> Result<&'a [u8]> {
    if p.is_null() {
        return if len == 0 {
            Ok(&[])
        } else {
            fail_because(CKR_ARGUMENTS_BAD, format!("NULL input of {len} bytes"))
        };
    }
    if len > isize::MAX as CK_ULONG {
        return fail_because(CKR_ARGUMENTS_BAD, format!("input length {len} is impossible"));
    }
    // SAFETY: non-NULL, length below isize::MAX; the caller vouches for the memory.
    Ok(unsafe { std::slice::from_raw_parts(p, len as usize) })
}

/// Like `bytes`, for an input the function cannot do without (a signature to verify): NULL is
/// refused even with a zero length.
///
/// # Safety
/// As `bytes`.
pub unsafe fn required_bytes<'a>(p: *const u8, len: CK_ULONG) -> Result<&'a [u8]> {
    if p.is_null() {
        return fail_because(CKR_ARGUMENTS_BAD, "a required input is NULL");
    }
    // SAFETY: the caller's contract is ours.
    unsafe { bytes(p, len) }
}

/// A required output location.
///
/// # Safety
/// `p` is NULL or valid and aligned for writing a `T` for the lifetime `'a`.
pub unsafe fn out<'a, T>(p: *mut T) -> Result<&'a mut T> {
    // SAFETY: the caller's contract: NULL or a valid, aligned `T`.
    unsafe { p.as_mut() }.ok_or_else(|| {
        log::info!("CKR_ARGUMENTS_BAD: a required output pointer is NULL");
        Error(CKR_ARGUMENTS_BAD)
    })
}

/// The caller's buffer capacity: `None` for a length query (NULL buffer).
///
/// # Safety
/// `len` is NULL or a valid `CK_ULONG`.
pub unsafe fn capacity(buf: *const u8, len: *mut CK_ULONG) -> Result<Option<usize>> {
    // SAFETY: the caller's contract.
    let len = unsafe { out(len) }?;
    Ok(if buf.is_null() { None } else { Some(*len as usize) })
}

/// Writes an `Output` per the two-call convention: a length alone, or the data; a length
/// answered to a non-NULL buffer means it was too small. The capacity is checked here again,
/// whatever the token decided: data longer than `*len` is never written, the caller gets
/// `CKR_BUFFER_TOO_SMALL` and the needed length. (The token answers `Output::Length` in that
/// case and keeps the operation, as BUFFER_TOO_SMALL does not end one; reaching the check
/// here would be a token bug, hence the error line.)
///
/// # Safety
/// `len` is NULL or a valid `CK_ULONG`; `buf` is NULL or valid for writing `*len` bytes.
pub unsafe fn write_output(buf: *mut u8, len: *mut CK_ULONG, o: Output) -> Result<()> {
    // SAFETY: the caller's contract.
    let len = unsafe { out(len) }?;
    match o {
        Output::Length(n) => {
            *len = n as CK_ULONG;
            if buf.is_null() {
                Ok(())
            } else {
                fail(CKR_BUFFER_TOO_SMALL)
            }
        }
        Output::Data(d) => {
            if buf.is_null() || (*len as u64) < d.len() as u64 {
                log::error!(
                    "output of {} bytes answered to a buffer of {}; not written",
                    d.len(),
                    if buf.is_null() { 0 } else { *len }
                );
                *len = d.len() as CK_ULONG;
                return if buf.is_null() {
                    Ok(())
                } else {
                    fail(CKR_BUFFER_TOO_SMALL)
                };
            }
            // SAFETY: `buf` holds `*len` >= `d.len()` bytes (the caller's contract, checked
            // length); `d` is our own allocation, so they do not overlap.
            unsafe { ptr::copy_nonoverlapping(d.as_ptr(), buf, d.len()) };
            *len = d.len() as CK_ULONG;
            Ok(())
        }
    }
}

/// The caller's attribute array, copied element by element (it may be unaligned).
///
/// # Safety
/// `p` is NULL or valid for reading `n` `CK_ATTRIBUTE`s.
unsafe fn attribute_list(p: *const CK_ATTRIBUTE, n: CK_ULONG) -> Result<Vec<CK_ATTRIBUTE>> {
    if p.is_null() {
        return if n == 0 {
            Ok(vec![])
        } else {
            fail_because(CKR_ARGUMENTS_BAD, format!("NULL template of {n} attributes"))
        };
    }
    if n > (isize::MAX as usize / std::mem::size_of::<CK_ATTRIBUTE>()) as CK_ULONG {
        return fail_because(CKR_ARGUMENTS_BAD, format!("template of {n} attributes"));
    }
    // SAFETY: `p` is valid for `n` elements (the caller's contract); `add` stays inside them.
    Ok((0..n as usize)
        .map(|i| unsafe { ptr::read_unaligned(p.add(i)) })
        .collect())
}

/// A template as (type, value) pairs in the caller's order.
///
/// # Safety
/// `p` is NULL or valid for reading `n` `CK_ATTRIBUTE`s, each value NULL or valid for its
/// length.
pub unsafe fn template_pairs(
    p: *const CK_ATTRIBUTE,
    n: CK_ULONG,
) -> Result<Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>> {
    // SAFETY: the caller's contract.
    unsafe { attribute_list(p, n) }?
        .iter()
        .map(|a| {
            if a.pValue.is_null() && a.ulValueLen != 0 {
                return fail_because(
                    CKR_ARGUMENTS_BAD,
                    format!("attribute 0x{:x} has a NULL value", a.type_),
                );
            }
            if super::array::is_array(a.type_) {
                // SAFETY: an array attribute's value is valid for its length (the caller's
                // contract), entries and their values included.
                let nested = unsafe { super::array::read(a.type_, a.pValue as *const u8, a.ulValueLen) }?;
                return Ok((a.type_, nested));
            }
            // SAFETY: each value is valid for its length (the caller's contract).
            Ok((
                a.type_,
                unsafe { bytes(a.pValue as *const u8, a.ulValueLen) }?.to_vec(),
            ))
        })
        .collect()
}

/// A template for creating or changing objects, every value checked against its
/// attribute's shape (`Template::parse`).
///
/// # Safety
/// As `template_pairs`.
pub unsafe fn template(p: *const CK_ATTRIBUTE, n: CK_ULONG) -> Result<Template> {
    // SAFETY: the caller's contract.
    Template::parse(unsafe { template_pairs(p, n) }?)
}

/// The caller's attribute array for `C_GetAttributeValue`: the entries read, and a way to
/// write each one's answer back where it came from.
pub struct AttributeAnswers {
    base: *mut CK_ATTRIBUTE,
    pub entries: Vec<CK_ATTRIBUTE>,
}

impl AttributeAnswers {
    /// # Safety
    /// `p` is NULL or valid for reading and writing `n` `CK_ATTRIBUTE`s.
    pub unsafe fn read(p: *mut CK_ATTRIBUTE, n: CK_ULONG) -> Result<Self> {
        Ok(AttributeAnswers {
            base: p,
            // SAFETY: the caller's contract.
            entries: unsafe { attribute_list(p, n) }?,
        })
    }

    /// Answers entry `i` with its length and, when `value` is given, copies it into the
    /// caller's buffer, which must have been checked to hold it.
    ///
    /// # Safety
    /// `read`'s contract, and the entry's `pValue` is valid for its `ulValueLen` bytes.
    pub unsafe fn answer(&mut self, i: usize, len: CK_ULONG, value: Option<&[u8]>) {
        let e = &mut self.entries[i];
        if let Some(v) = value {
            assert!(v.len() as CK_ULONG <= e.ulValueLen && !e.pValue.is_null());
            // SAFETY: the caller's buffer holds `ulValueLen` >= `v.len()` bytes (asserted).
            unsafe { ptr::copy_nonoverlapping(v.as_ptr(), e.pValue as *mut u8, v.len()) };
        }
        e.ulValueLen = len;
        // SAFETY: entry `i` of the caller's array (in range: `entries` has its length).
        unsafe { ptr::write_unaligned(self.base.add(i), *e) };
    }
}

/// The parameter of `m` as a `T`, copied out (the caller's struct may be unaligned).
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

fn param_hash(h: CK_MECHANISM_TYPE) -> Result<HashAlg> {
    HashAlg::from_digest_mechanism(h)
        .filter(|h| *h != HashAlg::Md5)
        .ok_or_else(|| {
            log::info!("CKR_MECHANISM_PARAM_INVALID: hash 0x{h:x} is not supported here");
            Error(CKR_MECHANISM_PARAM_INVALID)
        })
}

fn param_mgf(m: CK_RSA_PKCS_MGF_TYPE) -> Result<HashAlg> {
    HashAlg::from_mgf(m).ok_or_else(|| {
        log::info!("CKR_MECHANISM_PARAM_INVALID: MGF 0x{m:x} is not supported");
        Error(CKR_MECHANISM_PARAM_INVALID)
    })
}

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

/// The AES mode of an encryption mechanism, its parameter checked.
///
/// # Safety
/// `m.pParameter` is NULL or valid for `m.ulParameterLen` bytes, and the IV and AAD of a GCM
/// parameter are NULL or valid for their lengths.
unsafe fn aes_mode(m: &CK_MECHANISM) -> Result<AesMode> {
    let what = |detail: &str| -> Result<AesMode> {
        fail_because(
            CKR_MECHANISM_PARAM_INVALID,
            format!("mechanism 0x{:x}: {detail}", m.mechanism),
        )
    };
    match m.mechanism {
        CKM_AES_ECB if m.ulParameterLen == 0 => Ok(AesMode::Ecb),
        CKM_AES_ECB => what("takes no parameter"),
        CKM_AES_CBC | CKM_AES_CBC_PAD => {
            // SAFETY: the caller's contract covers the parameter.
            let Some(iv) = (unsafe { param::<[u8; 16]>(m) })? else {
                return what("needs a 16-byte IV");
            };
            Ok(if m.mechanism == CKM_AES_CBC {
                AesMode::Cbc { iv }
            } else {
                AesMode::CbcPad { iv }
            })
        }
        CKM_AES_CTR => {
            // SAFETY: the caller's contract covers the parameter.
            let Some(p) = (unsafe { param::<CK_AES_CTR_PARAMS>(m) })? else {
                return what("needs CK_AES_CTR_PARAMS");
            };
            Ok(AesMode::Ctr {
                counter_bits: p.ulCounterBits as usize,
                block: p.cb,
            })
        }
        _ => {
            let (iv, iv_len, aad, aad_len, tag_bits) =
                if m.ulParameterLen as usize == std::mem::size_of::<GcmParams240>() {
                    // SAFETY: the caller's contract covers the parameter.
                    let p = unsafe { param::<GcmParams240>(m) }?.expect("non-empty");
                    (p.p_iv, p.ul_iv_len, p.p_aad, p.ul_aad_len, p.ul_tag_bits)
                } else {
                    // SAFETY: the caller's contract covers the parameter.
                    let Some(p) = (unsafe { param::<CK_GCM_PARAMS>(m) })? else {
                        return what("needs CK_GCM_PARAMS");
                    };
                    (p.pIv, p.ulIvLen, p.pAAD, p.ulAADLen, p.ulTagBits)
                };
            // SAFETY: the caller's contract covers the IV and AAD it names.
            let (iv, aad) = unsafe { (bytes(iv, iv_len)?.to_vec(), bytes(aad, aad_len)?.to_vec()) };
            // The tag length is checked with the other parameters in `AesCrypt::new`.
            let tag_bits = usize::try_from(tag_bits).unwrap_or(usize::MAX);
            Ok(AesMode::Gcm { iv, aad, tag_bits })
        }
    }
}

/// Decodes and checks a mechanism and its parameters.
///
/// # Safety
/// `p` is NULL or a readable `CK_MECHANISM` whose parameter is NULL or valid for its length;
/// an OAEP label (`pSourceData`) likewise.
pub unsafe fn mechanism(p: *const CK_MECHANISM) -> Result<Mechanism> {
    if p.is_null() {
        return fail_because(CKR_ARGUMENTS_BAD, "the mechanism is NULL");
    }
    // SAFETY: non-NULL, readable (the caller's contract); copied as it may be unaligned.
    let m = unsafe { ptr::read_unaligned(p) };
    let m = &m;
    if m.pParameter.is_null() && m.ulParameterLen != 0 {
        return fail_because(CKR_ARGUMENTS_BAD, "the mechanism parameter is NULL");
    }
    let t = m.mechanism;
    Ok(match t {
        CKM_RSA_PKCS_KEY_PAIR_GEN => Mechanism::RsaPkcsKeyPairGen,
        CKM_RSA_PKCS => Mechanism::RsaPkcs,
        CKM_RSA_X_509 => Mechanism::RsaX509,
        CKM_AES_KEY_GEN => Mechanism::AesKeyGen,
        CKM_EC_KEY_PAIR_GEN => Mechanism::EcKeyPairGen,
        CKM_EC_EDWARDS_KEY_PAIR_GEN => Mechanism::EcEdwardsKeyPairGen,
        CKM_ECDSA => Mechanism::Ecdsa(None),
        CKM_ECDH1_DERIVE => {
            // SAFETY: the caller's contract covers the parameter.
            let Some(p) = (unsafe { param::<CK_ECDH1_DERIVE_PARAMS>(m) })? else {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    "CKM_ECDH1_DERIVE needs CK_ECDH1_DERIVE_PARAMS",
                );
            };
            if p.kdf != CKD_NULL || p.ulSharedDataLen != 0 {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    "CKM_ECDH1_DERIVE: only CKD_NULL without shared data is supported",
                );
            }
            // SAFETY: the caller's contract covers the public data it names.
            let public_data =
                unsafe { required_bytes(p.pPublicData as *const u8, p.ulPublicDataLen) }?.to_vec();
            Mechanism::Ecdh1Derive { public_data }
        }
        CKM_AES_ECB_ENCRYPT_DATA => {
            // SAFETY: the caller's contract covers the parameter.
            let Some(p) = (unsafe { param::<CK_KEY_DERIVATION_STRING_DATA>(m) })? else {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    "CKM_AES_ECB_ENCRYPT_DATA needs CK_KEY_DERIVATION_STRING_DATA",
                );
            };
            // SAFETY: the caller's contract covers the data it names.
            let data = unsafe { required_bytes(p.pData as *const u8, p.ulLen) }?.to_vec();
            Mechanism::AesEncryptData { iv: None, data }
        }
        CKM_AES_CBC_ENCRYPT_DATA => {
            // SAFETY: the caller's contract covers the parameter.
            let Some(p) = (unsafe { param::<CK_AES_CBC_ENCRYPT_DATA_PARAMS>(m) })? else {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    "CKM_AES_CBC_ENCRYPT_DATA needs CK_AES_CBC_ENCRYPT_DATA_PARAMS",
                );
            };
            // SAFETY: the caller's contract covers the data it names.
            let data = unsafe { required_bytes(p.pData as *const u8, p.length) }?.to_vec();
            Mechanism::AesEncryptData { iv: Some(p.iv), data }
        }
        CKM_EDDSA => {
            // SAFETY: the caller's contract covers the parameter.
            let context = match unsafe { param::<CK_EDDSA_PARAMS>(m) }? {
                Some(p) => {
                    mechanism::eddsa::check_params(p.phFlag != 0, p.ulContextDataLen as usize)?;
                    // SAFETY: the caller's contract covers the context it names.
                    unsafe { bytes(p.pContextData, p.ulContextDataLen) }?.to_vec()
                }
                None => Vec::new(),
            };
            Mechanism::EdDsa { context }
        }
        CKM_GENERIC_SECRET_KEY_GEN => Mechanism::GenericSecretKeyGen,
        CKM_AES_KEY_WRAP | CKM_AES_KEY_WRAP_PAD => {
            if m.ulParameterLen != 0 {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    "only the default AES key wrap IV is supported",
                );
            }
            if t == CKM_AES_KEY_WRAP {
                Mechanism::AesKeyWrap
            } else {
                Mechanism::AesKeyWrapPad
            }
        }
        CKM_AES_ECB | CKM_AES_CBC | CKM_AES_CBC_PAD | CKM_AES_CTR | CKM_AES_GCM => {
            // SAFETY: the caller's contract covers the parameter and the buffers it names.
            Mechanism::Aes(unsafe { aes_mode(m) }?)
        }
        CKM_RSA_PKCS_OAEP => {
            // SAFETY: the caller's contract covers the parameter.
            let Some(p) = (unsafe { param::<CK_RSA_PKCS_OAEP_PARAMS>(m) })? else {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    "CKM_RSA_PKCS_OAEP needs CK_RSA_PKCS_OAEP_PARAMS",
                );
            };
            let label = match p.source {
                CKZ_DATA_SPECIFIED => {
                    // SAFETY: the caller's contract covers the label it names.
                    unsafe { bytes(p.pSourceData as *const u8, p.ulSourceDataLen) }?.to_vec()
                }
                0 if p.ulSourceDataLen == 0 => vec![],
                _ => {
                    return fail_because(
                        CKR_MECHANISM_PARAM_INVALID,
                        "OAEP source must be CKZ_DATA_SPECIFIED",
                    )
                }
            };
            Mechanism::RsaOaep(OaepParams {
                hash: param_hash(p.hashAlg)?,
                mgf: param_mgf(p.mgf)?,
                label,
            })
        }
        _ => {
            if let Some((alg, general)) = mechanism::mac::mac_mechanism(t) {
                // The full-length MACs take no parameter (one given is ignored, as for the
                // hash-and-sign RSA mechanisms); `_GENERAL` needs its length.
                let len = if general {
                    // SAFETY: the caller's contract covers the parameter.
                    let Some(n) = (unsafe { param::<CK_MAC_GENERAL_PARAMS>(m) })? else {
                        return fail_because(
                            CKR_MECHANISM_PARAM_INVALID,
                            format!(
                                "mechanism 0x{t:x} needs CK_MAC_GENERAL_PARAMS (the MAC length in bytes)"
                            ),
                        );
                    };
                    Some(n as usize)
                } else {
                    None
                };
                return Ok(Mechanism::Mac(mechanism::mac::MacMechanism::new(alg, len)?));
            }
            if let Some(f) = mechanism::pq::key_pair_gen(t) {
                return Ok(Mechanism::PqKeyPairGen(f.key_type()));
            }
            if let Some((f, prehash)) = mechanism::pq::sign_mechanism(t) {
                // SAFETY: the caller's contract covers the parameter.
                let params = match unsafe { param::<CK_SIGN_ADDITIONAL_CONTEXT>(m) }? {
                    Some(p) => {
                        mechanism::pq::check_params(p.hedgeVariant, p.ulContextLen)?;
                        mechanism::pq::SignParams {
                            hedge: p.hedgeVariant,
                            // SAFETY: the caller's contract covers the context it names.
                            context: unsafe { bytes(p.pContext, p.ulContextLen) }?.to_vec(),
                        }
                    }
                    None => mechanism::pq::SignParams::default(),
                };
                return Ok(Mechanism::PqSign {
                    key_type: f.key_type(),
                    prehash,
                    params,
                });
            }
            if let Some(h) = HashAlg::from_digest_mechanism(t) {
                Mechanism::Digest(h)
            } else if let Some(h) = mechanism::hash_of_ecdsa_mechanism(t) {
                Mechanism::Ecdsa(Some(h))
            } else if let Some(h) = mechanism::hash_of_pkcs_mechanism(t) {
                // Parameters are ignored: PowerDNS and others pass junk here.
                Mechanism::HashRsaPkcs(h)
            } else if t == CKM_RSA_PKCS_PSS || mechanism::hash_of_pss_mechanism(t).is_some() {
                let prehash = mechanism::hash_of_pss_mechanism(t);
                // SAFETY: the caller's contract covers the parameter.
                let params = match (unsafe { param::<CK_RSA_PKCS_PSS_PARAMS>(m) }?, prehash) {
                    (Some(p), _) => PssParams {
                        hash: param_hash(p.hashAlg)?,
                        mgf: param_mgf(p.mgf)?,
                        salt_len: p.sLen as usize,
                    },
                    (None, Some(h)) => PssParams {
                        hash: h,
                        mgf: h,
                        salt_len: h.output_len(),
                    },
                    (None, None) => {
                        return fail_because(
                            CKR_MECHANISM_PARAM_INVALID,
                            "CKM_RSA_PKCS_PSS needs CK_RSA_PKCS_PSS_PARAMS",
                        )
                    }
                };
                if prehash.is_some_and(|h| h != params.hash) {
                    return fail_because(
                        CKR_MECHANISM_PARAM_INVALID,
                        "PSS hashAlg differs from the mechanism's hash",
                    );
                }
                if params.salt_len > 1024 {
                    return fail_because(CKR_MECHANISM_PARAM_INVALID, "PSS salt length out of range");
                }
                Mechanism::RsaPss { prehash, params }
            } else {
                return fail_because(
                    CKR_MECHANISM_INVALID,
                    format!("mechanism 0x{t:x} is not supported"),
                );
            }
        }
    })
}

/// Copies `s` into a blank-padded fixed field, as PKCS#11 info structures want.
pub fn padded<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut out = [b' '; N];
    let n = s.len().min(N);
    out[..n].copy_from_slice(&s[..n]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_output_never_writes_past_the_callers_length() {
        let mut buf = [0xa5u8; 16];
        let mut len: CK_ULONG = 4;
        let data = Output::Data(zeroize::Zeroizing::new(vec![1u8; 8]));
        // SAFETY: `buf` holds 16 bytes, more than the 4 claimed.
        let rv = unsafe { write_output(buf.as_mut_ptr(), &mut len, data) };
        assert_eq!(rv, Err(Error(CKR_BUFFER_TOO_SMALL)));
        assert_eq!(len, 8, "the needed length is told");
        assert_eq!(buf, [0xa5; 16], "nothing is written");

        let mut len: CK_ULONG = 8;
        let data = Output::Data(zeroize::Zeroizing::new(vec![1u8; 8]));
        // SAFETY: as above.
        let rv = unsafe { write_output(buf.as_mut_ptr(), &mut len, data) };
        assert_eq!(rv, Ok(()));
        assert_eq!((len, &buf[..8], &buf[8..]), (8, &[1u8; 8][..], &[0xa5u8; 8][..]));
    }
}
