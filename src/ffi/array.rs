//! Attribute arrays (`CKF_ARRAY_ATTRIBUTE`: `CKA_WRAP_TEMPLATE`, `CKA_UNWRAP_TEMPLATE`,
//! `CKA_DERIVE_TEMPLATE`): their value in C is an array of `CK_ATTRIBUTE` pointing at further
//! caller memory. token/ keeps them as the `Attributes::to_bytes` encoding of the nested
//! attributes; this file converts between the two, one level deep (arrays do not nest).

use super::slice::{attributes, copied};
use crate::error::{fail_because, Result};
use crate::token::attributes::Attributes;
use cryptoki_sys::*;

const ENTRY: usize = std::mem::size_of::<CK_ATTRIBUTE>();

/// The attribute arrays the token knows. Other types with the `CKF_ARRAY_ATTRIBUTE` bit
/// (vendor-defined or unknown ones) are kept as the bytes the caller gave, never followed as
/// pointers: their layout is not ours to assume.
pub fn is_array(t: CK_ATTRIBUTE_TYPE) -> bool {
    matches!(t, CKA_WRAP_TEMPLATE | CKA_UNWRAP_TEMPLATE | CKA_DERIVE_TEMPLATE)
}

/// The nested template an array attribute's value points at, encoded for token/.
///
/// # Safety
/// `p` is NULL or points to `len` readable bytes holding `CK_ATTRIBUTE`s whose values are
/// readable for their lengths, as PKCS#11 requires of a template.
pub unsafe fn read(t: CK_ATTRIBUTE_TYPE, p: *const u8, len: CK_ULONG) -> Result<Vec<u8>> {
    let len = len as usize;
    if !len.is_multiple_of(ENTRY) || (p.is_null() && len != 0) {
        return fail_because(
            CKR_ATTRIBUTE_VALUE_INVALID,
            format!("attribute 0x{t:x} is an array of CK_ATTRIBUTE; {len} bytes is not one"),
        );
    }
    let mut nested = Attributes::new();
    // SAFETY: the caller's array holds len / ENTRY entries (checked above); `attributes` reads
    // each unaligned, as they may be inside a byte buffer, and refuses more than it holds.
    for a in unsafe { attributes(p as *const CK_ATTRIBUTE, (len / ENTRY) as CK_ULONG) }? {
        if is_array(a.type_) {
            return fail_because(
                CKR_ATTRIBUTE_VALUE_INVALID,
                format!("attribute 0x{t:x}: attribute arrays do not nest"),
            );
        }
        if a.pValue.is_null() && a.ulValueLen != 0 {
            return fail_because(
                CKR_ATTRIBUTE_VALUE_INVALID,
                format!(
                    "attribute 0x{t:x}: nested attribute 0x{:x} has a NULL value",
                    a.type_
                ),
            );
        }
        // SAFETY: PKCS#11 requires a template's values to be readable for their lengths;
        // `copied` refuses lengths beyond what the module holds before reading.
        let value = unsafe { copied(a.pValue as *const u8, a.ulValueLen, false) }?;
        nested.set(a.type_, value);
    }
    Ok(nested.to_bytes().to_vec())
}

/// Answers `C_GetAttributeValue` for an array attribute whose value token/ holds as
/// `encoded`: a NULL `pValue` gets the array's size; otherwise each of the caller's entries
/// gets a nested attribute's type and, by the same two-call rule, its value. Returns the
/// entry's `CK_RV`.
///
/// # Safety
/// `a.pValue` is NULL or points to `a.ulValueLen` writable bytes, holding `CK_ATTRIBUTE`s
/// whose non-NULL values are writable for their lengths.
pub unsafe fn write(a: &mut CK_ATTRIBUTE, encoded: &[u8]) -> CK_RV {
    let nested = Attributes::from_bytes(encoded).unwrap_or_default();
    let needed = nested.iter().count() * ENTRY;
    if a.pValue.is_null() {
        a.ulValueLen = needed as CK_ULONG;
        return CKR_OK;
    }
    if (a.ulValueLen as usize) < needed {
        a.ulValueLen = CK_UNAVAILABLE_INFORMATION;
        return CKR_BUFFER_TOO_SMALL;
    }
    let entries = a.pValue as *mut CK_ATTRIBUTE;
    let mut rv = CKR_OK;
    for (i, (t, v)) in nested.iter().enumerate() {
        // SAFETY: the caller's buffer holds at least `needed` bytes (checked above); entries
        // are read and written unaligned.
        let mut e: CK_ATTRIBUTE = unsafe { std::ptr::read_unaligned(entries.add(i)) };
        e.type_ = t;
        if e.pValue.is_null() {
            e.ulValueLen = v.len() as CK_ULONG;
        } else if (e.ulValueLen as usize) < v.len() {
            e.ulValueLen = CK_UNAVAILABLE_INFORMATION;
            rv = CKR_BUFFER_TOO_SMALL;
        } else {
            // SAFETY: the entry's buffer is writable for its ulValueLen, at least v.len().
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), e.pValue as *mut u8, v.len()) };
            e.ulValueLen = v.len() as CK_ULONG;
        }
        // SAFETY: as for the read above.
        unsafe { std::ptr::write_unaligned(entries.add(i), e) };
    }
    a.ulValueLen = needed as CK_ULONG;
    rv
}
