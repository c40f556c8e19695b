//! An object's attributes as PKCS#11 defines them: type → value bytes in the native layout the
//! C API uses (`CK_ULONG` native-endian, `CK_BBOOL` one byte). Values are zeroized on drop.

use cryptoki_sys::*;
use std::collections::BTreeMap;
use zeroize::Zeroizing;

pub const ULONG_LEN: usize = std::mem::size_of::<CK_ULONG>();

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

    /// A boolean attribute; absent or malformed reads as `default`.
    pub fn bool_or(&self, t: CK_ATTRIBUTE_TYPE, default: bool) -> bool {
        match self.get(t) {
            Some([b]) => *b != 0,
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

pub fn ulong_bytes(v: CK_ULONG) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}
