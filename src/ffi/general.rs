//! General-purpose functions (PKCS#11 §5.4): initialisation, library info, function lists;
//! and random numbers (§5.15) and the legacy parallel functions.

use super::convert::{bytes, out, padded};
use super::{lib, STATE};
use crate::error::{fail, fail_because};
use crate::service::Service;
use crate::token;
use cryptoki_sys::*;
use parking_lot::Mutex;
use std::ffi::c_void;
use std::sync::Arc;

/// Serialises `C_Initialize` and `C_Finalize` so concurrent callers see exactly one success.
static INIT_LOCK: Mutex<()> = Mutex::new(());

ck_fn!(
    fn C_Initialize(init_args: *mut c_void) {
        let mut may_create_threads = true;
        if !init_args.is_null() {
            // SAFETY: a non-NULL argument is a CK_C_INITIALIZE_ARGS (PKCS#11), copied out as
            // the caller's struct may be unaligned.
            let args = unsafe { std::ptr::read_unaligned(init_args as *const CK_C_INITIALIZE_ARGS) };
            if !args.pReserved.is_null() {
                return fail_because(CKR_ARGUMENTS_BAD, "C_Initialize: pReserved must be NULL");
            }
            let given = [
                args.CreateMutex.is_some(),
                args.DestroyMutex.is_some(),
                args.LockMutex.is_some(),
                args.UnlockMutex.is_some(),
            ];
            if given.iter().any(|g| *g) && !given.iter().all(|g| *g) {
                return fail_because(
                    CKR_ARGUMENTS_BAD,
                    "C_Initialize: give all four mutex functions or none",
                );
            }
            // Native locks are used in every mode: the module is thread-safe whether or not the
            // application offers its own mutexes. The local token creates no threads of its own;
            // the remote client needs its runtime's (Service::open refuses it here).
            may_create_threads = args.flags & CKF_LIBRARY_CANT_CREATE_OS_THREADS == 0;
        }
        let _g = init_lock();
        crate::fork::watch();
        let generation = crate::fork::generation();
        if let Some(old) = STATE.load_full() {
            if old.1 == generation {
                return fail(CKR_CRYPTOKI_ALREADY_INITIALIZED);
            }
            // State inherited through fork() belongs to the parent; its locks may be held by
            // threads that do not exist here, so it is abandoned rather than dropped.
            std::mem::forget(old);
        }
        STATE.store(Some(Arc::new((Service::open(may_create_threads)?, generation))));
        log::debug!("C_Initialize: ready");
        Ok(())
    }
);

/// Takes `INIT_LOCK`. After fork() it may be held by a parent thread that does not exist in
/// the child, so a forked child waits only briefly for it.
fn init_lock() -> Option<parking_lot::MutexGuard<'static, ()>> {
    if crate::fork::generation() == 0 {
        Some(INIT_LOCK.lock())
    } else {
        INIT_LOCK.try_lock_for(std::time::Duration::from_millis(100))
    }
}

ck_fn!(
    fn C_Finalize(reserved: *mut c_void) {
        if !reserved.is_null() {
            return fail_because(CKR_ARGUMENTS_BAD, "C_Finalize: pReserved must be NULL");
        }
        let _g = init_lock();
        lib()?;
        STATE.store(None);
        Ok(())
    }
);

ck_fn!(
    fn C_GetInfo(info: *mut CK_INFO) {
        lib()?;
        // SAFETY: the caller's output structure, NULL or valid per PKCS#11.
        let info = unsafe { out(info) }?;
        info.cryptokiVersion = CK_VERSION { major: 2, minor: 40 };
        info.manufacturerID = padded(token::MANUFACTURER.as_bytes());
        info.flags = 0;
        info.libraryDescription = padded(token::LIBRARY_DESCRIPTION.as_bytes());
        info.libraryVersion = CK_VERSION {
            major: token::VERSION_MAJOR,
            minor: token::VERSION_MINOR,
        };
        Ok(())
    }
);

ck_fn!(
    fn C_GetFunctionList(list: *mut *mut CK_FUNCTION_LIST) {
        // SAFETY: the caller's output pointer, NULL or valid per PKCS#11.
        let list = unsafe { out(list) }?;
        *list = &raw mut super::function_list::FUNCTION_LIST_2_40;
        Ok(())
    }
);

ck_fn!(
    fn C_SeedRandom(session: CK_SESSION_HANDLE, seed: *mut CK_BYTE, len: CK_ULONG) {
        lib()?.0.check_session(session)?;
        // SAFETY: the caller's seed, NULL or valid for `len` bytes per PKCS#11.
        unsafe { bytes(seed, len) }?;
        // The OS generator needs no seed; mixing caller data in could only weaken it.
        Ok(())
    }
);

ck_fn!(
    fn C_GenerateRandom(session: CK_SESSION_HANDLE, buf: *mut CK_BYTE, len: CK_ULONG) {
        let l = lib()?;
        l.0.check_session(session)?;
        if buf.is_null() {
            return if len == 0 {
                Ok(())
            } else {
                fail_because(CKR_ARGUMENTS_BAD, "C_GenerateRandom: NULL buffer")
            };
        }
        if len as u64 > isize::MAX as u64 {
            return fail_because(CKR_ARGUMENTS_BAD, format!("C_GenerateRandom: {len} bytes"));
        }
        // SAFETY: non-NULL, so valid for `len` bytes per PKCS#11 (length below isize::MAX).
        let buf = unsafe { std::slice::from_raw_parts_mut(buf, len as usize) };
        l.0.generate_random(session, buf)
    }
);

ck_fn!(
    fn C_GetFunctionStatus(session: CK_SESSION_HANDLE) {
        lib()?.0.check_session(session)?;
        fail(CKR_FUNCTION_NOT_PARALLEL)
    }
);

ck_fn!(
    fn C_CancelFunction(session: CK_SESSION_HANDLE) {
        lib()?.0.check_session(session)?;
        fail(CKR_FUNCTION_NOT_PARALLEL)
    }
);

ck_fn!(
    fn C_WaitForSlotEvent(flags: CK_FLAGS, slot: *mut CK_SLOT_ID, reserved: *mut c_void) {
        lib()?;
        // SAFETY: the caller's output, NULL or valid per PKCS#11.
        unsafe { out(slot) }?;
        if !reserved.is_null() {
            return fail_because(CKR_ARGUMENTS_BAD, "C_WaitForSlotEvent: pReserved must be NULL");
        }
        // Software slots have no insertion events.
        if flags & CKF_DONT_BLOCK != 0 {
            fail(CKR_NO_EVENT)
        } else {
            fail(CKR_FUNCTION_NOT_SUPPORTED)
        }
    }
);
