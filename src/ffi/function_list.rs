//! The one table of PKCS#11 functions: which function list (2.40, 3.0, 3.2) each belongs to,
//! and, for the functions the token does not offer, their C parameter types. From it
//! `function_lists!` makes the three function lists and an exported entry point for each
//! function not offered, which checks that the library is initialised and answers
//! `CKR_FUNCTION_NOT_SUPPORTED`. A later list repeats every function of the one before, as the
//! spec's structures do, so each function is named once here, in the version that added it.
//!
//! The lists are `static mut` because the spec hands out non-const pointers and some wrappers
//! write into the structs. A function missing from the table, or with the wrong parameter
//! types, does not compile: every field of a list must be given, with its exact type.

use super::*;
use crate::error::fail;
use cryptoki_sys::*;
use std::ffi::c_void;

/// `name: TYPE = (major, minor) [functions added in this version]`, three times. A function
/// written with parameter types is one the token does not offer.
macro_rules! function_lists {
    ($($list:ident: $ty:ident = ($major:literal, $minor:literal)
        [$($f:ident $(($($arg:ty),* $(,)?))?),* $(,)?]),* $(,)?) => {
        function_lists!(@lists [] $($list $ty $major $minor [$($f)*])*);
        $($($(
            /// Not offered by this token: `CKR_FUNCTION_NOT_SUPPORTED` once initialised.
            ///
            /// # Safety
            /// Reads none of its arguments.
            #[no_mangle]
            pub unsafe extern "C" fn $f($(_: $arg),*) -> CK_RV {
                guard(stringify!($f), || {
                    lib()?;
                    fail(CKR_FUNCTION_NOT_SUPPORTED)
                })
            }
        )?)*)*
    };
    // Each list holds the functions of the lists before it (`$seen`) and its own.
    (@lists [$($seen:ident)*] $list:ident $ty:ident $major:literal $minor:literal [$($f:ident)*]
        $($rest:tt)*) => {
        pub static mut $list: $ty = $ty {
            version: CK_VERSION { major: $major, minor: $minor },
            $($seen: Some($seen),)*
            $($f: Some($f),)*
        };
        function_lists!(@lists [$($seen)* $($f)*] $($rest)*);
    };
    (@lists [$($seen:ident)*]) => {};
}

