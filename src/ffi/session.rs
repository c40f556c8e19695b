//! Session management (PKCS#11 §5.6): open, close, info, login, logout, cancel.

use super::convert::{out, required_bytes};
use super::lib;
use crate::error::{fail, fail_because};
use cryptoki_sys::*;
use std::ffi::c_void;

ck_fn!(
    fn C_OpenSession(
        slot: CK_SLOT_ID,
        flags: CK_FLAGS,
        _application: *mut c_void,
        _notify: CK_NOTIFY,
        session: *mut CK_SESSION_HANDLE,
    ) {
        let l = lib()?;
        // SAFETY: the caller's output handle, NULL or valid per PKCS#11.
        let session = unsafe { out(session) }?;
        *session = l.0.open_session(slot, flags)?;
        Ok(())
    }
);

ck_fn!(
    fn C_CloseSession(session: CK_SESSION_HANDLE) {
        lib()?.0.close_session(session)
    }
);

ck_fn!(
    fn C_CloseAllSessions(slot: CK_SLOT_ID) {
        lib()?.0.close_all_sessions(slot)
    }
);

ck_fn!(
    fn C_GetSessionInfo(session: CK_SESSION_HANDLE, info: *mut CK_SESSION_INFO) {
        let l = lib()?;
        // SAFETY: the caller's output structure, NULL or valid per PKCS#11.
        let info = unsafe { out(info) }?;
        let s = l.0.session_info(session)?;
        info.slotID = s.slot_id;
        info.state = s.state;
        info.flags = s.flags;
        info.ulDeviceError = 0;
        Ok(())
    }
);

// PKCS#11 3.2: the flags of the validations (`CKO_VALIDATION` objects) the session's last
// operation met. ferrohsm holds no validation object and claims no validated operation, so the
// answer is 0 for every session, local or remote; a type other than `CKS_LAST_VALIDATION_OK`
// (the only one 3.2 defines) is `CKR_ARGUMENTS_BAD`.
ck_fn!(
    fn C_GetSessionValidationFlags(
        session: CK_SESSION_HANDLE,
        ty: CK_SESSION_VALIDATION_FLAGS_TYPE,
        flags: *mut CK_FLAGS,
    ) {
        let l = lib()?;
        l.0.check_session(session)?;
        // SAFETY: the caller's output, NULL or valid per PKCS#11.
        let flags = unsafe { out(flags) }?;
        if ty != CKS_LAST_VALIDATION_OK {
            return fail_because(
                CKR_ARGUMENTS_BAD,
                format!("C_GetSessionValidationFlags: type {ty} is not CKS_LAST_VALIDATION_OK ({CKS_LAST_VALIDATION_OK}), the only type PKCS#11 3.2 defines"),
            );
        }
        *flags = 0;
        Ok(())
    }
);

ck_fn!(
    fn C_GetOperationState(session: CK_SESSION_HANDLE, _state: *mut CK_BYTE, len: *mut CK_ULONG) {
        let l = lib()?;
        l.0.check_session(session)?;
        // SAFETY: the caller's output length, NULL or valid per PKCS#11.
        unsafe { out(len) }?;
        if !l.0.has_crypto_operation(session)? {
            // Nothing to save: the code C_GetOperationState lists for it (pkcs11test checks).
            return fail(CKR_OPERATION_NOT_INITIALIZED);
        }
        // Saved state would carry key material out of the token; refuse as the spec allows.
        fail(CKR_STATE_UNSAVEABLE)
    }
);

ck_fn!(
    fn C_SetOperationState(
        session: CK_SESSION_HANDLE,
        state: *mut CK_BYTE,
        _len: CK_ULONG,
        _enc_key: CK_OBJECT_HANDLE,
        _auth_key: CK_OBJECT_HANDLE,
    ) {
        lib()?.0.check_session(session)?;
        if state.is_null() {
            return fail_because(CKR_ARGUMENTS_BAD, "C_SetOperationState: the state is NULL");
        }
        // No state is ever saved (see C_GetOperationState), so none can be valid.
        fail(CKR_SAVED_STATE_INVALID)
    }
);

ck_fn!(
    fn C_Login(session: CK_SESSION_HANDLE, user: CK_USER_TYPE, pin: *mut CK_UTF8CHAR, len: CK_ULONG) {
        let l = lib()?;
        // Protected authentication paths (a NULL PIN) do not exist on a software token.
        // SAFETY: the caller's PIN, NULL or valid for `len` bytes per PKCS#11.
        l.0.login(session, user, unsafe { required_bytes(pin, len) }?)
    }
);

ck_fn!(
    fn C_LoginUser(
        session: CK_SESSION_HANDLE,
        user: CK_USER_TYPE,
        pin: *mut CK_UTF8CHAR,
        len: CK_ULONG,
        _username: *mut CK_UTF8CHAR,
        _username_len: CK_ULONG,
    ) {
        let l = lib()?;
        // One user per token: the user name carries no meaning here.
        // SAFETY: the caller's PIN, NULL or valid for `len` bytes per PKCS#11.
        l.0.login(session, user, unsafe { required_bytes(pin, len) }?)
    }
);

ck_fn!(
    fn C_Logout(session: CK_SESSION_HANDLE) {
        lib()?.0.logout(session)
    }
);

ck_fn!(
    fn C_SessionCancel(session: CK_SESSION_HANDLE, flags: CK_FLAGS) {
        lib()?.0.cancel(session, flags)
    }
);
