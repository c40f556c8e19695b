//! Object management (PKCS#11 §5.7) and key management (§5.14).

use super::convert::{
    attribute_list_mut, bytes, capacity, mechanism, out, template, template_pairs, write_output,
};
use super::lib;
use crate::error::{fail, Error};
use crate::token::objects::{attribute_value, AttributeValue};
use cryptoki_sys::*;

ck_fn!(
    fn C_CreateObject(
        session: CK_SESSION_HANDLE,
        tmpl: *mut CK_ATTRIBUTE,
        count: CK_ULONG,
        object: *mut CK_OBJECT_HANDLE,
    ) {
        let l = lib()?;
        let object = out(object)?;
        *object = l.0.create_object(session, template(tmpl, count)?)?;
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
        let object = out(object)?;
        *object = l.0.copy_object(session, handle, template(tmpl, count)?)?;
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
        let size = out(size)?;
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
        let attrs = attribute_list_mut(tmpl, count)?;
        let obj = l.0.object(session, handle)?;
        // Every attribute gets its answer; the call reports the last problem met (§5.7).
        let mut rv = CKR_OK;
        for a in attrs.iter_mut() {
            match attribute_value(&obj, a.type_) {
                AttributeValue::Sensitive => {
                    a.ulValueLen = CK_UNAVAILABLE_INFORMATION;
                    rv = CKR_ATTRIBUTE_SENSITIVE;
                }
                AttributeValue::Invalid => {
                    a.ulValueLen = CK_UNAVAILABLE_INFORMATION;
                    rv = CKR_ATTRIBUTE_TYPE_INVALID;
                }
                AttributeValue::Value(v) if super::array::is_array(a.type_) => {
                    let r = super::array::write(a, v);
                    if r != CKR_OK {
                        rv = r;
                    }
                }
                AttributeValue::Value(v) => {
                    if a.pValue.is_null() {
                        a.ulValueLen = v.len() as CK_ULONG;
                    } else if (a.ulValueLen as usize) < v.len() {
                        a.ulValueLen = CK_UNAVAILABLE_INFORMATION;
                        rv = CKR_BUFFER_TOO_SMALL;
                    } else {
                        std::ptr::copy_nonoverlapping(v.as_ptr(), a.pValue as *mut u8, v.len());
                        a.ulValueLen = v.len() as CK_ULONG;
                    }
                }
            }
        }
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
        l.0.set_attributes(session, handle, template(tmpl, count)?)
    }
);

ck_fn!(
    fn C_FindObjectsInit(session: CK_SESSION_HANDLE, tmpl: *mut CK_ATTRIBUTE, count: CK_ULONG) {
        let l = lib()?;
        l.0.find_init(session, template_pairs(tmpl, count)?)
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
        let count = out(count)?;
        if handles.is_null() && max > 0 {
            return fail(CKR_ARGUMENTS_BAD);
        }
        let found = l.0.find_next(session, max as usize)?;
        if !found.is_empty() {
            std::ptr::copy_nonoverlapping(found.as_ptr(), handles, found.len());
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
        let key = out(key)?;
        let m = mechanism(mech)?;
        *key = l.0.generate_key(session, &m, template(tmpl, count)?)?;
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
        let pub_key = out(pub_key)?;
        let priv_key = out(priv_key)?;
        let m = mechanism(mech)?;
        let (p, s) = l.0.generate_key_pair(
            session,
            &m,
            template(pub_tmpl, pub_count)?,
            template(priv_tmpl, priv_count)?,
        )?;
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
        let cap = capacity(wrapped, wrapped_len)?;
        let m = mechanism(mech)?;
        let o = l.0.wrap_key(session, m, wrapping, key, cap)?;
        write_output(wrapped, wrapped_len, o)
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
        let key = out(key)?;
        if wrapped.is_null() {
            return Err(Error(CKR_ARGUMENTS_BAD));
        }
        let m = mechanism(mech)?;
        *key = l.0.unwrap_key(
            session,
            m,
            unwrapping,
            bytes(wrapped, wrapped_len)?,
            template(tmpl, count)?,
        )?;
        Ok(())
    }
);
