//! An object's attributes as PKCS#11 defines them: type → value bytes in the native layout the
//! C API uses (`CK_ULONG` native-endian, `CK_BBOOL` one byte). Values are zeroized on drop.
//! Also the one place an application's template is parsed: `Template::parse` checks every
//! value against its attribute's shape, so no other code ever sees a `CK_BBOOL` of 2.
//! A room of its own because two rooms read and fill objects' attributes: `token` (objects and
//! their policy) and `mechanism` (each family's key model, `mechanism::KeyModel`).

use crate::error::{fail_because, Result};
use cryptoki_sys::*;
use std::collections::BTreeMap;
use zeroize::Zeroizing;

pub const ULONG_LEN: usize = std::mem::size_of::<CK_ULONG>();

/// Vendor attribute (`include/ferrohsm.h`, `FERROHSM_CKA_USAGE_COUNT`): the uses of a key
/// counted against its `CKA_USAGE_LIMIT`, read-only ("ucnt"; `token::usage`).
pub const CKA_USAGE_COUNT: CK_ATTRIBUTE_TYPE = CKA_VENDOR_DEFINED | 0x7563_6e74;
/// Vendor attribute (`FERROHSM_CKA_USAGE_LIMIT`): the uses a key allows, set once and then
/// only lowered ("ulim"; `token::policy::check_usage_limit`).
pub const CKA_USAGE_LIMIT: CK_ATTRIBUTE_TYPE = CKA_VENDOR_DEFINED | 0x756c_696d;

#[derive(Clone, Default, PartialEq, Eq)]
pub struct Attributes(BTreeMap<CK_ATTRIBUTE_TYPE, Zeroizing<Vec<u8>>>);

impl Attributes {
    pub fn new() -> Self {
        Attributes(BTreeMap::new())
    }

    pub fn from_pairs(pairs: impl IntoIterator<Item = (CK_ATTRIBUTE_TYPE, Vec<u8>)>) -> Self {
        let mut a = Attributes::new();
        for (t, v) in pairs {
            a.set(t, v);
        }
        a
    }

    pub fn get(&self, t: CK_ATTRIBUTE_TYPE) -> Option<&[u8]> {
        self.0.get(&t).map(|v| v.as_slice())
    }

    pub fn contains(&self, t: CK_ATTRIBUTE_TYPE) -> bool {
        self.0.contains_key(&t)
    }

    pub fn set(&mut self, t: CK_ATTRIBUTE_TYPE, v: Vec<u8>) {
        self.0.insert(t, Zeroizing::new(v));
    }

    /// Like `set`, for a value that is already zeroizing (no copy left behind).
    pub fn set_zeroizing(&mut self, t: CK_ATTRIBUTE_TYPE, v: Zeroizing<Vec<u8>>) {
        self.0.insert(t, v);
    }

    pub fn set_bool(&mut self, t: CK_ATTRIBUTE_TYPE, v: bool) {
        self.set(t, vec![v as u8]);
    }

    pub fn set_ulong(&mut self, t: CK_ATTRIBUTE_TYPE, v: CK_ULONG) {
        self.set(t, v.to_ne_bytes().to_vec());
    }

    pub fn set_default(&mut self, t: CK_ATTRIBUTE_TYPE, v: Vec<u8>) {
        self.0.entry(t).or_insert_with(|| Zeroizing::new(v));
    }

    pub fn remove(&mut self, t: CK_ATTRIBUTE_TYPE) -> Option<Zeroizing<Vec<u8>>> {
        self.0.remove(&t)
    }

    /// A boolean attribute; absent reads as `default`. Values are 0 or 1 (`Template::parse`
    /// and the store refuse anything else); should another byte ever appear, it reads as
    /// `default`, never as true.
    pub fn bool_or(&self, t: CK_ATTRIBUTE_TYPE, default: bool) -> bool {
        match self.get(t) {
            Some([0]) => false,
            Some([1]) => true,
            _ => default,
        }
    }

    pub fn ulong(&self, t: CK_ATTRIBUTE_TYPE) -> Option<CK_ULONG> {
        self.get(t)
            .and_then(|v| v.try_into().ok())
            .map(CK_ULONG::from_ne_bytes)
    }

    pub fn class(&self) -> Option<CK_OBJECT_CLASS> {
        self.ulong(CKA_CLASS)
    }

    pub fn key_type(&self) -> Option<CK_KEY_TYPE> {
        self.ulong(CKA_KEY_TYPE)
    }

    pub fn is_token(&self) -> bool {
        self.bool_or(CKA_TOKEN, false)
    }

    pub fn is_private(&self) -> bool {
        self.bool_or(CKA_PRIVATE, false)
    }

    pub fn iter(&self) -> impl Iterator<Item = (CK_ATTRIBUTE_TYPE, &[u8])> {
        self.0.iter().map(|(t, v)| (*t, v.as_slice()))
    }

    /// Whether every (type, value) of `template` is present with an equal value.
    pub fn matches(&self, template: &[(CK_ATTRIBUTE_TYPE, Vec<u8>)]) -> bool {
        template
            .iter()
            .all(|(t, v)| self.get(*t).is_some_and(|mine| mine == v.as_slice()))
    }

    /// Approximate storage size, for `C_GetObjectSize`.
    pub fn size(&self) -> usize {
        self.0.values().map(|v| v.len() + 2 * ULONG_LEN).sum()
    }

