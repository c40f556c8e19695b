//! Input byte slices from the caller's pointers, the one primitive the other conversions
//! (`convert`, `array`, `param`) build on.

use crate::error::{fail_because, Result};
use cryptoki_sys::*;

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
