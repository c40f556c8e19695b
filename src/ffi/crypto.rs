//! Encryption, decryption, digests, signatures and verification (PKCS#11 §5.8–5.13).

use super::convert::{bytes, capacity, mechanism, write_output};
use super::lib;
use crate::error::fail;
use cryptoki_sys::*;

ck_fn!(
    fn C_EncryptInit(session: CK_SESSION_HANDLE, mech: *mut CK_MECHANISM, key: CK_OBJECT_HANDLE) {
        let l = lib()?;
        l.0.encrypt_init(session, mechanism(mech)?, key)
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
        let cap = capacity(outp, out_len)?;
        let o = l.0.crypt(session, true, bytes(data, len)?, cap)?;
        write_output(outp, out_len, o)
    }
);

ck_fn!(
    fn C_DecryptInit(session: CK_SESSION_HANDLE, mech: *mut CK_MECHANISM, key: CK_OBJECT_HANDLE) {
        let l = lib()?;
        l.0.decrypt_init(session, mechanism(mech)?, key)
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
        let cap = capacity(outp, out_len)?;
        let o = l.0.crypt(session, false, bytes(data, len)?, cap)?;
        write_output(outp, out_len, o)
    }
);

ck_fn!(
    fn C_DigestInit(session: CK_SESSION_HANDLE, mech: *mut CK_MECHANISM) {
        let l = lib()?;
        l.0.digest_init(session, mechanism(mech)?)
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
        let cap = capacity(outp, out_len)?;
        let o = l.0.digest(session, Some(bytes(data, len)?), cap)?;
        write_output(outp, out_len, o)
    }
);

ck_fn!(
    fn C_DigestUpdate(session: CK_SESSION_HANDLE, data: *mut CK_BYTE, len: CK_ULONG) {
        let l = lib()?;
        l.0.digest_update(session, bytes(data, len)?)
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
        let cap = capacity(outp, out_len)?;
        let o = l.0.digest(session, None, cap)?;
        write_output(outp, out_len, o)
    }
);

ck_fn!(
    fn C_SignInit(session: CK_SESSION_HANDLE, mech: *mut CK_MECHANISM, key: CK_OBJECT_HANDLE) {
        let l = lib()?;
        l.0.sign_init(session, mechanism(mech)?, key)
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
        let cap = capacity(sig, sig_len)?;
        let o = l.0.sign(session, Some(bytes(data, len)?), cap)?;
        write_output(sig, sig_len, o)
    }
);

ck_fn!(
    fn C_SignUpdate(session: CK_SESSION_HANDLE, data: *mut CK_BYTE, len: CK_ULONG) {
        let l = lib()?;
        l.0.sign_update(session, bytes(data, len)?)
    }
);

ck_fn!(
    fn C_SignFinal(session: CK_SESSION_HANDLE, sig: *mut CK_BYTE, sig_len: *mut CK_ULONG) {
        let l = lib()?;
        let cap = capacity(sig, sig_len)?;
        let o = l.0.sign(session, None, cap)?;
        write_output(sig, sig_len, o)
    }
);

ck_fn!(
    fn C_VerifyInit(session: CK_SESSION_HANDLE, mech: *mut CK_MECHANISM, key: CK_OBJECT_HANDLE) {
        let l = lib()?;
        l.0.verify_init(session, mechanism(mech)?, key)
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
        if sig.is_null() {
            return fail(CKR_ARGUMENTS_BAD);
        }
        l.0.verify(session, Some(bytes(data, len)?), bytes(sig, sig_len)?)
    }
);

ck_fn!(
    fn C_VerifyUpdate(session: CK_SESSION_HANDLE, data: *mut CK_BYTE, len: CK_ULONG) {
        let l = lib()?;
        l.0.verify_update(session, bytes(data, len)?)
    }
);

ck_fn!(
    fn C_VerifyFinal(session: CK_SESSION_HANDLE, sig: *mut CK_BYTE, sig_len: CK_ULONG) {
        let l = lib()?;
        if sig.is_null() {
            return fail(CKR_ARGUMENTS_BAD);
        }
        l.0.verify(session, None, bytes(sig, sig_len)?)
    }
);
