//! Input from the caller's pointers, the primitives the other conversions (`convert`, `array`,
//! `param`) build on: byte slices, and the copies the module keeps of the caller's arrays and
//! values. This file owns the rule on counts and lengths: one from the caller never becomes an
//! allocation larger than the module could hold (`MAX_ATTRIBUTES`, `MAX_VALUE_LEN`), and every
//! copy reserves its memory fallibly. A `ulCount` of 2^32 with a one-entry template was a
//! 96 GiB allocation, whose failure aborts the whole host process; it is now
//! `CKR_ARGUMENTS_BAD`, and an allocation the host cannot make `CKR_HOST_MEMORY`.

use crate::error::{fail_because, Error, Result};
use cryptoki_sys::*;

/// Most entries a template, or an attribute array inside one (`CKA_WRAP_TEMPLATE`, ...), may
/// have. PKCS#11 defines a few hundred attribute types and an object holds one value of each,
/// so no real template comes near; the limit is checked before the caller's array is read, so
/// a count no array has is refused rather than read past its end or allocated for. 65,536
/// entries are 1.5 MiB of `CK_ATTRIBUTE`s.
pub const MAX_ATTRIBUTES: CK_ULONG = 1 << 16;

/// Most bytes of one value the module copies in: an attribute's value, a mechanism
/// parameter's IV, label, context or data. A token object is one row of the store, and
/// neither SQLite (`SQLITE_MAX_LENGTH`, 10^9 bytes) nor PostgreSQL (1 GiB a field) holds a
/// larger one.
pub const MAX_VALUE_LEN: CK_ULONG = 1_000_000_000;

/// `len` bytes at `p`; NULL is accepted only for an empty input. The slice is the caller's
/// memory, not a copy: inputs of any length the address space allows are read in place.
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

/// A copy of the `len` bytes at `p` that the module keeps: at most `MAX_VALUE_LEN`
/// (`CKR_ARGUMENTS_BAD`, before anything is read). `required` refuses NULL even with a zero
/// length, as `required_bytes` does.
///
/// # Safety
/// As `bytes`.
pub unsafe fn copied(p: *const u8, len: CK_ULONG, required: bool) -> Result<Vec<u8>> {
    if len > MAX_VALUE_LEN {
        return fail_because(
            CKR_ARGUMENTS_BAD,
            format!("a value of {len} bytes: the module holds values of {MAX_VALUE_LEN} bytes at most"),
        );
    }
    // SAFETY: the caller's contract is ours.
    let b = unsafe {
        if required {
            required_bytes(p, len)
        } else {
            bytes(p, len)
        }
    }?;
    let mut v = reserve(b.len())?;
    v.extend_from_slice(b);
    Ok(v)
}

/// A copy of the `n` `CK_ATTRIBUTE`s at `p` (a template, or an attribute array's entries),
/// each read unaligned as C callers pack and cast freely: at most `MAX_ATTRIBUTES`
/// (`CKR_ARGUMENTS_BAD`, before anything is read); NULL only with none.
///
/// # Safety
/// `p` is NULL or valid for reading `n` `CK_ATTRIBUTE`s.
pub unsafe fn attributes(p: *const CK_ATTRIBUTE, n: CK_ULONG) -> Result<Vec<CK_ATTRIBUTE>> {
    if p.is_null() {
        return if n == 0 {
            Ok(Vec::new())
        } else {
            fail_because(CKR_ARGUMENTS_BAD, format!("NULL template of {n} attributes"))
        };
    }
    if n > MAX_ATTRIBUTES {
        return fail_because(
            CKR_ARGUMENTS_BAD,
            format!("a template of {n} attributes: the module reads {MAX_ATTRIBUTES} at most"),
        );
    }
    let mut v = reserve(n as usize)?;
    // SAFETY: `p` is valid for `n` elements (the caller's contract); `add` stays inside them.
    v.extend((0..n as usize).map(|i| unsafe { std::ptr::read_unaligned(p.add(i)) }));
    Ok(v)
}

/// The entries a caller's output array of `n` `T`s can take: no array holds more than
/// `isize::MAX` bytes, so a larger `n` (`CK_ULONG`'s largest, from a caller that means "all
/// there are") counts as that many, which leaves the token room to add to it.
pub fn output_capacity<T>(n: CK_ULONG) -> usize {
    let most = isize::MAX as usize / std::mem::size_of::<T>().max(1);
    usize::try_from(n).unwrap_or(usize::MAX).min(most)
}

/// An empty vector with room for `n` elements, or `CKR_HOST_MEMORY` when the host has none:
/// an allocation that fails never aborts the application's process.
fn reserve<T>(n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        log::warn!("CKR_HOST_MEMORY: no memory for {n} elements of a caller's input");
        Error(CKR_HOST_MEMORY)
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts and lengths are refused before the pointer is read: the one-byte and
    /// one-entry inputs below would be read far past their end otherwise.
    #[test]
    fn counts_and_lengths_beyond_the_limits_are_refused_before_reading() {
        let one = [0u8; 1];
        let entry = [CK_ATTRIBUTE::default()];
        for len in [MAX_VALUE_LEN + 1, 1 << 32, CK_ULONG::MAX] {
            // SAFETY: refused before `one` is read past its length.
            let r = unsafe { copied(one.as_ptr(), len, false) };
            assert_eq!(r.unwrap_err(), Error(CKR_ARGUMENTS_BAD), "{len} bytes");
        }
        let per = std::mem::size_of::<CK_ATTRIBUTE>() as CK_ULONG;
        for n in [
            MAX_ATTRIBUTES + 1,
            1 << 31,
            1 << 32,
            CK_ULONG::MAX / per,
            CK_ULONG::MAX,
        ] {
            // SAFETY: refused before `entry` is read past its one element.
            let r = unsafe { attributes(entry.as_ptr(), n) };
            assert_eq!(r.unwrap_err(), Error(CKR_ARGUMENTS_BAD), "{n} attributes");
        }
        // SAFETY: the arrays hold what is claimed.
        unsafe {
            assert_eq!(copied(one.as_ptr(), 1, false).unwrap(), vec![0]);
            assert_eq!(attributes(entry.as_ptr(), 1).unwrap().len(), 1);
            assert_eq!(copied(std::ptr::null(), 0, false).unwrap(), Vec::<u8>::new());
            assert_eq!(
                copied(std::ptr::null(), 0, true).unwrap_err(),
                Error(CKR_ARGUMENTS_BAD)
            );
        }
    }

    #[test]
    fn an_allocation_the_host_cannot_make_is_host_memory() {
        assert_eq!(
            reserve::<u64>(usize::MAX / 2).unwrap_err(),
            Error(CKR_HOST_MEMORY)
        );
    }
}
