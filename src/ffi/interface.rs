//! PKCS#11 3.x interfaces: "PKCS 11" in versions 3.0 (the default), 3.2 and 2.40.

use super::convert::out;
use super::function_list::{FUNCTION_LIST_2_40, FUNCTION_LIST_3_0, FUNCTION_LIST_3_2};
use crate::error::{fail, fail_because, Error};
use cryptoki_sys::*;
use std::ffi::c_void;

static NAME: &[u8] = b"PKCS 11\0";
static VENDOR_NAME: &[u8] = b"Vendor ferrohsm\0";
const COUNT: usize = 4;

static mut INTERFACES: [CK_INTERFACE; COUNT] = [
    CK_INTERFACE {
        pInterfaceName: NAME.as_ptr() as *mut CK_UTF8CHAR,
        pFunctionList: &raw mut FUNCTION_LIST_3_0 as *mut c_void,
        flags: 0,
    },
    CK_INTERFACE {
        pInterfaceName: NAME.as_ptr() as *mut CK_UTF8CHAR,
        pFunctionList: &raw mut FUNCTION_LIST_3_2 as *mut c_void,
        flags: 0,
    },
    CK_INTERFACE {
        pInterfaceName: NAME.as_ptr() as *mut CK_UTF8CHAR,
        pFunctionList: &raw mut FUNCTION_LIST_2_40 as *mut c_void,
        flags: 0,
    },
    CK_INTERFACE {
        pInterfaceName: VENDOR_NAME.as_ptr() as *mut CK_UTF8CHAR,
        pFunctionList: &raw mut super::vendor::VENDOR_FUNCTION_LIST as *mut c_void,
        flags: 0,
    },
];

/// Entry `i` of the interface table.
fn entry(i: usize) -> &'static CK_INTERFACE {
    assert!(i < COUNT);
    // SAFETY: `i` is inside the static array; nothing in the module writes it (applications
    // get pointers into it and may, which is why it is `static mut`, but never concurrently
    // with their own reads of it through us, as with any PKCS#11 structure they own).
    unsafe { &*(&raw const INTERFACES as *const CK_INTERFACE).add(i) }
}

/// The version of interface `i`, the first field of every function list.
fn version_of(i: usize) -> CK_VERSION {
    // SAFETY: every function list starts with its CK_VERSION and lives as long as the module.
    unsafe { *(entry(i).pFunctionList as *const CK_VERSION) }
}

/// The name of interface `i` (with its NUL).
fn name_of(i: usize) -> &'static [u8] {
    // SAFETY: the names are the NUL-terminated statics above.
    unsafe { std::ffi::CStr::from_ptr(entry(i).pInterfaceName as *const std::ffi::c_char) }
        .to_bytes_with_nul()
}

ck_fn!(
    fn C_GetInterfaceList(list: *mut CK_INTERFACE, count: *mut CK_ULONG) {
        // SAFETY: the caller's count, NULL or valid per PKCS#11.
        let count = unsafe { out(count) }?;
        if list.is_null() {
            *count = COUNT as CK_ULONG;
            return Ok(());
        }
        if (*count as usize) < COUNT {
            *count = COUNT as CK_ULONG;
            return fail(CKR_BUFFER_TOO_SMALL);
        }
        let src = &raw const INTERFACES as *const CK_INTERFACE;
        // SAFETY: `list` holds `*count` >= COUNT interfaces (the caller's contract, checked
        // length); the source is our static, so they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src, list, COUNT) };
        *count = COUNT as CK_ULONG;
        Ok(())
    }
);

ck_fn!(
    fn C_GetInterface(
        name: *mut CK_UTF8CHAR,
        version: *mut CK_VERSION,
        interface: *mut *mut CK_INTERFACE,
        flags: CK_FLAGS,
    ) {
        // SAFETY: the caller's output pointer, NULL or valid per PKCS#11.
        let interface = unsafe { out(interface) }?;
        // NULL names the default, "PKCS 11"; the vendor interface must be asked for by name.
        let wanted_name: &[u8] = if name.is_null() {
            NAME
        } else {
            // SAFETY: a non-NULL name is a NUL-terminated string (PKCS#11).
            unsafe { std::ffi::CStr::from_ptr(name as *const std::ffi::c_char) }.to_bytes_with_nul()
        };
        // SAFETY: the caller's version, NULL or a readable CK_VERSION (bytes, no alignment).
        let wanted = (!version.is_null()).then(|| unsafe { std::ptr::read_unaligned(version) });
        let index = (0..COUNT)
            .find(|&i| {
                name_of(i) == wanted_name
                    && wanted.is_none_or(|v| {
                        let have = version_of(i);
                        have.major == v.major && have.minor == v.minor
                    })
            })
            .ok_or_else(|| {
                log::info!("CKR_ARGUMENTS_BAD: C_GetInterface: no such interface and version");
                Error(CKR_ARGUMENTS_BAD)
            })?;
        if flags & !entry(index).flags != 0 {
            return fail_because(CKR_ARGUMENTS_BAD, "C_GetInterface: flags the interface lacks");
        }
        let base = &raw mut INTERFACES as *mut CK_INTERFACE;
        // SAFETY: `index` < COUNT, inside the static array.
        *interface = unsafe { base.add(index) };
        Ok(())
    }
);
