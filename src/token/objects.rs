//! Object functions of the library: create, copy, destroy, read and change attributes, search,
//! and key generation. Enforces who may see and change what.

use super::attributes::{Attributes, Template};
use super::library::Library;
use super::object::{derive_key_attributes, Object};
use super::operation::FindOp;
use super::policy::{self, Change, Origin};
use super::session::Session;
use super::slot::LoginState;
use crate::error::{fail, fail_because, Error, Result};
use crate::mechanism::{key_model, secret_key_type, Generates, Mechanism};
use crate::store::audit::{
    event,
    intent::{during, Intent},
};
use cryptoki_sys::*;
use std::sync::Arc;

/// One attribute's answer in `C_GetAttributeValue`.
pub enum AttributeValue<'a> {
    Value(&'a [u8]),
    Sensitive,
    Invalid,
}

impl Library {
    /// Checks that `session` may create or change an object with these attributes.
    fn check_write(session: &Session, attrs: &Attributes) -> Result<()> {
        if attrs.is_token() && !session.rw {
            return fail(CKR_SESSION_READ_ONLY);
        }
        if attrs.is_private() && session.token.login_state() != LoginState::User {
            return fail_because(CKR_USER_NOT_LOGGED_IN, "private objects need a user login");
        }
        Ok(())
    }

    /// Stores completed new objects and returns their handles; the token objects among them
    /// are written in one transaction.
    fn add_objects(&self, session: &Session, objects: Vec<Attributes>) -> Result<Vec<CK_OBJECT_HANDLE>> {
        self.add_objects_from(session, objects, None)
    }

    /// `add_objects`, for a copy: the token objects are stored only if `source` is still as
    /// it was read.
    fn add_objects_from(
        &self,
        session: &Session,
        mut objects: Vec<Attributes>,
        source: Option<&Object>,
    ) -> Result<Vec<CK_OBJECT_HANDLE>> {
        if session.closed {
            return fail_because(CKR_SESSION_CLOSED, "the session was closed while the call ran");
        }
        for attrs in &mut objects {
            policy::check_invariants(attrs)?;
            Self::check_write(session, attrs)?;
            let mut uid = [0u8; 16];
            getrandom::fill(&mut uid).map_err(|_| Error(CKR_FUNCTION_FAILED))?;
            let uid: String = uid.iter().map(|b| format!("{b:02x}")).collect();
            attrs.set(CKA_UNIQUE_ID, uid.into_bytes());
        }
        let token_objects: Vec<&Attributes> = objects.iter().filter(|a| a.is_token()).collect();
        let stored = if token_objects.is_empty() {
            vec![]
        } else {
            session.token.store_objects(&token_objects, source)?
        };
        let mut stored = stored.into_iter();
        let mut handles = Vec::with_capacity(objects.len());
        for attrs in objects {
            if attrs.is_token() {
                handles.push(stored.next().expect("one id per token object"));
            } else {
                let handle = self.new_session_object_handle();
                let obj = Arc::new(Object::new(handle, attrs, Some(session.handle)));
                session.token.session_objects.insert(handle, obj);
                handles.push(handle);
            }
        }
        Ok(handles)
    }

    fn add_object(&self, session: &Session, attrs: Attributes) -> Result<CK_OBJECT_HANDLE> {
        Ok(self.add_objects(session, vec![attrs])?[0])
    }

    fn new_object(
        &self,
        session: &Session,
        template: Attributes,
        origin: Origin,
    ) -> Result<CK_OBJECT_HANDLE> {
        let so = session.token.login_state() == LoginState::So;
        let mut attrs = policy::complete_new(template, origin, so)?;
        derive_key_attributes(&mut attrs)?;
        self.add_object(session, attrs)
    }

    pub fn create_object(&self, h: CK_SESSION_HANDLE, template: Template) -> Result<CK_OBJECT_HANDLE> {
        let session = self.session(h)?;
        let s = session.lock();
        self.new_object(&s, template.into_attributes(), Origin::Created)
    }

    pub fn copy_object(
        &self,
        h: CK_SESSION_HANDLE,
        handle: CK_OBJECT_HANDLE,
        template: Template,
    ) -> Result<CK_OBJECT_HANDLE> {
        let session = self.session(h)?;
        let s = session.lock();
        // The source is read, checked and copied only as it still is in the store.
        s.token.until_unchanged(|| {
            let obj = s.token.object(handle)?;
            let so = s.token.login_state() == LoginState::So;
            let attrs = policy::copy_attributes(&obj.attrs, template.attrs(), so)?;
            during(Intent::new(event::COPY_OBJECT), || {
                Ok(self.add_objects_from(&s, vec![attrs], Some(&obj))?[0])
            })
        })
    }

