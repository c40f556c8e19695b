//! PKCS#11 3.x interfaces: "PKCS 11" in versions 3.0 (the default), 3.2 and 2.40.

use super::convert::out;
use super::function_list::{FUNCTION_LIST_2_40, FUNCTION_LIST_3_0, FUNCTION_LIST_3_2};
use crate::error::{fail, Error};
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

fn version_of(i: usize) -> CK_VERSION {
    unsafe { *(INTERFACES[i].pFunctionList as *const CK_VERSION) }
}

ck_fn!(
    fn C_GetInterfaceList(list: *mut CK_INTERFACE, count: *mut CK_ULONG) {
        let count = out(count)?;
        if list.is_null() {
            *count = COUNT as CK_ULONG;
            return Ok(());
        }
        if (*count as usize) < COUNT {
            *count = COUNT as CK_ULONG;
            return fail(CKR_BUFFER_TOO_SMALL);
        }
        let src = &raw const INTERFACES as *const CK_INTERFACE;
        std::ptr::copy_nonoverlapping(src, list, COUNT);
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
        let interface = out(interface)?;
        // NULL names the default, "PKCS 11"; the vendor interface must be asked for by name.
        let wanted_name: &[u8] = if name.is_null() {
            NAME
        } else {
            std::ffi::CStr::from_ptr(name as *const std::ffi::c_char).to_bytes_with_nul()
        };
        let wanted = version.as_ref();
        let index = (0..COUNT)
            .find(|&i| {
                let entry_name =
                    std::ffi::CStr::from_ptr(INTERFACES[i].pInterfaceName as *const std::ffi::c_char);
                entry_name.to_bytes_with_nul() == wanted_name
                    && wanted.is_none_or(|v| {
                        let have = version_of(i);
                        have.major == v.major && have.minor == v.minor
                    })
            })
            .ok_or(Error(CKR_ARGUMENTS_BAD))?;
        let base = &raw mut INTERFACES as *mut CK_INTERFACE;
        if flags & !(*base.add(index)).flags != 0 {
            return fail(CKR_ARGUMENTS_BAD);
        }
        *interface = base.add(index);
        Ok(())
    }
);