function_lists! {
    FUNCTION_LIST_2_40: CK_FUNCTION_LIST = (2, 40) [
        C_Initialize, C_Finalize, C_GetInfo, C_GetFunctionList, C_GetSlotList, C_GetSlotInfo,
        C_GetTokenInfo, C_GetMechanismList, C_GetMechanismInfo, C_InitToken, C_InitPIN, C_SetPIN,
        C_OpenSession, C_CloseSession, C_CloseAllSessions, C_GetSessionInfo, C_GetOperationState,
        C_SetOperationState, C_Login, C_Logout, C_CreateObject, C_CopyObject, C_DestroyObject,
        C_GetObjectSize, C_GetAttributeValue, C_SetAttributeValue, C_FindObjectsInit,
        C_FindObjects, C_FindObjectsFinal, C_EncryptInit, C_Encrypt, C_EncryptUpdate,
        C_EncryptFinal, C_DecryptInit, C_Decrypt, C_DecryptUpdate, C_DecryptFinal, C_DigestInit,
        C_Digest, C_DigestUpdate, C_DigestKey, C_DigestFinal, C_SignInit, C_Sign, C_SignUpdate,
        C_SignFinal,
        C_SignRecoverInit(CK_SESSION_HANDLE, *mut CK_MECHANISM, CK_OBJECT_HANDLE),
        C_SignRecover(CK_SESSION_HANDLE, *mut CK_BYTE, CK_ULONG, *mut CK_BYTE, *mut CK_ULONG),
        C_VerifyInit, C_Verify, C_VerifyUpdate, C_VerifyFinal,
        C_VerifyRecoverInit(CK_SESSION_HANDLE, *mut CK_MECHANISM, CK_OBJECT_HANDLE),
        C_VerifyRecover(CK_SESSION_HANDLE, *mut CK_BYTE, CK_ULONG, *mut CK_BYTE, *mut CK_ULONG),
        C_DigestEncryptUpdate(
            CK_SESSION_HANDLE, *mut CK_BYTE, CK_ULONG, *mut CK_BYTE, *mut CK_ULONG),
        C_DecryptDigestUpdate(
            CK_SESSION_HANDLE, *mut CK_BYTE, CK_ULONG, *mut CK_BYTE, *mut CK_ULONG),
        C_SignEncryptUpdate(CK_SESSION_HANDLE, *mut CK_BYTE, CK_ULONG, *mut CK_BYTE, *mut CK_ULONG),
        C_DecryptVerifyUpdate(
            CK_SESSION_HANDLE, *mut CK_BYTE, CK_ULONG, *mut CK_BYTE, *mut CK_ULONG),
        C_GenerateKey, C_GenerateKeyPair, C_WrapKey, C_UnwrapKey, C_DeriveKey, C_SeedRandom,
        C_GenerateRandom, C_GetFunctionStatus, C_CancelFunction, C_WaitForSlotEvent,
    ],
    FUNCTION_LIST_3_0: CK_FUNCTION_LIST_3_0 = (3, 0) [
        C_GetInterfaceList, C_GetInterface, C_LoginUser, C_SessionCancel,
        C_MessageEncryptInit(CK_SESSION_HANDLE, *mut CK_MECHANISM, CK_OBJECT_HANDLE),
        C_EncryptMessage(
            CK_SESSION_HANDLE, *mut c_void, CK_ULONG, *mut CK_BYTE, CK_ULONG, *mut CK_BYTE,
            CK_ULONG, *mut CK_BYTE, *mut CK_ULONG),
        C_EncryptMessageBegin(CK_SESSION_HANDLE, *mut c_void, CK_ULONG, *mut CK_BYTE, CK_ULONG),
        C_EncryptMessageNext(
            CK_SESSION_HANDLE, *mut c_void, CK_ULONG, *mut CK_BYTE, CK_ULONG, *mut CK_BYTE, *mut
            CK_ULONG, CK_FLAGS),
        C_MessageEncryptFinal(CK_SESSION_HANDLE),
        C_MessageDecryptInit(CK_SESSION_HANDLE, *mut CK_MECHANISM, CK_OBJECT_HANDLE),
        C_DecryptMessage(
            CK_SESSION_HANDLE, *mut c_void, CK_ULONG, *mut CK_BYTE, CK_ULONG, *mut CK_BYTE,
            CK_ULONG, *mut CK_BYTE, *mut CK_ULONG),
        C_DecryptMessageBegin(CK_SESSION_HANDLE, *mut c_void, CK_ULONG, *mut CK_BYTE, CK_ULONG),
        C_DecryptMessageNext(
            CK_SESSION_HANDLE, *mut c_void, CK_ULONG, *mut CK_BYTE, CK_ULONG, *mut CK_BYTE, *mut
            CK_ULONG, CK_FLAGS),
        C_MessageDecryptFinal(CK_SESSION_HANDLE),
        C_MessageSignInit(CK_SESSION_HANDLE, *mut CK_MECHANISM, CK_OBJECT_HANDLE),
        C_SignMessage(
            CK_SESSION_HANDLE, *mut c_void, CK_ULONG, *mut CK_BYTE, CK_ULONG, *mut CK_BYTE, *mut
            CK_ULONG),
        C_SignMessageBegin(CK_SESSION_HANDLE, *mut c_void, CK_ULONG),
        C_SignMessageNext(
            CK_SESSION_HANDLE, *mut c_void, CK_ULONG, *mut CK_BYTE, CK_ULONG, *mut CK_BYTE, *mut
            CK_ULONG),
        C_MessageSignFinal(CK_SESSION_HANDLE),
        C_MessageVerifyInit(CK_SESSION_HANDLE, *mut CK_MECHANISM, CK_OBJECT_HANDLE),
        C_VerifyMessage(
            CK_SESSION_HANDLE, *mut c_void, CK_ULONG, *mut CK_BYTE, CK_ULONG, *mut CK_BYTE,
            CK_ULONG),
        C_VerifyMessageBegin(CK_SESSION_HANDLE, *mut c_void, CK_ULONG),
        C_VerifyMessageNext(
            CK_SESSION_HANDLE, *mut c_void, CK_ULONG, *mut CK_BYTE, CK_ULONG, *mut CK_BYTE,
            CK_ULONG),
        C_MessageVerifyFinal(CK_SESSION_HANDLE),
    ],
    FUNCTION_LIST_3_2: CK_FUNCTION_LIST_3_2 = (3, 2) [
        C_EncapsulateKey(
            CK_SESSION_HANDLE, *mut CK_MECHANISM, CK_OBJECT_HANDLE, *mut CK_ATTRIBUTE, CK_ULONG,
            *mut CK_BYTE, *mut CK_ULONG, *mut CK_OBJECT_HANDLE),
        C_DecapsulateKey(
            CK_SESSION_HANDLE, *mut CK_MECHANISM, CK_OBJECT_HANDLE, *mut CK_ATTRIBUTE, CK_ULONG,
            *mut CK_BYTE, CK_ULONG, *mut CK_OBJECT_HANDLE),
        C_VerifySignatureInit(
            CK_SESSION_HANDLE, *mut CK_MECHANISM, CK_OBJECT_HANDLE, *mut CK_BYTE, CK_ULONG),
        C_VerifySignature(CK_SESSION_HANDLE, *mut CK_BYTE, CK_ULONG),
        C_VerifySignatureUpdate(CK_SESSION_HANDLE, *mut CK_BYTE, CK_ULONG),
        C_VerifySignatureFinal(CK_SESSION_HANDLE),
        C_GetSessionValidationFlags,
        C_AsyncComplete(CK_SESSION_HANDLE, *mut CK_UTF8CHAR, *mut CK_ASYNC_DATA),
        C_AsyncGetID(CK_SESSION_HANDLE, *mut CK_UTF8CHAR, *mut CK_ULONG),
        C_AsyncJoin(CK_SESSION_HANDLE, *mut CK_UTF8CHAR, CK_ULONG, *mut CK_BYTE, CK_ULONG),
        C_WrapKeyAuthenticated(
            CK_SESSION_HANDLE, *mut CK_MECHANISM, CK_OBJECT_HANDLE, CK_OBJECT_HANDLE, *mut CK_BYTE,
            CK_ULONG, *mut CK_BYTE, *mut CK_ULONG),
        C_UnwrapKeyAuthenticated(
            CK_SESSION_HANDLE, *mut CK_MECHANISM, CK_OBJECT_HANDLE, *mut CK_BYTE, CK_ULONG, *mut
            CK_ATTRIBUTE, CK_ULONG, *mut CK_BYTE, CK_ULONG, *mut CK_OBJECT_HANDLE),
    ],
}
