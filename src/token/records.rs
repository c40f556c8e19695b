//! How token objects are handed to the store: which attributes are secret (policy, decided
//! here and nowhere in `store/`), which index values a search can use, and the way back from
//! the store's fields to attributes.

use super::attributes::Attributes;
use super::policy;
use crate::store::{Fields, Index, ObjectRecord, StoredObject, PRIVATE_CLEAR};
use cryptoki_sys::*;
use zeroize::Zeroizing;

/// Stored in clear even on private objects: what a search without a login must see to leave
/// the object out, and nothing an attacker could learn from (the store's `PRIVATE_CLEAR`,
/// which it holds private records to).
fn always_clear(t: CK_ATTRIBUTE_TYPE) -> bool {
    PRIVATE_CLEAR.contains(&t)
}

/// Sealed even on public objects: key material, as if the object were sensitive (a public
/// object's key material is never revealed by a copy of the store either).
fn is_secret(attrs: &Attributes, t: CK_ATTRIBUTE_TYPE) -> bool {
    let mut probe = attrs.clone();
    probe.set_bool(CKA_SENSITIVE, true);
    policy::is_hidden(&probe, t)
}

/// The record of a token object: a private object keeps only `always_clear` attributes in
/// clear; a public one seals its key material.
pub fn split(attrs: &Attributes) -> ObjectRecord {
    let private = attrs.is_private();
    let mut clear = Fields::new();
    let mut secret = Fields::new();
    for (t, v) in attrs.iter() {
        let hide = if private {
            !always_clear(t)
        } else {
            is_secret(attrs, t)
        };
        let field = (t, Zeroizing::new(v.to_vec()));
        if hide {
            secret.push(field);
        } else {
            clear.push(field);
        }
    }
    ObjectRecord {
        private,
        clear,
        secret,
        index: Index {
            class: attrs.class(),
            id: attrs.get(CKA_ID).map(<[u8]>::to_vec),
            label: attrs.get(CKA_LABEL).map(<[u8]>::to_vec),
        },
    }
}

/// The index values a template names; the store narrows the search with them and the caller
/// checks the whole template on what comes back.
pub fn query(template: &[(CK_ATTRIBUTE_TYPE, Vec<u8>)]) -> Index {
    let get = |t: CK_ATTRIBUTE_TYPE| template.iter().find(|(x, _)| *x == t).map(|(_, v)| v.clone());
    Index {
        class: get(CKA_CLASS)
            .and_then(|v| v.try_into().ok())
            .map(CK_ULONG::from_ne_bytes),
        id: get(CKA_ID),
        label: get(CKA_LABEL),
    }
}

/// The attributes of a stored object. An object whose record was not authenticated (read
/// without a login, or written without one) grants no right: `CKA_TRUSTED` reads false on
/// it, so it is never a trusted wrapping key, whatever its record says. Such an object is
/// what anyone could have made through a session without a login.
pub fn attributes(object: StoredObject) -> Attributes {
    let mut a = Attributes::new();
    for (t, v) in object.fields {
        a.set_zeroizing(t, v);
    }
    if !object.authenticated && a.bool_or(CKA_TRUSTED, false) {
        a.set_bool(CKA_TRUSTED, false);
    }
    a
}
