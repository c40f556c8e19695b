//! Encryption, decryption, digests, signatures and verification (PKCS#11 §5.8–5.13).
//!
//! Arguments are converted here and handed to the token as they came out, errors included:
//! the token takes them inside the operation, so a bad pointer ends it like any other error.

use super::convert::{bytes, capacity, mechanism, required_bytes, write_output};
use super::lib;
use cryptoki_sys::*;

// One SAFETY reason serves every call below: the pointers are the caller's, and PKCS#11 makes
// each NULL or valid for the length paired with it (`data`/`len`, `outp`/`*out_len`,
// `sig`/`sig_len`, `mech` with its parameter).

ck_fn!(
    fn C_EncryptInit(session: CK_SESSION_HANDLE, mech: *mut CK_MECHANISM, key: CK_OBJECT_HANDLE) {
        let l = lib()?;
        l.0.check_session(session)?;
        // SAFETY: `mech` is the caller's mechanism (see above).
        l.0.encrypt_init(session, unsafe { mechanism(mech) }?, key)
    }
);

ck_fn!(
    fn C_Encrypt(
        session: CK_SESSION_HANDLE,
        data: *mut CK_BYTE,
        len: CK_ULONG,
        outp: *mut CK_BYTE,
        out_len: *mut CK_ULONG,
    ) {
        let l = lib()?;
        // SAFETY: the caller's input and output length (see above).
        let (data, cap) = unsafe { (bytes(data, len), capacity(outp, out_len)) };
        let o = l.0.crypt(session, true, data, cap)?;
        // SAFETY: the caller's output buffer and length (see above).
        unsafe { write_output(outp, out_len, o) }
    }
);

ck_fn!(
    fn C_EncryptUpdate(
        session: CK_SESSION_HANDLE,
        data: *mut CK_BYTE,
        len: CK_ULONG,
        outp: *mut CK_BYTE,
        out_len: *mut CK_ULONG,
    ) {
        let l = lib()?;
        // SAFETY: the caller's input and output length (see above).
        let (data, cap) = unsafe { (bytes(data, len), capacity(outp, out_len)) };
        let o = l.0.crypt_update(session, true, data, cap)?;
        // SAFETY: the caller's output buffer and length (see above).
        unsafe { write_output(outp, out_len, o) }
    }
);

ck_fn!(
    fn C_EncryptFinal(session: CK_SESSION_HANDLE, outp: *mut CK_BYTE, out_len: *mut CK_ULONG) {
        let l = lib()?;
        // SAFETY: the caller's output length (see above).
        let cap = unsafe { capacity(outp, out_len) };
        let o = l.0.crypt_final(session, true, cap)?;
        // SAFETY: the caller's output buffer and length (see above).
        unsafe { write_output(outp, out_len, o) }
    }
);

ck_fn!(
    fn C_DecryptUpdate(
        session: CK_SESSION_HANDLE,
        data: *mut CK_BYTE,
        len: CK_ULONG,
        outp: *mut CK_BYTE,
        out_len: *mut CK_ULONG,
    ) {
        let l = lib()?;
        // SAFETY: the caller's input and output length (see above).
        let (data, cap) = unsafe { (bytes(data, len), capacity(outp, out_len)) };
        let o = l.0.crypt_update(session, false, data, cap)?;
        // SAFETY: the caller's output buffer and length (see above).
        unsafe { write_output(outp, out_len, o) }
    }
);

ck_fn!(
    fn C_DecryptFinal(session: CK_SESSION_HANDLE, outp: *mut CK_BYTE, out_len: *mut CK_ULONG) {
        let l = lib()?;
        // SAFETY: the caller's output length (see above).
        let cap = unsafe { capacity(outp, out_len) };
        let o = l.0.crypt_final(session, false, cap)?;
        // SAFETY: the caller's output buffer and length (see above).
        unsafe { write_output(outp, out_len, o) }
    }
);

ck_fn!(
    fn C_DecryptInit(session: CK_SESSION_HANDLE, mech: *mut CK_MECHANISM, key: CK_OBJECT_HANDLE) {
        let l = lib()?;
        l.0.check_session(session)?;
        // SAFETY: `mech` is the caller's mechanism (see above).
        l.0.decrypt_init(session, unsafe { mechanism(mech) }?, key)
    }
);

ck_fn!(
    fn C_Decrypt(
        session: CK_SESSION_HANDLE,
        data: *mut CK_BYTE,
        len: CK_ULONG,
        outp: *mut CK_BYTE,
        out_len: *mut CK_ULONG,
    ) {
        let l = lib()?;
        // SAFETY: the caller's input and output length (see above).
        let (data, cap) = unsafe { (bytes(data, len), capacity(outp, out_len)) };
        let o = l.0.crypt(session, false, data, cap)?;
        // SAFETY: the caller's output buffer and length (see above).
        unsafe { write_output(outp, out_len, o) }
    }
);

