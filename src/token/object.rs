//! An object as sessions see it: its handle, attributes, and the usable forms of its key
//! material, made on first use by its key type's model (`mechanism::KeyModel`) and dropped
//! with the object. Also the check a new key object's material passes
//! (`derive_key_attributes`).

use super::attributes::Attributes;
use crate::error::{fail_because, Error, Result};
use crate::mechanism::key_model::UsableKey;
use crate::mechanism::{key_model, secret_key_type, Key, KeyModel};
use cryptoki_sys::*;
use once_cell::sync::OnceCell;
use zeroize::Zeroizing;

pub struct Object {
    pub handle: CK_OBJECT_HANDLE,
    pub attrs: Attributes,
    /// The session that owns a session object; `None` for token objects.
    pub owner: Option<CK_SESSION_HANDLE>,
    /// The store version of a token object as read (`Store::update` names it); 0 for session
    /// objects.
    pub version: u64,
    private: OnceCell<UsableKey>,
    public: OnceCell<UsableKey>,
}

impl Object {
    pub fn new(handle: CK_OBJECT_HANDLE, attrs: Attributes, owner: Option<CK_SESSION_HANDLE>) -> Self {
        Object {
            handle,
            attrs,
            owner,
            version: 0,
            private: OnceCell::new(),
            public: OnceCell::new(),
        }
    }

    /// The memory this object holds once used, for the bound on the object cache: its
    /// attributes, and for keys the usable forms their model makes (`KeyModel::footprint`).
    pub fn footprint(&self) -> usize {
        const OBJECT: usize = 512;
        let attrs = self.attrs.size() * 2;
        let prepared = match (self.attrs.class(), self.model()) {
            (Some(class @ (CKO_PRIVATE_KEY | CKO_PUBLIC_KEY)), Some(m)) => m.footprint(&self.attrs, class),
            _ => 0,
        };
        OBJECT + attrs + prepared
    }

    /// The model of this key's type, if it is an asymmetric key the token has.
    fn model(&self) -> Option<&'static dyn KeyModel> {
        self.attrs.key_type().and_then(key_model)
    }

    /// The key an operation takes of this object, as `class` says (`Family::key_class`): a
    /// secret key's value, or the private or public key in its family's usable form, made
    /// once per object.
    pub fn key(&self, class: CK_OBJECT_CLASS) -> Result<Key> {
        if class == CKO_SECRET_KEY {
            return Ok(Key::Secret(Zeroizing::new(
                self.attrs.get(CKA_VALUE).unwrap_or(&[]).to_vec(),
            )));
        }
        let Some(model) = self.model() else {
            return fail_because(
                CKR_KEY_TYPE_INCONSISTENT,
                "the object is not a key the token can use",
            );
        };
        let (cell, what) = match class {
            CKO_PRIVATE_KEY => (&self.private, "private"),
            _ => (&self.public, "public"),
        };
        let key = cell
            .get_or_try_init(|| {
                let made = match class {
                    CKO_PRIVATE_KEY => model.private_key(&self.attrs),
                    _ => model.public_key(&self.attrs),
                };
                // Checked when the object was made: a key that no longer reads is a broken
                // object, not a bad argument.
                made.map_err(|e| {
                    log::error!(
                        "object {}: {} {what} key unusable (0x{:x})",
                        self.handle,
                        model.name(),
                        e.0
                    );
                    Error(CKR_KEY_HANDLE_INVALID)
                })
            })?
            .clone();
        Ok(match class {
            CKO_PRIVATE_KEY => Key::Private(key),
            _ => Key::Public(key),
        })
    }

    /// Whether `mechanism` is allowed by `CKA_ALLOWED_MECHANISMS` (empty means all).
    pub fn allows(&self, mechanism: CK_MECHANISM_TYPE) -> bool {
        match self.attrs.get(CKA_ALLOWED_MECHANISMS) {
            None | Some([]) => true,
            Some(list) => list
                .chunks_exact(std::mem::size_of::<CK_ULONG>())
                .any(|c| CK_ULONG::from_ne_bytes(c.try_into().unwrap()) == mechanism),
        }
    }
}

/// Checks the key material of a new object and fills what the token derives from it: an
/// asymmetric key's through its model (`KeyModel::complete`), a secret key's length as its
/// type allows (`SecretKeyType`) and its `CKA_VALUE_LEN` and `CKA_CHECK_VALUE`.
pub fn derive_key_attributes(a: &mut Attributes) -> Result<()> {
    match (a.class(), a.key_type()) {
        // `policy::complete_new` lets only key types with a model this far.
        (Some(class @ (CKO_PUBLIC_KEY | CKO_PRIVATE_KEY)), Some(kt)) => {
            if let Some(model) = key_model(kt) {
                model.complete(a, class)?;
            }
        }
        (Some(CKO_SECRET_KEY), Some(kt)) => {
            let value = a.get(CKA_VALUE).unwrap_or(&[]);
            let len = value.len();
            // `policy::complete_new` lets only described types this far.
            let st = secret_key_type(kt);
            if let Some(st) = st {
                st.check_len(len)?;
            }
            if len == 0 {
                return fail_because(CKR_ATTRIBUTE_VALUE_INVALID, "a secret key cannot be empty");
            }
            if a.ulong(CKA_VALUE_LEN).is_some_and(|l| l as usize != len) {
                return fail_because(
                    CKR_TEMPLATE_INCONSISTENT,
                    "CKA_VALUE_LEN does not match CKA_VALUE",
                );
            }
            let check = st.map_or_else(Vec::new, |st| st.check_value(value));
            a.set_ulong(CKA_VALUE_LEN, len as CK_ULONG);
            a.set(CKA_CHECK_VALUE, check);
        }
        _ => {}
    }
    Ok(())
}