    /// Compact serialisation for the store: (type u64, len u32, value)*, little endian.
    pub fn to_bytes(&self) -> Zeroizing<Vec<u8>> {
        let mut out = Zeroizing::new(Vec::with_capacity(self.size()));
        for (t, v) in self.iter() {
            out.extend_from_slice(&t.to_le_bytes());
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
        }
        out
    }

    pub fn from_bytes(mut b: &[u8]) -> Option<Self> {
        let mut a = Attributes::new();
        while !b.is_empty() {
            if b.len() < 12 {
                return None;
            }
            let t = u64::from_le_bytes(b[..8].try_into().ok()?) as CK_ATTRIBUTE_TYPE;
            let len = u32::from_le_bytes(b[8..12].try_into().ok()?) as usize;
            let v = b.get(12..12 + len)?;
            a.set(t, v.to_vec());
            b = &b[12 + len..];
        }
        Some(a)
    }
}

/// The shape of an attribute's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `CK_BBOOL`: exactly one byte, 0 or 1.
    Bool,
    /// `CK_ULONG` and the types defined as one (`CK_OBJECT_CLASS`, `CK_KEY_TYPE`, ...).
    Ulong,
    /// An array of `CK_MECHANISM_TYPE`.
    Mechanisms,
    /// An attribute array (`CKF_ARRAY_ATTRIBUTE`): held as the `to_bytes` encoding of the
    /// nested attributes, which the C boundary converts to and from `CK_ATTRIBUTE` arrays.
    Template,
    Bytes,
}

pub fn kind(t: CK_ATTRIBUTE_TYPE) -> Kind {
    match t {
        CKA_TOKEN
        | CKA_PRIVATE
        | CKA_MODIFIABLE
        | CKA_COPYABLE
        | CKA_DESTROYABLE
        | CKA_DERIVE
        | CKA_LOCAL
        | CKA_ENCRYPT
        | CKA_DECRYPT
        | CKA_SIGN
        | CKA_VERIFY
        | CKA_SIGN_RECOVER
        | CKA_VERIFY_RECOVER
        | CKA_WRAP
        | CKA_UNWRAP
        | CKA_TRUSTED
        | CKA_SENSITIVE
        | CKA_EXTRACTABLE
        | CKA_ALWAYS_SENSITIVE
        | CKA_NEVER_EXTRACTABLE
        | CKA_WRAP_WITH_TRUSTED
        | CKA_ALWAYS_AUTHENTICATE => Kind::Bool,
        CKA_CLASS
        | CKA_KEY_TYPE
        | CKA_CERTIFICATE_TYPE
        | CKA_CERTIFICATE_CATEGORY
        | CKA_MODULUS_BITS
        | CKA_VALUE_LEN
        | CKA_KEY_GEN_MECHANISM
        | CKA_JAVA_MIDP_SECURITY_DOMAIN
        | CKA_NAME_HASH_ALGORITHM
        | CKA_PARAMETER_SET
        | CKA_USAGE_COUNT
        | CKA_USAGE_LIMIT => Kind::Ulong,
        CKA_ALLOWED_MECHANISMS => Kind::Mechanisms,
        CKA_WRAP_TEMPLATE | CKA_UNWRAP_TEMPLATE | CKA_DERIVE_TEMPLATE => Kind::Template,
        _ => Kind::Bytes,
    }
}

/// Whether `v` is a well-formed value of attribute `t`; `nested` for a value inside an
/// attribute array, where arrays may not nest again.
fn well_formed(t: CK_ATTRIBUTE_TYPE, v: &[u8], nested: bool) -> bool {
    match kind(t) {
        Kind::Bool => v == [0] || v == [1],
        Kind::Ulong => v.len() == ULONG_LEN,
        Kind::Mechanisms => v.len().is_multiple_of(ULONG_LEN),
        Kind::Template => {
            !nested
                && Attributes::from_bytes(v)
                    .is_some_and(|inner| inner.iter().all(|(t, v)| well_formed(t, v, true)))
        }
        Kind::Bytes => true,
    }
}

/// An application's template, every value checked against its attribute's shape. The token
/// functions that create or change objects take only this type, so a value no rule was
/// written for (a `CK_BBOOL` of 2, read as true by one check and as "not 1" by another) cannot
/// reach them.
#[derive(Clone, Default)]
pub struct Template(Attributes);

impl Template {
    /// Checks and collects `(type, value)` pairs in the caller's order: a malformed value is
    /// `CKR_ATTRIBUTE_VALUE_INVALID`, an attribute given twice with different values
    /// `CKR_TEMPLATE_INCONSISTENT`.
    pub fn parse(pairs: impl IntoIterator<Item = (CK_ATTRIBUTE_TYPE, Vec<u8>)>) -> Result<Template> {
        let mut a = Attributes::new();
        for (t, v) in pairs {
            if !well_formed(t, &v, false) {
                return fail_because(
                    CKR_ATTRIBUTE_VALUE_INVALID,
                    format!(
                        "attribute 0x{t:x}: a value of {} bytes is not a valid {:?} (a CK_BBOOL is one byte, 0 or 1; a CK_ULONG {ULONG_LEN} bytes)",
                        v.len(),
                        kind(t)
                    ),
                );
            }
            if a.get(t).is_some_and(|old| old != v.as_slice()) {
                return fail_because(
                    CKR_TEMPLATE_INCONSISTENT,
                    format!("attribute 0x{t:x} given twice with different values"),
                );
            }
            a.set(t, v);
        }
        Ok(Template(a))
    }

    pub fn attrs(&self) -> &Attributes {
        &self.0
    }

    pub fn into_attributes(self) -> Attributes {
        self.0
    }
}

pub fn ulong_bytes(v: CK_ULONG) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}
