//! PKCS#11 functions the token does not offer: each checks that the library is initialised and
//! answers `CKR_FUNCTION_NOT_SUPPORTED`. Signatures follow `cryptoki-sys` exactly.

use super::lib;
use crate::error::fail;
use cryptoki_sys::*;

ck_fn!(
    fn C_SignRecoverInit(_a1: CK_SESSION_HANDLE, _a2: *mut CK_MECHANISM, _a3: CK_OBJECT_HANDLE) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_SignRecover(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut CK_BYTE,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: *mut CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_VerifyRecoverInit(_a1: CK_SESSION_HANDLE, _a2: *mut CK_MECHANISM, _a3: CK_OBJECT_HANDLE) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_VerifyRecover(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut CK_BYTE,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: *mut CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_DigestEncryptUpdate(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut CK_BYTE,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: *mut CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_DecryptDigestUpdate(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut CK_BYTE,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: *mut CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_SignEncryptUpdate(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut CK_BYTE,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: *mut CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_DecryptVerifyUpdate(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut CK_BYTE,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: *mut CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_MessageEncryptInit(_a1: CK_SESSION_HANDLE, _a2: *mut CK_MECHANISM, _a3: CK_OBJECT_HANDLE) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_EncryptMessage(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut std::ffi::c_void,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: CK_ULONG,
        _a6: *mut CK_BYTE,
        _a7: CK_ULONG,
        _a8: *mut CK_BYTE,
        _a9: *mut CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_EncryptMessageBegin(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut std::ffi::c_void,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_EncryptMessageNext(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut std::ffi::c_void,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: CK_ULONG,
        _a6: *mut CK_BYTE,
        _a7: *mut CK_ULONG,
        _a8: CK_FLAGS,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_MessageEncryptFinal(_a1: CK_SESSION_HANDLE) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_MessageDecryptInit(_a1: CK_SESSION_HANDLE, _a2: *mut CK_MECHANISM, _a3: CK_OBJECT_HANDLE) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_DecryptMessage(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut std::ffi::c_void,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: CK_ULONG,
        _a6: *mut CK_BYTE,
        _a7: CK_ULONG,
        _a8: *mut CK_BYTE,
        _a9: *mut CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_DecryptMessageBegin(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut std::ffi::c_void,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_DecryptMessageNext(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut std::ffi::c_void,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: CK_ULONG,
        _a6: *mut CK_BYTE,
        _a7: *mut CK_ULONG,
        _a8: CK_FLAGS,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_MessageDecryptFinal(_a1: CK_SESSION_HANDLE) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_MessageSignInit(_a1: CK_SESSION_HANDLE, _a2: *mut CK_MECHANISM, _a3: CK_OBJECT_HANDLE) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_SignMessage(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut std::ffi::c_void,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: CK_ULONG,
        _a6: *mut CK_BYTE,
        _a7: *mut CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_SignMessageBegin(_a1: CK_SESSION_HANDLE, _a2: *mut std::ffi::c_void, _a3: CK_ULONG) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_SignMessageNext(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut std::ffi::c_void,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: CK_ULONG,
        _a6: *mut CK_BYTE,
        _a7: *mut CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_MessageSignFinal(_a1: CK_SESSION_HANDLE) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_MessageVerifyInit(_a1: CK_SESSION_HANDLE, _a2: *mut CK_MECHANISM, _a3: CK_OBJECT_HANDLE) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_VerifyMessage(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut std::ffi::c_void,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: CK_ULONG,
        _a6: *mut CK_BYTE,
        _a7: CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_VerifyMessageBegin(_a1: CK_SESSION_HANDLE, _a2: *mut std::ffi::c_void, _a3: CK_ULONG) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_VerifyMessageNext(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut std::ffi::c_void,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: CK_ULONG,
        _a6: *mut CK_BYTE,
        _a7: CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_MessageVerifyFinal(_a1: CK_SESSION_HANDLE) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_EncapsulateKey(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut CK_MECHANISM,
        _a3: CK_OBJECT_HANDLE,
        _a4: *mut CK_ATTRIBUTE,
        _a5: CK_ULONG,
        _a6: *mut CK_BYTE,
        _a7: *mut CK_ULONG,
        _a8: *mut CK_OBJECT_HANDLE,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_DecapsulateKey(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut CK_MECHANISM,
        _a3: CK_OBJECT_HANDLE,
        _a4: *mut CK_ATTRIBUTE,
        _a5: CK_ULONG,
        _a6: *mut CK_BYTE,
        _a7: CK_ULONG,
        _a8: *mut CK_OBJECT_HANDLE,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_VerifySignatureInit(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut CK_MECHANISM,
        _a3: CK_OBJECT_HANDLE,
        _a4: *mut CK_BYTE,
        _a5: CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_VerifySignature(_a1: CK_SESSION_HANDLE, _a2: *mut CK_BYTE, _a3: CK_ULONG) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_VerifySignatureUpdate(_a1: CK_SESSION_HANDLE, _a2: *mut CK_BYTE, _a3: CK_ULONG) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_VerifySignatureFinal(_a1: CK_SESSION_HANDLE) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_GetSessionValidationFlags(
        _a1: CK_SESSION_HANDLE,
        _a2: CK_SESSION_VALIDATION_FLAGS_TYPE,
        _a3: *mut CK_FLAGS,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_AsyncComplete(_a1: CK_SESSION_HANDLE, _a2: *mut CK_UTF8CHAR, _a3: *mut CK_ASYNC_DATA) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_AsyncGetID(_a1: CK_SESSION_HANDLE, _a2: *mut CK_UTF8CHAR, _a3: *mut CK_ULONG) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_AsyncJoin(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut CK_UTF8CHAR,
        _a3: CK_ULONG,
        _a4: *mut CK_BYTE,
        _a5: CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_WrapKeyAuthenticated(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut CK_MECHANISM,
        _a3: CK_OBJECT_HANDLE,
        _a4: CK_OBJECT_HANDLE,
        _a5: *mut CK_BYTE,
        _a6: CK_ULONG,
        _a7: *mut CK_BYTE,
        _a8: *mut CK_ULONG,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);

ck_fn!(
    fn C_UnwrapKeyAuthenticated(
        _a1: CK_SESSION_HANDLE,
        _a2: *mut CK_MECHANISM,
        _a3: CK_OBJECT_HANDLE,
        _a4: *mut CK_BYTE,
        _a5: CK_ULONG,
        _a6: *mut CK_ATTRIBUTE,
        _a7: CK_ULONG,
        _a8: *mut CK_BYTE,
        _a9: CK_ULONG,
        _a10: *mut CK_OBJECT_HANDLE,
    ) {
        lib()?;
        fail(CKR_FUNCTION_NOT_SUPPORTED)
    }
);
