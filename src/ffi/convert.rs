//! Pointer conversions, done once at the boundary: input slices, output values, templates,
//! mechanisms with their parameters, and the two-call output convention.

use crate::error::{fail, fail_because, Error, Result};
use crate::mechanism::{self, HashAlg, Mechanism, OaepParams, PssParams};
use crate::token::attributes::Template;
use crate::token::Output;
use cryptoki_sys::*;

/// `len` bytes at `p`; NULL is accepted only for an empty input.
pub unsafe fn bytes<'a>(p: *const u8, len: CK_ULONG) -> Result<&'a [u8]> {
    if p.is_null() {
        return if len == 0 {
            Ok(&[])
        } else {
            fail(CKR_ARGUMENTS_BAD)
        };
    }
    Ok(std::slice::from_raw_parts(p, len as usize))
}

/// A required output location.
pub unsafe fn out<'a, T>(p: *mut T) -> Result<&'a mut T> {
    p.as_mut().ok_or(Error(CKR_ARGUMENTS_BAD))
}

/// The caller's buffer capacity: `None` for a length query (NULL buffer).
pub unsafe fn capacity(buf: *const u8, len: *mut CK_ULONG) -> Result<Option<usize>> {
    let len = out(len)?;
    Ok(if buf.is_null() { None } else { Some(*len as usize) })
}

/// Writes an `Output` per the two-call convention: a length alone, or the data; a length
/// answered to a non-NULL buffer means it was too small.
pub unsafe fn write_output(buf: *mut u8, len: *mut CK_ULONG, o: Output) -> Result<()> {
    let len = out(len)?;
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
            std::ptr::copy_nonoverlapping(d.as_ptr(), buf, d.len());
            *len = d.len() as CK_ULONG;
            Ok(())
        }
    }
}

unsafe fn attribute_list<'a>(p: *const CK_ATTRIBUTE, n: CK_ULONG) -> Result<&'a [CK_ATTRIBUTE]> {
    if p.is_null() {
        return if n == 0 { Ok(&[]) } else { fail(CKR_ARGUMENTS_BAD) };
    }
    Ok(std::slice::from_raw_parts(p, n as usize))
}

/// A template as (type, value) pairs in the caller's order.
pub unsafe fn template_pairs(
    p: *const CK_ATTRIBUTE,
    n: CK_ULONG,
) -> Result<Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>> {
    attribute_list(p, n)?
        .iter()
        .map(|a| {
            if a.pValue.is_null() && a.ulValueLen != 0 {
                return fail_because(
                    CKR_ARGUMENTS_BAD,
                    format!("attribute 0x{:x} has a NULL value", a.type_),
                );
            }
            if super::array::is_array(a.type_) {
                return Ok((
                    a.type_,
                    super::array::read(a.type_, a.pValue as *const u8, a.ulValueLen)?,
                ));
            }
            Ok((a.type_, bytes(a.pValue as *const u8, a.ulValueLen)?.to_vec()))
        })
        .collect()
}

/// A template for creating or changing objects, every value checked against its
/// attribute's shape (`Template::parse`).
pub unsafe fn template(p: *const CK_ATTRIBUTE, n: CK_ULONG) -> Result<Template> {
    Template::parse(template_pairs(p, n)?)
}

/// The caller's attribute array for `C_GetAttributeValue`, writable.
pub unsafe fn attribute_list_mut<'a>(p: *mut CK_ATTRIBUTE, n: CK_ULONG) -> Result<&'a mut [CK_ATTRIBUTE]> {
    if p.is_null() {
        return if n == 0 {
            Ok(&mut [])
        } else {
            fail(CKR_ARGUMENTS_BAD)
        };
    }
    Ok(std::slice::from_raw_parts_mut(p, n as usize))
}

unsafe fn param<'a, T>(m: &CK_MECHANISM) -> Result<Option<&'a T>> {
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
    Ok(Some(&*(m.pParameter as *const T)))
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

/// Decodes and checks a mechanism and its parameters.
pub unsafe fn mechanism(p: *const CK_MECHANISM) -> Result<Mechanism> {
    let m = p.as_ref().ok_or(Error(CKR_ARGUMENTS_BAD))?;
    if m.pParameter.is_null() && m.ulParameterLen != 0 {
        return fail(CKR_ARGUMENTS_BAD);
    }
    let t = m.mechanism;
    Ok(match t {
        CKM_RSA_PKCS_KEY_PAIR_GEN => Mechanism::RsaPkcsKeyPairGen,
        CKM_RSA_PKCS => Mechanism::RsaPkcs,
        CKM_RSA_X_509 => Mechanism::RsaX509,
        CKM_AES_KEY_GEN => Mechanism::AesKeyGen,
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
        CKM_RSA_PKCS_OAEP => {
            let Some(p) = param::<CK_RSA_PKCS_OAEP_PARAMS>(m)? else {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    "CKM_RSA_PKCS_OAEP needs CK_RSA_PKCS_OAEP_PARAMS",
                );
            };
            let label = match p.source {
                CKZ_DATA_SPECIFIED => bytes(p.pSourceData as *const u8, p.ulSourceDataLen)?.to_vec(),
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
            if let Some(h) = HashAlg::from_digest_mechanism(t) {
                Mechanism::Digest(h)
            } else if let Some(h) = mechanism::hash_of_pkcs_mechanism(t) {
                // Parameters are ignored: PowerDNS and others pass junk here.
                Mechanism::HashRsaPkcs(h)
            } else if t == CKM_RSA_PKCS_PSS || mechanism::hash_of_pss_mechanism(t).is_some() {
                let prehash = mechanism::hash_of_pss_mechanism(t);
                let params = match (param::<CK_RSA_PKCS_PSS_PARAMS>(m)?, prehash) {
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