    pub fn destroy_object(&self, h: CK_SESSION_HANDLE, handle: CK_OBJECT_HANDLE) -> Result<()> {
        let session = self.session(h)?;
        let s = session.lock();
        let _writes = s.token.object_writes.lock();
        s.token.until_unchanged(|| {
            let obj = s.token.object(handle)?;
            if obj.attrs.is_token() && !s.rw {
                return fail(CKR_SESSION_READ_ONLY);
            }
            if !obj.attrs.bool_or(CKA_DESTROYABLE, true) {
                return fail_because(CKR_ACTION_PROHIBITED, "the object has CKA_DESTROYABLE false");
            }
            let intent = Intent {
                label: obj.attrs.get(CKA_LABEL).map(<[u8]>::to_vec),
                ..Intent::new(event::DESTROY_OBJECT)
            };
            during(intent, || s.token.destroy_object(&obj))
        })
    }

    pub fn object(&self, h: CK_SESSION_HANDLE, handle: CK_OBJECT_HANDLE) -> Result<Arc<Object>> {
        let session = self.session(h)?;
        let token = session.lock().token.clone();
        token.object(handle)
    }

    pub fn object_size(&self, h: CK_SESSION_HANDLE, handle: CK_OBJECT_HANDLE) -> Result<usize> {
        Ok(self.object(h, handle)?.attrs.size())
    }

    pub fn set_attributes(
        &self,
        h: CK_SESSION_HANDLE,
        handle: CK_OBJECT_HANDLE,
        template: Template,
    ) -> Result<()> {
        let session = self.session(h)?;
        let s = session.lock();
        // The object is read, checked and written back under the token's write lock (other
        // threads of this process), and only over the version read (other processes and
        // hosts): a change made meanwhile is read and checked again, never written over.
        let _writes = s.token.object_writes.lock();
        s.token.until_unchanged(|| {
            let obj = s.token.object(handle)?;
            if obj.attrs.is_token() && !s.rw {
                return fail(CKR_SESSION_READ_ONLY);
            }
            if !obj.attrs.bool_or(CKA_MODIFIABLE, true) {
                return fail_because(CKR_ACTION_PROHIBITED, "the object has CKA_MODIFIABLE false");
            }
            let so = s.token.login_state() == LoginState::So;
            let mut attrs = obj.attrs.clone();
            for (t, v) in template.attrs().iter() {
                policy::check_change(&obj.attrs, t, v, Change::Set, so)?;
                attrs.set(t, v.to_vec());
            }
            policy::check_invariants(&attrs)?;
            let intent = Intent {
                attributes: template.attrs().iter().map(|(t, _)| t).collect(),
                ..Intent::new(event::SET_ATTRIBUTE)
            };
            during(intent, || s.token.update_object(&obj, attrs))
        })
    }

    pub fn find_init(&self, h: CK_SESSION_HANDLE, template: Vec<(CK_ATTRIBUTE_TYPE, Vec<u8>)>) -> Result<()> {
        let session = self.session(h)?;
        let mut s = session.lock();
        if s.find.is_some() {
            return fail(CKR_OPERATION_ACTIVE);
        }
        let (results, generation) = s.token.find(&template)?;
        s.find = Some(FindOp {
            results,
            pos: 0,
            generation,
        });
        Ok(())
    }

    pub fn find_next(&self, h: CK_SESSION_HANDLE, max: usize) -> Result<Vec<CK_OBJECT_HANDLE>> {
        let session = self.session(h)?;
        let mut s = session.lock();
        let token = s.token.clone();
        let op = s.find.as_mut().ok_or(Error(CKR_OPERATION_NOT_INITIALIZED))?;
        let mut out = Vec::new();
        while out.len() < max && op.pos < op.results.len() {
            let end = (op.pos + max - out.len()).min(op.results.len());
            let batch = &op.results[op.pos..end];
            op.pos = end;
            // Objects this process destroyed since the search began are skipped.
            out.extend(token.still_visible(batch, op.generation));
        }
        Ok(out)
    }