ck_fn!(
    fn C_DigestInit(session: CK_SESSION_HANDLE, mech: *mut CK_MECHANISM) {
        let l = lib()?;
        l.0.check_session(session)?;
        // SAFETY: `mech` is the caller's mechanism (see above).
        l.0.digest_init(session, unsafe { mechanism(mech) }?)
    }
);

ck_fn!(
    fn C_Digest(
        session: CK_SESSION_HANDLE,
        data: *mut CK_BYTE,
        len: CK_ULONG,
        outp: *mut CK_BYTE,
        out_len: *mut CK_ULONG,
    ) {
        let l = lib()?;
        // SAFETY: the caller's input and output length (see above).
        let (data, cap) = unsafe { (bytes(data, len), capacity(outp, out_len)) };
        let o = l.0.digest(session, Some(data), cap)?;
        // SAFETY: the caller's output buffer and length (see above).
        unsafe { write_output(outp, out_len, o) }
    }
);

ck_fn!(
    fn C_DigestUpdate(session: CK_SESSION_HANDLE, data: *mut CK_BYTE, len: CK_ULONG) {
        let l = lib()?;
        // SAFETY: the caller's input (see above).
        l.0.digest_update(session, unsafe { bytes(data, len) })
    }
);

ck_fn!(
    fn C_DigestKey(session: CK_SESSION_HANDLE, key: CK_OBJECT_HANDLE) {
        lib()?.0.digest_key(session, key)
    }
);

ck_fn!(
    fn C_DigestFinal(session: CK_SESSION_HANDLE, outp: *mut CK_BYTE, out_len: *mut CK_ULONG) {
        let l = lib()?;
        // SAFETY: the caller's output length (see above).
        let o = l.0.digest(session, None, unsafe { capacity(outp, out_len) })?;
        // SAFETY: the caller's output buffer and length (see above).
        unsafe { write_output(outp, out_len, o) }
    }
);

ck_fn!(
    fn C_SignInit(session: CK_SESSION_HANDLE, mech: *mut CK_MECHANISM, key: CK_OBJECT_HANDLE) {
        let l = lib()?;
        l.0.check_session(session)?;
        // SAFETY: `mech` is the caller's mechanism (see above).
        l.0.sign_init(session, unsafe { mechanism(mech) }?, key)
    }
);

ck_fn!(
    fn C_Sign(
        session: CK_SESSION_HANDLE,
        data: *mut CK_BYTE,
        len: CK_ULONG,
        sig: *mut CK_BYTE,
        sig_len: *mut CK_ULONG,
    ) {
        let l = lib()?;
        // SAFETY: the caller's input and output length (see above).
        let (data, cap) = unsafe { (bytes(data, len), capacity(sig, sig_len)) };
        let o = l.0.sign(session, Some(data), cap)?;
        // SAFETY: the caller's output buffer and length (see above).
        unsafe { write_output(sig, sig_len, o) }
    }
);

ck_fn!(
    fn C_SignUpdate(session: CK_SESSION_HANDLE, data: *mut CK_BYTE, len: CK_ULONG) {
        let l = lib()?;
        // SAFETY: the caller's input (see above).
        l.0.sign_update(session, unsafe { bytes(data, len) })
    }
);

ck_fn!(
    fn C_SignFinal(session: CK_SESSION_HANDLE, sig: *mut CK_BYTE, sig_len: *mut CK_ULONG) {
        let l = lib()?;
        // SAFETY: the caller's output length (see above).
        let o = l.0.sign(session, None, unsafe { capacity(sig, sig_len) })?;
        // SAFETY: the caller's output buffer and length (see above).
        unsafe { write_output(sig, sig_len, o) }
    }
);

ck_fn!(
    fn C_VerifyInit(session: CK_SESSION_HANDLE, mech: *mut CK_MECHANISM, key: CK_OBJECT_HANDLE) {
        let l = lib()?;
        l.0.check_session(session)?;
        // SAFETY: `mech` is the caller's mechanism (see above).
        l.0.verify_init(session, unsafe { mechanism(mech) }?, key)
    }
);

ck_fn!(
    fn C_Verify(
        session: CK_SESSION_HANDLE,
        data: *mut CK_BYTE,
        len: CK_ULONG,
        sig: *mut CK_BYTE,
        sig_len: CK_ULONG,
    ) {
        let l = lib()?;
        // SAFETY: the caller's inputs (see above).
        let (data, sig) = unsafe { (bytes(data, len), required_bytes(sig, sig_len)) };
        l.0.verify(session, Some(data), sig)
    }
);

ck_fn!(
    fn C_VerifyUpdate(session: CK_SESSION_HANDLE, data: *mut CK_BYTE, len: CK_ULONG) {
        let l = lib()?;
        // SAFETY: the caller's input (see above).
        l.0.verify_update(session, unsafe { bytes(data, len) })
    }
);

ck_fn!(
    fn C_VerifyFinal(session: CK_SESSION_HANDLE, sig: *mut CK_BYTE, sig_len: CK_ULONG) {
        let l = lib()?;
        // SAFETY: the caller's input (see above).
        l.0.verify(session, None, unsafe { required_bytes(sig, sig_len) })
    }
);
