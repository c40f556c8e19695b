//! Object management (PKCS#11 §5.7) and key management (§5.14).

use super::convert::{capacity, mechanism, out, template, template_pairs, write_output, AttributeAnswers};
use super::lib;
use super::slice::{copied, output_capacity};
use crate::error::{fail, fail_because};
use crate::token::objects::AttributeValue;
use cryptoki_sys::*;

// One SAFETY reason serves every call below: the pointers are the caller's, and PKCS#11 makes
// each NULL or valid for what it is paired with (a template and its count, a mechanism and its
// parameter, a buffer and its length, a handle to write).

ck_fn!(
    fn C_CreateObject(
        session: CK_SESSION_HANDLE,
        tmpl: *mut CK_ATTRIBUTE,
        count: CK_ULONG,
        object: *mut CK_OBJECT_HANDLE,
    ) {
        let l = lib()?;
        // SAFETY: the caller's output handle and template (see above).
        let (object, tmpl) = unsafe { (out(object)?, template(tmpl, count)?) };
        *object = l.0.create_object(session, tmpl)?;
        Ok(())
    }
);

ck_fn!(
    fn C_CopyObject(
        session: CK_SESSION_HANDLE,
        handle: CK_OBJECT_HANDLE,
        tmpl: *mut CK_ATTRIBUTE,
        count: CK_ULONG,
        object: *mut CK_OBJECT_HANDLE,
    ) {
        let l = lib()?;
        // SAFETY: the caller's output handle and template (see above).
        let (object, tmpl) = unsafe { (out(object)?, template(tmpl, count)?) };
        *object = l.0.copy_object(session, handle, tmpl)?;
        Ok(())
    }
);

ck_fn!(
    fn C_DestroyObject(session: CK_SESSION_HANDLE, handle: CK_OBJECT_HANDLE) {
        lib()?.0.destroy_object(session, handle)
    }
);

ck_fn!(
    fn C_GetObjectSize(session: CK_SESSION_HANDLE, handle: CK_OBJECT_HANDLE, size: *mut CK_ULONG) {
        let l = lib()?;
        // SAFETY: the caller's output (see above).
        let size = unsafe { out(size) }?;
        *size = l.0.object_size(session, handle)? as CK_ULONG;
        Ok(())
    }
);

ck_fn!(
    fn C_GetAttributeValue(
        session: CK_SESSION_HANDLE,
        handle: CK_OBJECT_HANDLE,
        tmpl: *mut CK_ATTRIBUTE,
        count: CK_ULONG,
    ) {
        let l = lib()?;
        // SAFETY: the caller's template (see above).
        let mut attrs = unsafe { AttributeAnswers::read(tmpl, count) }?;
        let types: Vec<CK_ATTRIBUTE_TYPE> = attrs.entries.iter().map(|a| a.type_).collect();
        // Every attribute gets its answer; the call reports the last problem met (§5.7).
        let mut rv = CKR_OK;
        l.0.attribute_values(session, handle, &types, |i, value| {
            let a = attrs.entries[i];
            let (len, value) = match value {
                AttributeValue::Sensitive => {
                    rv = CKR_ATTRIBUTE_SENSITIVE;
                    (CK_UNAVAILABLE_INFORMATION, None)
                }
                AttributeValue::Invalid => {
                    rv = CKR_ATTRIBUTE_TYPE_INVALID;
                    (CK_UNAVAILABLE_INFORMATION, None)
                }
                AttributeValue::Value(v) if super::array::is_array(a.type_) => {
                    let mut e = a;
                    // SAFETY: the caller's entry and the nested entries and buffers it points
                    // to, valid for their lengths (the caller's contract).
                    let r = unsafe { super::array::write(&mut e, v) };
                    if r != CKR_OK {
                        rv = r;
                    }
                    (e.ulValueLen, None)
                }
                AttributeValue::Value(v) => {
                    if a.pValue.is_null() {
                        (v.len() as CK_ULONG, None)
                    } else if a.ulValueLen < v.len() as CK_ULONG {
                        rv = CKR_BUFFER_TOO_SMALL;
                        (CK_UNAVAILABLE_INFORMATION, None)
                    } else {
                        (v.len() as CK_ULONG, Some(v))
                    }
                }
            };
            // SAFETY: the caller's entry `i` and its buffer, which holds `value` (checked).
            unsafe { attrs.answer(i, len, value) };
        })?;
        if rv == CKR_OK {
            Ok(())
        } else {
            fail(rv)
        }
    }
);

ck_fn!(
    fn C_SetAttributeValue(
        session: CK_SESSION_HANDLE,
        handle: CK_OBJECT_HANDLE,
        tmpl: *mut CK_ATTRIBUTE,
        count: CK_ULONG,
    ) {
        let l = lib()?;
        // SAFETY: the caller's template (see above).
        l.0.set_attributes(session, handle, unsafe { template(tmpl, count) }?)
    }
);

ck_fn!(
    fn C_FindObjectsInit(session: CK_SESSION_HANDLE, tmpl: *mut CK_ATTRIBUTE, count: CK_ULONG) {
        let l = lib()?;
        // SAFETY: the caller's template (see above).
        l.0.find_init(session, unsafe { template_pairs(tmpl, count) }?)
    }
);