    pub fn find_final(&self, h: CK_SESSION_HANDLE) -> Result<()> {
        let session = self.session(h)?;
        let mut s = session.lock();
        s.find
            .take()
            .map(|_| ())
            .ok_or(Error(CKR_OPERATION_NOT_INITIALIZED))
    }

    /// `C_GenerateKeyPair`: the family says which key type its mechanism makes, and that
    /// type's model reads the templates' parameters and makes the pair
    /// (`KeyModel::check_generation`, `generate`); both templates pass the policy before the
    /// key is made, and the pair is stored whole or not at all.
    pub fn generate_key_pair(
        &self,
        h: CK_SESSION_HANDLE,
        mech: &Mechanism,
        public: Template,
        private: Template,
    ) -> Result<(CK_OBJECT_HANDLE, CK_OBJECT_HANDLE)> {
        let model = match mech.family().generates(mech) {
            Some(Generates::KeyPair(kt)) => key_model(kt).ok_or(Error(CKR_MECHANISM_INVALID))?,
            _ => return fail(CKR_MECHANISM_INVALID),
        };
        let session = self.session(h)?;
        let s = session.lock();
        let mut public = with_class(public, CKO_PUBLIC_KEY, model.key_type())?;
        let mut private = with_class(private, CKO_PRIVATE_KEY, model.key_type())?;
        model.check_generation(&mut public, &mut private)?;
        // Both templates are checked before seconds are spent on the key.
        let origin = Origin::Generated(mech.mechanism_type());
        let so = s.token.login_state() == LoginState::So;
        for (t, class) in [(&public, CKO_PUBLIC_KEY), (&private, CKO_PRIVATE_KEY)] {
            Self::check_write(&s, &policy::preview_new(t, class, so)?)?;
        }
        model.generate(&mut public, &mut private)?;
        let mut public = policy::complete_new(public, origin, so)?;
        let mut private = policy::complete_new(private, origin, so)?;
        derive_key_attributes(&mut public)?;
        derive_key_attributes(&mut private)?;
        let intent = Intent::new(event::GENERATE_KEY_PAIR).mechanism(mech.mechanism_type());
        let handles = during(intent, || self.add_objects(&s, vec![public, private]))?;
        Ok((handles[0], handles[1]))
    }

    pub fn generate_key(
        &self,
        h: CK_SESSION_HANDLE,
        mech: &Mechanism,
        template: Template,
    ) -> Result<CK_OBJECT_HANDLE> {
        let described = match mech.family().generates(mech) {
            Some(Generates::SecretKey(kt)) => secret_key_type(kt).ok_or(Error(CKR_MECHANISM_INVALID))?,
            _ => return fail(CKR_MECHANISM_INVALID),
        };
        let session = self.session(h)?;
        let s = session.lock();
        let mut t = with_class(template, CKO_SECRET_KEY, described.key_type)?;
        let so = s.token.login_state() == LoginState::So;
        Self::check_write(&s, &policy::preview_new(&t, CKO_SECRET_KEY, so)?)?;
        let len = match t.remove(CKA_VALUE_LEN) {
            Some(v) if v.len() == std::mem::size_of::<CK_ULONG>() => {
                CK_ULONG::from_ne_bytes(v.as_slice().try_into().unwrap()) as usize
            }
            Some(_) => return fail(CKR_ATTRIBUTE_VALUE_INVALID),
            None => return fail_because(CKR_TEMPLATE_INCOMPLETE, "CKA_VALUE_LEN is required"),
        };
        described.check_generated_len(len)?;
        if t.contains(CKA_VALUE) {
            return fail(CKR_TEMPLATE_INCONSISTENT);
        }
        let mut value = zeroize::Zeroizing::new(vec![0u8; len]);
        getrandom::fill(&mut value).map_err(|_| Error(CKR_FUNCTION_FAILED))?;
        t.set(CKA_VALUE, value.to_vec());
        let origin = Origin::Generated(mech.mechanism_type());
        let intent = Intent::new(event::GENERATE_KEY).mechanism(mech.mechanism_type());
        during(intent, || self.new_object(&s, t, origin))
    }

