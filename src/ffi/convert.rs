//! Pointer conversions, done once at the boundary: output values, templates, mechanisms (their
//! parameters read by `param`, checked by their family), and the two-call output convention.
//! Input slices and the copies the module keeps of the caller's arrays and values are
//! `slice`'s, with the limits on their counts and lengths; `array` and `param` share them.

use super::slice::{attributes, copied};
pub use super::slice::{bytes, required_bytes};
use crate::error::{fail, fail_because, Error, Result};
use crate::mechanism;
use crate::service::RawMechanism;
use crate::token::attributes::Template;
use crate::token::Output;
use cryptoki_sys::*;
use std::ptr;

// Every `unsafe fn` here has one contract, the one PKCS#11 gives the caller: a pointer is NULL
// or points to live memory of the type and length the specification pairs it with. Structures
// are copied out with `read_unaligned` (C callers pack and cast freely); byte slices have no
// alignment to keep.

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

/// A template as (type, value) pairs in the caller's order, copied within `slice`'s limits.
///
/// # Safety
/// `p` is NULL or valid for reading `n` `CK_ATTRIBUTE`s, each value NULL or valid for its
/// length.
pub unsafe fn template_pairs(
    p: *const CK_ATTRIBUTE,
    n: CK_ULONG,
) -> Result<Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>> {
    // SAFETY: the caller's contract.
    unsafe { attributes(p, n) }?
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
            let value = unsafe { copied(a.pValue as *const u8, a.ulValueLen, false) }?;
            Ok((a.type_, value))
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
            entries: unsafe { attributes(p, n) }?,
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

/// Reads a mechanism: its type and, through `param::read`, its parameter in the C structure
/// the mechanism's family names; the service checks it with the family (`RawMechanism`).
///
/// # Safety
/// `p` is NULL or a readable `CK_MECHANISM` whose parameter is NULL or valid for its length,
/// and whose pointers inside (labels, IVs, contexts) are NULL or valid for their lengths.
pub unsafe fn mechanism<'a>(p: *const CK_MECHANISM) -> Result<RawMechanism<'a>> {
    if p.is_null() {
        return fail_because(CKR_ARGUMENTS_BAD, "the mechanism is NULL");
    }
    // SAFETY: non-NULL, readable (the caller's contract); copied as it may be unaligned.
    let m = unsafe { ptr::read_unaligned(p) };
    if m.pParameter.is_null() && m.ulParameterLen != 0 {
        return fail_because(CKR_ARGUMENTS_BAD, "the mechanism parameter is NULL");
    }
    let t = m.mechanism;
    let Some((family, shape)) = mechanism::find(t) else {
        return fail_because(
            CKR_MECHANISM_INVALID,
            format!("mechanism 0x{t:x} is not supported"),
        );
    };
    // SAFETY: the caller's contract covers the parameter and the memory it points at.
    let param = unsafe { super::param::read(&m, shape) }?;
    Ok(RawMechanism { ty: t, family, param })
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