ck_fn!(
    fn C_FindObjects(
        session: CK_SESSION_HANDLE,
        handles: *mut CK_OBJECT_HANDLE,
        max: CK_ULONG,
        count: *mut CK_ULONG,
    ) {
        let l = lib()?;
        // SAFETY: the caller's output count (see above).
        let count = unsafe { out(count) }?;
        if handles.is_null() && max > 0 {
            return fail_because(CKR_ARGUMENTS_BAD, "C_FindObjects: NULL handle array");
        }
        let found = l.0.find_next(session, output_capacity::<CK_OBJECT_HANDLE>(max))?;
        assert!(
            found.len() as u64 <= max as u64,
            "find_next answered more than asked"
        );
        for (i, h) in found.iter().enumerate() {
            // SAFETY: `handles` holds `max` handles (see above) and `i` < `max` (asserted);
            // written unaligned as the caller's array may be.
            unsafe { handles.add(i).write_unaligned(*h) };
        }
        *count = found.len() as CK_ULONG;
        Ok(())
    }
);

ck_fn!(
    fn C_FindObjectsFinal(session: CK_SESSION_HANDLE) {
        lib()?.0.find_final(session)
    }
);

ck_fn!(
    fn C_GenerateKey(
        session: CK_SESSION_HANDLE,
        mech: *mut CK_MECHANISM,
        tmpl: *mut CK_ATTRIBUTE,
        count: CK_ULONG,
        key: *mut CK_OBJECT_HANDLE,
    ) {
        let l = lib()?;
        // Here and below: the session first (PKCS#11 ranks its errors above the rest), then the
        // caller's pointers and templates (CKR_ARGUMENTS_BAD), then the mechanism.
        l.0.check_session(session)?;
        // SAFETY: the caller's output handle, mechanism and template (see above).
        let (key, tmpl, m) = unsafe { (out(key)?, template(tmpl, count)?, mechanism(mech)?) };
        *key = l.0.generate_key(session, m, tmpl)?;
        Ok(())
    }
);

ck_fn!(
    fn C_GenerateKeyPair(
        session: CK_SESSION_HANDLE,
        mech: *mut CK_MECHANISM,
        pub_tmpl: *mut CK_ATTRIBUTE,
        pub_count: CK_ULONG,
        priv_tmpl: *mut CK_ATTRIBUTE,
        priv_count: CK_ULONG,
        pub_key: *mut CK_OBJECT_HANDLE,
        priv_key: *mut CK_OBJECT_HANDLE,
    ) {
        let l = lib()?;
        l.0.check_session(session)?;
        // SAFETY: the caller's output handles, mechanism and templates (see above).
        let (pub_key, priv_key, pub_tmpl, priv_tmpl, m) = unsafe {
            (
                out(pub_key)?,
                out(priv_key)?,
                template(pub_tmpl, pub_count)?,
                template(priv_tmpl, priv_count)?,
                mechanism(mech)?,
            )
        };
        let (p, s) = l.0.generate_key_pair(session, m, pub_tmpl, priv_tmpl)?;
        *pub_key = p;
        *priv_key = s;
        Ok(())
    }
);

ck_fn!(
    fn C_WrapKey(
        session: CK_SESSION_HANDLE,
        mech: *mut CK_MECHANISM,
        wrapping: CK_OBJECT_HANDLE,
        key: CK_OBJECT_HANDLE,
        wrapped: *mut CK_BYTE,
        wrapped_len: *mut CK_ULONG,
    ) {
        let l = lib()?;
        l.0.check_session(session)?;
        // SAFETY: the caller's output length and mechanism (see above).
        let (cap, m) = unsafe { (capacity(wrapped, wrapped_len)?, mechanism(mech)?) };
        let o = l.0.wrap_key(session, m, wrapping, key, cap)?;
        // SAFETY: the caller's output buffer and length (see above).
        unsafe { write_output(wrapped, wrapped_len, o) }
    }
);

ck_fn!(
    fn C_UnwrapKey(
        session: CK_SESSION_HANDLE,
        mech: *mut CK_MECHANISM,
        unwrapping: CK_OBJECT_HANDLE,
        wrapped: *mut CK_BYTE,
        wrapped_len: CK_ULONG,
        tmpl: *mut CK_ATTRIBUTE,
        count: CK_ULONG,
        key: *mut CK_OBJECT_HANDLE,
    ) {
        let l = lib()?;
        l.0.check_session(session)?;
        // SAFETY: the caller's output handle, input, mechanism and template (see above). The
        // wrapped key is copied within `slice`'s limits: unwrapping allocates its length, and
        // a key longer than any value an object holds is no key.
        let (key, wrapped, tmpl, m) = unsafe {
            (
                out(key)?,
                copied(wrapped, wrapped_len, true)?,
                template(tmpl, count)?,
                mechanism(mech)?,
            )
        };
        *key = l.0.unwrap_key(session, m, unwrapping, &wrapped, tmpl)?;
        Ok(())
    }
);

ck_fn!(
    fn C_DeriveKey(
        session: CK_SESSION_HANDLE,
        mech: *mut CK_MECHANISM,
        base: CK_OBJECT_HANDLE,
        tmpl: *mut CK_ATTRIBUTE,
        count: CK_ULONG,
        key: *mut CK_OBJECT_HANDLE,
    ) {
        let l = lib()?;
        l.0.check_session(session)?;
        // SAFETY: the caller's output handle, mechanism and template (see above).
        let (key, tmpl, m) = unsafe { (out(key)?, template(tmpl, count)?, mechanism(mech)?) };
        *key = l.0.derive_key(session, m, base, tmpl)?;
        Ok(())
    }
);