    /// Stores an unwrapped or derived secret key: `template` plus its value, with `CKA_LOCAL`
    /// false.
    pub(super) fn add_secret(
        &self,
        s: &Session,
        template: Template,
        value: Vec<u8>,
        origin: Origin,
    ) -> Result<CK_OBJECT_HANDLE> {
        let class = template.attrs().class().unwrap_or(CKO_SECRET_KEY);
        if class != CKO_SECRET_KEY {
            return fail_because(CKR_TEMPLATE_INCONSISTENT, "only secret keys can be unwrapped");
        }
        let mut t = template.into_attributes();
        t.set_ulong(CKA_CLASS, CKO_SECRET_KEY);
        if t.remove(CKA_VALUE_LEN)
            .is_some_and(|v| v.as_slice() != (value.len() as CK_ULONG).to_ne_bytes())
        {
            return fail(CKR_TEMPLATE_INCONSISTENT);
        }
        t.set(CKA_VALUE, value);
        self.new_object(s, t, origin)
    }
}

impl Library {
    /// Stores an unwrapped private key: `template` (class `CKO_PRIVATE_KEY`) plus the key
    /// material of the PKCS#8 `der`. The template's `CKA_KEY_TYPE`, and any key material it
    /// names, must agree with what is inside; the object then goes through the checks of
    /// `C_CreateObject` (RSA CRT consistency, EC scalar in range), with `CKA_LOCAL`,
    /// `CKA_ALWAYS_SENSITIVE` and `CKA_NEVER_EXTRACTABLE` false (`Origin::Unwrapped`).
    pub(super) fn add_unwrapped_private(
        &self,
        s: &Session,
        template: Template,
        der: &[u8],
    ) -> Result<CK_OBJECT_HANDLE> {
        let key = super::pkcs8::decode(der)?;
        // The key alone first, through the checks C_CreateObject runs: a key that fails them
        // is a bad wrapped key (CKR_WRAPPED_KEY_INVALID), not a bad template.
        let mut probe = Attributes::new();
        probe.set_ulong(CKA_CLASS, CKO_PRIVATE_KEY);
        probe.set_ulong(CKA_KEY_TYPE, key.key_type);
        for (a, v) in &key.attrs {
            probe.set_zeroizing(*a, v.clone());
        }
        derive_key_attributes(&mut probe).map_err(|e| {
            // A sound key of a size the token does not take: C_CreateObject's code.
            if e.0 == CKR_KEY_SIZE_RANGE {
                return e;
            }
            log::info!(
                "CKR_WRAPPED_KEY_INVALID: the unwrapped private key fails its checks (0x{:x})",
                e.0
            );
            Error(CKR_WRAPPED_KEY_INVALID)
        })?;
        drop(probe);
        let mut t = template.into_attributes();
        if let Some(kt) = t.key_type().filter(|kt| *kt != key.key_type) {
            return fail_because(
                CKR_TEMPLATE_INCONSISTENT,
                format!(
                    "the template's CKA_KEY_TYPE 0x{kt:x} is not the wrapped key's 0x{:x}",
                    key.key_type
                ),
            );
        }
        t.set_ulong(CKA_KEY_TYPE, key.key_type);
        for (a, v) in key.attrs {
            if t.get(a).is_some_and(|mine| mine != v.as_slice()) {
                return fail_because(
                    CKR_TEMPLATE_INCONSISTENT,
                    format!("the template's attribute 0x{a:x} differs from the wrapped key's"),
                );
            }
            t.set_zeroizing(a, v);
        }
        self.new_object(s, t, Origin::Unwrapped)
    }
}

/// Adds `CKA_CLASS`/`CKA_KEY_TYPE` when the template leaves them out (Knot does); refuses
/// a template that names others.
fn with_class(t: Template, class: CK_OBJECT_CLASS, key_type: CK_KEY_TYPE) -> Result<Attributes> {
    let mut t = t.into_attributes();
    if t.class().is_some_and(|c| c != class) || t.key_type().is_some_and(|k| k != key_type) {
        return fail_because(
            CKR_TEMPLATE_INCONSISTENT,
            "CKA_CLASS or CKA_KEY_TYPE does not match the mechanism",
        );
    }
    t.set_ulong(CKA_CLASS, class);
    t.set_ulong(CKA_KEY_TYPE, key_type);
    Ok(t)
}

/// What `C_GetAttributeValue` may reveal of `t`.
pub fn attribute_value(obj: &Object, t: CK_ATTRIBUTE_TYPE) -> AttributeValue<'_> {
    if policy::is_hidden(&obj.attrs, t) {
        return AttributeValue::Sensitive;
    }
    match obj.attrs.get(t) {
        Some(v) => AttributeValue::Value(v),
        None => AttributeValue::Invalid,
    }
}
