//! Attribute policy, written once: which attributes each kind of object has, their defaults,
//! which are sensitive, who may set which at creation (`complete_new`), which may change later
//! and which way (`ONE_WAY`, `check_change`, for set and copy alike; `copy_attributes` for the
//! rest of a copy), what every stored object satisfies (`check_invariants`), what wrapping,
//! unwrapping and deriving keys allow (`check_wrap`, `check_unwrap`, `unwrap_template`,
//! `derive_template`), what a search may compare (`search_matches`), and the usage limit's
//! rule (`check_usage_limit`). Template values arrive already shape-checked
//! (`Template::parse`). An asymmetric key's own attributes (its key material, which of it is
//! required and which secret) come from its key type's model (`mechanism::KeyModel`), a
//! secret key's lengths from its type's description (`mechanism::SecretKeyType`); every rule
//! here applies to them whatever the type.
//!
//! The trusted-key rules close the key-separation attacks on `CKA_WRAP_WITH_TRUSTED` keys: a
//! trusted secret key can wrap them, so it may never decrypt (`check_invariants`), never stop
//! being trusted, never be copied outside an SO session, what it unwraps comes out sensitive
//! and wrap-with-trusted again (`unwrap_template`), and it unwraps only with mechanisms whose
//! failures reveal nothing (`check_unwrap`): no chain of wrap, decrypt, unwrap and copy brings
//! such a key out in the clear. Every key that may not decrypt unwraps under the same two
//! rules, so that unwrapping is no way to decrypt with it either.

use super::attributes::{ulong_bytes, Attributes, Template, CKA_USAGE_COUNT, CKA_USAGE_LIMIT, ULONG_LEN};
use crate::error::{fail_because, Result};
use crate::mechanism::{key_model, key_models, secret_key_type};
use cryptoki_sys::*;

/// How an object came to exist; decides `CKA_LOCAL`, `CKA_ALWAYS_SENSITIVE`, ... .
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Created,
    Generated(CK_MECHANISM_TYPE),
    Unwrapped,
    /// `C_DeriveKey`, with the base key's `CKA_ALWAYS_SENSITIVE` and `CKA_NEVER_EXTRACTABLE`:
    /// PKCS#11 3.0 §5.18.5 carries them over (true only if the base's is and the new key is
    /// sensitive / not extractable).
    Derived {
        always_sensitive: bool,
        never_extractable: bool,
    },
}

const COMMON: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_CLASS,
    CKA_TOKEN,
    CKA_PRIVATE,
    CKA_MODIFIABLE,
    CKA_LABEL,
    CKA_COPYABLE,
    CKA_DESTROYABLE,
    CKA_UNIQUE_ID,
];
const KEY: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_KEY_TYPE,
    CKA_ID,
    CKA_START_DATE,
    CKA_END_DATE,
    CKA_DERIVE,
    CKA_LOCAL,
    CKA_KEY_GEN_MECHANISM,
    CKA_ALLOWED_MECHANISMS,
    CKA_DERIVE_TEMPLATE,
];
const PUBLIC: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_SUBJECT,
    CKA_ENCRYPT,
    CKA_VERIFY,
    CKA_VERIFY_RECOVER,
    CKA_WRAP,
    CKA_TRUSTED,
    CKA_WRAP_TEMPLATE,
    CKA_PUBLIC_KEY_INFO,
];
const PRIVATE: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_SUBJECT,
    CKA_SENSITIVE,
    CKA_DECRYPT,
    CKA_SIGN,
    CKA_SIGN_RECOVER,
    CKA_UNWRAP,
    CKA_EXTRACTABLE,
    CKA_ALWAYS_SENSITIVE,
    CKA_NEVER_EXTRACTABLE,
    CKA_WRAP_WITH_TRUSTED,
    CKA_ALWAYS_AUTHENTICATE,
    CKA_UNWRAP_TEMPLATE,
    CKA_PUBLIC_KEY_INFO,
];
const SECRET: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_SENSITIVE,
    CKA_ENCRYPT,
    CKA_DECRYPT,
    CKA_SIGN,
    CKA_VERIFY,
    CKA_WRAP,
    CKA_UNWRAP,
    CKA_EXTRACTABLE,
    CKA_ALWAYS_SENSITIVE,
    CKA_NEVER_EXTRACTABLE,
    CKA_CHECK_VALUE,
    CKA_WRAP_WITH_TRUSTED,
    CKA_TRUSTED,
    CKA_WRAP_TEMPLATE,
    CKA_UNWRAP_TEMPLATE,
    CKA_VALUE,
    CKA_VALUE_LEN,
];
const CERTIFICATE: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_CERTIFICATE_TYPE,
    CKA_TRUSTED,
    CKA_CERTIFICATE_CATEGORY,
    CKA_CHECK_VALUE,
    CKA_START_DATE,
    CKA_END_DATE,
    CKA_PUBLIC_KEY_INFO,
    CKA_SUBJECT,
    CKA_ID,
    CKA_ISSUER,
    CKA_SERIAL_NUMBER,
    CKA_VALUE,
    CKA_URL,
    CKA_HASH_OF_SUBJECT_PUBLIC_KEY,
    CKA_HASH_OF_ISSUER_PUBLIC_KEY,
    CKA_JAVA_MIDP_SECURITY_DOMAIN,
    CKA_NAME_HASH_ALGORITHM,
];
const DATA: &[CK_ATTRIBUTE_TYPE] = &[CKA_APPLICATION, CKA_OBJECT_ID, CKA_VALUE];

/// The key-material attributes of an asymmetric key of this class and type, as its model
/// says.
fn key_material(class: CK_OBJECT_CLASS, key_type: Option<CK_KEY_TYPE>) -> &'static [CK_ATTRIBUTE_TYPE] {
    key_type.and_then(key_model).map_or(&[], |m| m.attributes(class))
}

/// Attributes an object of this class (and key type) may carry (vendor-defined ones are
/// always allowed, but for the usage attributes: private and secret keys only).
pub fn valid_for(attrs: &Attributes, t: CK_ATTRIBUTE_TYPE) -> bool {
    if matches!(t, CKA_USAGE_COUNT | CKA_USAGE_LIMIT) {
        return matches!(attrs.class(), Some(CKO_PRIVATE_KEY | CKO_SECRET_KEY));
    }
    if t >= CKA_VENDOR_DEFINED || COMMON.contains(&t) {
        return true;
    }
    match attrs.class() {
        Some(c @ CKO_PUBLIC_KEY) => {
            KEY.contains(&t) || PUBLIC.contains(&t) || key_material(c, attrs.key_type()).contains(&t)
        }
        Some(c @ CKO_PRIVATE_KEY) => {
            KEY.contains(&t) || PRIVATE.contains(&t) || key_material(c, attrs.key_type()).contains(&t)
        }
        Some(CKO_SECRET_KEY) => KEY.contains(&t) || SECRET.contains(&t),
        Some(CKO_CERTIFICATE) => CERTIFICATE.contains(&t),
        Some(CKO_DATA) => DATA.contains(&t),
        _ => false,
    }
}

/// Whether `t` of this object may not be revealed (`CKR_ATTRIBUTE_SENSITIVE`).
pub fn is_hidden(attrs: &Attributes, t: CK_ATTRIBUTE_TYPE) -> bool {
    let secret_part = match attrs.class() {
        // What any key model holds secret in a private key (an RSA key's primes and private
        // exponent, an EC scalar, a post-quantum key and its seed), on every private key
        // whatever its type: a secret attribute is never revealed because the object's own
        // model did not expect it.
        Some(CKO_PRIVATE_KEY) => key_models().any(|m| m.secret().contains(&t)),
        Some(CKO_SECRET_KEY) => t == CKA_VALUE,
        _ => false,
    };
    secret_part && (attrs.bool_or(CKA_SENSITIVE, true) || !attrs.bool_or(CKA_EXTRACTABLE, false))
}

/// Attributes the token computes; no template may set them (PKCS#11 3.0 §4.2 footnotes 2, 4,
/// 6: not specified when an object is created, generated or unwrapped).
fn token_managed(t: CK_ATTRIBUTE_TYPE) -> bool {
    matches!(
        t,
        CKA_LOCAL
            | CKA_ALWAYS_SENSITIVE
            | CKA_NEVER_EXTRACTABLE
            | CKA_KEY_GEN_MECHANISM
            | CKA_UNIQUE_ID
            | CKA_USAGE_COUNT
    )
}

/// The usage limit's rule, written once (`token::usage` counts the uses). Applied to every
/// template value of `CKA_USAGE_LIMIT` or `CKA_USAGE_COUNT`: `old` is the object's value for
/// a change (`C_SetAttributeValue`, `C_CopyObject`), `None` for a new object (create,
/// generate, unwrap, derive).
///
/// - `CKA_USAGE_COUNT` is the token's: no template sets it (`CKR_ATTRIBUTE_READ_ONLY`).
/// - `CKA_USAGE_LIMIT` is at least 1 (a key of 0 uses is a key to destroy).
/// - It is set once, when the key is made or later on a key without one, and afterwards only
///   lowered: raising it would hand back uses the limit was set to deny
///   (`CKR_ATTRIBUTE_READ_ONLY`). Lowering it to the count or below uses the key up.
///
/// Which objects may carry a limit (private and secret keys, `valid_for`, stored on the token,
/// `check_invariants`) and that a limited key is not copied (`copy_attributes`) are the
/// rule's other two halves.
pub fn check_usage_limit(old: Option<&Attributes>, t: CK_ATTRIBUTE_TYPE, new: &[u8]) -> Result<()> {
    if t == CKA_USAGE_COUNT {
        return fail_because(
            CKR_ATTRIBUTE_READ_ONLY,
            "CKA_USAGE_COUNT is counted by the token; set CKA_USAGE_LIMIT instead",
        );
    }
    if t != CKA_USAGE_LIMIT {
        return Ok(());
    }
    let Some(limit) = <[u8; ULONG_LEN]>::try_from(new).ok().map(CK_ULONG::from_ne_bytes) else {
        return fail_because(CKR_ATTRIBUTE_VALUE_INVALID, "CKA_USAGE_LIMIT is a CK_ULONG");
    };
    if limit == 0 {
        return fail_because(
            CKR_ATTRIBUTE_VALUE_INVALID,
            "CKA_USAGE_LIMIT must be at least 1 (to retire a key, destroy it)",
        );
    }
    match old.and_then(|o| o.ulong(CKA_USAGE_LIMIT)) {
        Some(was) if limit > was => fail_because(
            CKR_ATTRIBUTE_READ_ONLY,
            format!("CKA_USAGE_LIMIT is {was} and may only be lowered, not raised to {limit}"),
        ),
        _ => Ok(()),
    }
}

/// The attributes that, once an object exists, may move one way only, and the value they may
/// move to (PKCS#11 3.0 §4.4-4.9: `CKA_EXTRACTABLE` true→false, `CKA_SENSITIVE` and
/// `CKA_WRAP_WITH_TRUSTED` false→true, `CKA_COPYABLE`/`CKA_DESTROYABLE`/`CKA_MODIFIABLE`
/// never back to true). `CKA_ALWAYS_AUTHENTICATE` is here too: clearing it would let a key
/// sign without the context-specific login it was made to need. `check_change` applies this
/// table to `C_SetAttributeValue` and `C_CopyObject`; new objects (create, generate, unwrap)
/// start from the template and go through `complete_new`.
pub const ONE_WAY: &[(CK_ATTRIBUTE_TYPE, bool)] = &[
    (CKA_EXTRACTABLE, false),
    (CKA_COPYABLE, false),
    (CKA_DESTROYABLE, false),
    (CKA_MODIFIABLE, false),
    (CKA_SENSITIVE, true),
    (CKA_WRAP_WITH_TRUSTED, true),
    (CKA_ALWAYS_AUTHENTICATE, true),
];

/// The attributes only the security officer may make true (PKCS#11 3.0 §4.8: "can only be
/// set to CK_TRUE by the SO user"), at creation and later alike.
const SO_ONLY_TRUE: &[CK_ATTRIBUTE_TYPE] = &[CKA_TRUSTED];

fn check_so_only(t: CK_ATTRIBUTE_TYPE, new: &[u8], so_logged_in: bool) -> Result<()> {
    if SO_ONLY_TRUE.contains(&t) && new == [1] && !so_logged_in {
        return fail_because(
            CKR_ATTRIBUTE_READ_ONLY,
            format!("attribute 0x{t:x} can be set true only by the security officer"),
        );
    }
    Ok(())
}

/// What every object satisfies whichever way it came to be: checked on the final attributes
/// of every new object (create, copy, generate, unwrap) and every changed one.
///
/// A token object holding a private or secret key is private: its key material is sealed
/// under the token key, which only a user login opens, so a "public" key would sign in the
/// process that made it and be unusable in every other. Refused rather than made to behave
/// differently per process. Session objects live in one process and may be public.
///
/// A trusted secret key may wrap `CKA_WRAP_WITH_TRUSTED` keys, so it cannot decrypt (a wrapped
/// blob decrypted is the key in the clear), and its `CKA_UNWRAP_TEMPLATE` cannot ask for what
/// `unwrap_template` refuses it.
pub fn check_invariants(a: &Attributes) -> Result<()> {
    let holds_key = matches!(a.class(), Some(CKO_PRIVATE_KEY | CKO_SECRET_KEY));
    if holds_key && a.is_token() && !a.is_private() {
        return fail_because(
            CKR_TEMPLATE_INCONSISTENT,
            "private and secret keys stored on the token must have CKA_PRIVATE true (their key material opens only after a user login)",
        );
    }
    if a.contains(CKA_USAGE_LIMIT) && !a.is_token() {
        return fail_because(
            CKR_TEMPLATE_INCONSISTENT,
            "CKA_USAGE_LIMIT needs CKA_TOKEN true: the uses are counted in the token store, for every process and host",
        );
    }
    if a.bool_or(CKA_ALWAYS_AUTHENTICATE, false) && !a.is_private() {
        return fail_because(
            CKR_TEMPLATE_INCONSISTENT,
            "CKA_ALWAYS_AUTHENTICATE true needs CKA_PRIVATE true (PKCS#11 §4.9: the per-use login is a user's)",
        );
    }
    if is_trusted_key(a) {
        if a.bool_or(CKA_DECRYPT, false) {
            return fail_because(
                CKR_TEMPLATE_INCONSISTENT,
                "a trusted key cannot have CKA_DECRYPT true: it would decrypt the CKA_WRAP_WITH_TRUSTED keys it wraps (docs/security.md, trusted wrapping keys)",
            );
        }
        if let Some(u) = nested(a, CKA_UNWRAP_TEMPLATE) {
            if let Some((t, want)) = unwrap_imposed(a)
                .into_iter()
                .find(|(t, want)| u.get(*t).is_some_and(|v| v != [*want as u8]))
            {
                return fail_because(
                    CKR_TEMPLATE_INCONSISTENT,
                    format!("a trusted key's CKA_UNWRAP_TEMPLATE cannot make attribute 0x{t:x} {}: what it unwraps stays protected", !want),
                );
            }
        }
    }
    Ok(())
}

/// A secret key with `CKA_TRUSTED`: one that may wrap `CKA_WRAP_WITH_TRUSTED` keys and get
/// them back. (A trusted public key wraps them for a holder outside the token.)
fn is_trusted_key(a: &Attributes) -> bool {
    a.class() == Some(CKO_SECRET_KEY) && a.bool_or(CKA_TRUSTED, false)
}

/// Every attribute of `a` is one an object of its class has.
fn check_belongs(a: &Attributes) -> Result<()> {
    match a.iter().find(|(t, _)| !valid_for(a, *t)) {
        Some((t, _)) => fail_because(
            CKR_ATTRIBUTE_TYPE_INVALID,
            format!(
                "attribute 0x{t:x} does not belong to an object of class 0x{:x}",
                a.class().unwrap_or(CK_UNAVAILABLE_INFORMATION)
            ),
        ),
        None => Ok(()),
    }
}

/// Template attributes only the token or only the security officer may set.
fn check_who_sets(a: &Attributes, so_logged_in: bool) -> Result<()> {
    if let Some((t, _)) = a.iter().find(|(t, _)| token_managed(*t)) {
        return fail_because(
            CKR_ATTRIBUTE_READ_ONLY,
            format!("attribute 0x{t:x} is set by the token, not the application"),
        );
    }
    a.iter().try_for_each(|(t, v)| {
        check_so_only(t, v, so_logged_in)?;
        check_usage_limit(None, t, v)
    })
}

/// `CKA_TOKEN` false and `CKA_PRIVATE` true for keys with secret material, as PKCS#11 leaves
/// to the token.
fn fill_storage_defaults(a: &mut Attributes, class: CK_OBJECT_CLASS) {
    a.set_default(CKA_TOKEN, vec![0]);
    a.set_default(
        CKA_PRIVATE,
        vec![matches!(class, CKO_PRIVATE_KEY | CKO_SECRET_KEY) as u8],
    );
}

/// The rules of `complete_new` that need no key material, on a key-generation template of
/// class `class`: refused before seconds are spent making the key. Returns the template with
/// `CKA_TOKEN`/`CKA_PRIVATE` as the object will have them, for the caller's login checks.
pub fn preview_new(a: &Attributes, class: CK_OBJECT_CLASS, so_logged_in: bool) -> Result<Attributes> {
    check_belongs(a)?;
    check_who_sets(a, so_logged_in)?;
    let mut probe = a.clone();
    fill_storage_defaults(&mut probe, class);
    check_invariants(&probe)?;
    Ok(probe)
}

/// Completes a new object's template: checks it, fills the defaults of its class and the
/// attributes the token derives. Key-material consistency is checked by the caller.
///
/// `a` is the application's template (already shape-checked by `Template::parse`) plus, for
/// generated and unwrapped keys, the key material the token added.
pub fn complete_new(mut a: Attributes, origin: Origin, so_logged_in: bool) -> Result<Attributes> {
    let class = match a.class() {
        Some(c) => c,
        None => return fail_because(CKR_TEMPLATE_INCOMPLETE, "CKA_CLASS is missing"),
    };
    let key_type = a.key_type();
    match (class, key_type) {
        (CKO_PUBLIC_KEY | CKO_PRIVATE_KEY, Some(k)) if key_model(k).is_some() => {}
        (CKO_SECRET_KEY, Some(k)) if secret_key_type(k).is_some() => {}
        (CKO_PUBLIC_KEY | CKO_PRIVATE_KEY | CKO_SECRET_KEY, None) => {
            return fail_because(CKR_TEMPLATE_INCOMPLETE, "CKA_KEY_TYPE is missing")
        }
        (CKO_PUBLIC_KEY | CKO_PRIVATE_KEY | CKO_SECRET_KEY, Some(k)) => {
            return fail_because(
                CKR_TEMPLATE_INCONSISTENT,
                format!("key type 0x{k:x} is not supported for class 0x{class:x}"),
            )
        }
        (CKO_CERTIFICATE | CKO_DATA, _) => {}
        _ => {
            return fail_because(
                CKR_ATTRIBUTE_VALUE_INVALID,
                format!("object class 0x{class:x} is not supported"),
            )
        }
    }
    check_belongs(&a)?;
    check_who_sets(&a, so_logged_in)?;
    let is_key = matches!(class, CKO_PUBLIC_KEY | CKO_PRIVATE_KEY | CKO_SECRET_KEY);
    fill_storage_defaults(&mut a, class);
    a.set_default(CKA_MODIFIABLE, vec![1]);
    a.set_default(CKA_COPYABLE, vec![1]);
    a.set_default(CKA_DESTROYABLE, vec![1]);
    a.set_default(CKA_LABEL, vec![]);
    if is_key {
        a.set_default(CKA_ID, vec![]);
        a.set_default(CKA_START_DATE, vec![]);
        a.set_default(CKA_END_DATE, vec![]);
        a.set_default(CKA_DERIVE, vec![0]);
        a.set_default(CKA_ALLOWED_MECHANISMS, vec![]);
        let (local, mech) = match origin {
            Origin::Generated(m) => (true, m),
            _ => (false, CK_UNAVAILABLE_INFORMATION),
        };
        a.set_bool(CKA_LOCAL, local);
        a.set_ulong(CKA_KEY_GEN_MECHANISM, mech);
    }
    if key_type.and_then(key_model).is_some_and(|m| m.signs_only()) {
        // Keys that sign and verify only (EC, post-quantum): the flags of what they cannot do
        // default to false, so an application choosing a key by CKA_DECRYPT or CKA_WRAP does
        // not pick one.
        for t in [
            CKA_ENCRYPT,
            CKA_DECRYPT,
            CKA_WRAP,
            CKA_UNWRAP,
            CKA_SIGN_RECOVER,
            CKA_VERIFY_RECOVER,
        ] {
            if valid_for(&a, t) {
                a.set_default(t, vec![0]);
            }
        }
    }
    match class {
        CKO_PUBLIC_KEY => {
            require(&a, required_material(class, key_type))?;
            a.set_default(CKA_SUBJECT, vec![]);
            for t in [CKA_ENCRYPT, CKA_VERIFY, CKA_VERIFY_RECOVER, CKA_WRAP] {
                a.set_default(t, vec![1]);
            }
            a.set_default(CKA_TRUSTED, vec![0]);
        }
        CKO_PRIVATE_KEY | CKO_SECRET_KEY => {
            if class == CKO_PRIVATE_KEY {
                require(&a, required_material(class, key_type))?;
                a.set_default(CKA_SUBJECT, vec![]);
                a.set_default(CKA_SIGN_RECOVER, vec![1]);
                a.set_default(CKA_ALWAYS_AUTHENTICATE, vec![0]);
            } else {
                require(&a, &[CKA_VALUE])?;
                for t in [CKA_ENCRYPT, CKA_SIGN, CKA_VERIFY, CKA_WRAP] {
                    a.set_default(t, vec![1]);
                }
                a.set_default(CKA_TRUSTED, vec![0]);
            }
            // A trusted key does not decrypt (`check_invariants`): its default says so.
            let decrypt_default = !is_trusted_key(&a);
            a.set_default(CKA_DECRYPT, vec![decrypt_default as u8]);
            for t in [CKA_SIGN, CKA_UNWRAP, CKA_SENSITIVE] {
                a.set_default(t, vec![1]);
            }
            a.set_default(CKA_EXTRACTABLE, vec![0]);
            a.set_default(CKA_WRAP_WITH_TRUSTED, vec![0]);
            let (always_sensitive, never_extractable) = match origin {
                Origin::Generated(_) => (true, true),
                Origin::Derived {
                    always_sensitive,
                    never_extractable,
                } => (always_sensitive, never_extractable),
                Origin::Created | Origin::Unwrapped => (false, false),
            };
            let sensitive = a.bool_or(CKA_SENSITIVE, true);
            let extractable = a.bool_or(CKA_EXTRACTABLE, false);
            a.set_bool(CKA_ALWAYS_SENSITIVE, always_sensitive && sensitive);
            a.set_bool(CKA_NEVER_EXTRACTABLE, never_extractable && !extractable);
        }
        CKO_CERTIFICATE => {
            let cert_type = match a.ulong(CKA_CERTIFICATE_TYPE) {
                Some(t) => t,
                None => return fail_because(CKR_TEMPLATE_INCOMPLETE, "CKA_CERTIFICATE_TYPE is missing"),
            };
            if cert_type != CKC_X_509 {
                return fail_because(
                    CKR_ATTRIBUTE_VALUE_INVALID,
                    format!("certificate type 0x{cert_type:x} is not supported"),
                );
            }
            require(&a, &[CKA_VALUE])?;
            a.set_default(CKA_TRUSTED, vec![0]);
            a.set_default(CKA_CERTIFICATE_CATEGORY, ulong_bytes(0));
            for t in [
                CKA_SUBJECT,
                CKA_ID,
                CKA_ISSUER,
                CKA_SERIAL_NUMBER,
                CKA_START_DATE,
                CKA_END_DATE,
                CKA_URL,
                CKA_HASH_OF_SUBJECT_PUBLIC_KEY,
                CKA_HASH_OF_ISSUER_PUBLIC_KEY,
                CKA_PUBLIC_KEY_INFO,
            ] {
                a.set_default(t, vec![]);
            }
            a.set_default(CKA_JAVA_MIDP_SECURITY_DOMAIN, ulong_bytes(0));
            a.set_default(CKA_NAME_HASH_ALGORITHM, ulong_bytes(CKM_SHA_1));
            let check = crate::mechanism::HashAlg::Sha1.digest(a.get(CKA_VALUE).unwrap_or(&[]));
            a.set(CKA_CHECK_VALUE, check[..3].to_vec());
        }
        CKO_DATA => {
            a.set_default(CKA_APPLICATION, vec![]);
            a.set_default(CKA_OBJECT_ID, vec![]);
            a.set_default(CKA_VALUE, vec![]);
        }
        _ => {}
    }
    Ok(a)
}

/// The key material a new asymmetric key must be given (or generated with), as its model
/// says; the rest of what the key needs is checked when it is read (`KeyModel::complete`).
fn required_material(class: CK_OBJECT_CLASS, key_type: Option<CK_KEY_TYPE>) -> &'static [CK_ATTRIBUTE_TYPE] {
    key_type.and_then(key_model).map_or(&[], |m| m.required(class))
}

fn require(a: &Attributes, needed: &[CK_ATTRIBUTE_TYPE]) -> Result<()> {
    match needed.iter().find(|t| !a.contains(**t)) {
        Some(t) => fail_because(
            CKR_TEMPLATE_INCOMPLETE,
            format!("attribute 0x{t:x} is required for this object"),
        ),
        None => Ok(()),
    }
}

/// How a change reaches an existing object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// `C_SetAttributeValue`.
    Set,
    /// `C_CopyObject`'s template, applied to the copy.
    Copy,
}

/// Why changing `t` of `obj` to `new` is refused, if it is. `new` is well-formed
/// (`Template::parse`).
pub fn check_change(
    obj: &Attributes,
    t: CK_ATTRIBUTE_TYPE,
    new: &[u8],
    how: Change,
    so_logged_in: bool,
) -> Result<()> {
    if obj.get(t) == Some(new) {
        return Ok(());
    }
    if !valid_for(obj, t) {
        return fail_because(
            CKR_ATTRIBUTE_TYPE_INVALID,
            format!("attribute 0x{t:x} does not belong to this object"),
        );
    }
    check_usage_limit(Some(obj), t, new)?;
    let read_only = |why: &str| {
        fail_because(
            CKR_ATTRIBUTE_READ_ONLY,
            format!("attribute 0x{t:x} cannot be changed on this object: {why}"),
        )
    };
    if let Some(&(_, towards)) = ONE_WAY.iter().find(|(a, _)| *a == t) {
        if t == CKA_MODIFIABLE && how == Change::Set {
            return read_only("CKA_MODIFIABLE changes only in C_CopyObject");
        }
        return if (new == [1]) == towards {
            Ok(())
        } else {
            read_only(&format!(
                "it may only become {}",
                if towards { "true" } else { "false" }
            ))
        };
    }
    check_so_only(t, new, so_logged_in)?;
    let class = obj.class().unwrap_or(CKO_DATA);
    if how == Change::Copy && !obj.bool_or(CKA_MODIFIABLE, true) {
        // A copy of a read-only object is that object again: it may live elsewhere and be
        // more restricted (the one-way moves above), nothing else. Otherwise a copy would
        // undo what C_SetAttributeValue refuses on the original.
        return match t {
            CKA_TOKEN => Ok(()),
            CKA_PRIVATE if new == [1] => Ok(()),
            _ => read_only("the object has CKA_MODIFIABLE false and its copy keeps its values (a copy may change CKA_TOKEN, make CKA_PRIVATE true, and move the one-way attributes their way)"),
        };
    }
    match t {
        CKA_TOKEN | CKA_PRIVATE if how == Change::Copy => Ok(()),
        // Untrusting a wrapping key would let it decrypt what it wrapped while trusted.
        CKA_TRUSTED if class == CKO_SECRET_KEY && new == [0] => {
            read_only("a trusted secret key stays trusted until it is destroyed")
        }
        // What a key may be used for is fixed with the key (PKCS#11 and SoftHSM alike):
        // widening it later would undo the limit it was made with.
        CKA_ALLOWED_MECHANISMS => read_only("CKA_ALLOWED_MECHANISMS is fixed when the key is made"),
        CKA_TRUSTED | CKA_LABEL | CKA_ID | CKA_START_DATE | CKA_END_DATE | CKA_SUBJECT | CKA_DERIVE
        | CKA_ENCRYPT | CKA_DECRYPT | CKA_SIGN | CKA_VERIFY | CKA_SIGN_RECOVER | CKA_VERIFY_RECOVER
        | CKA_WRAP | CKA_UNWRAP => Ok(()),
        CKA_APPLICATION | CKA_OBJECT_ID | CKA_VALUE if class == CKO_DATA => Ok(()),
        CKA_ISSUER
        | CKA_SERIAL_NUMBER
        | CKA_URL
        | CKA_CERTIFICATE_CATEGORY
        | CKA_HASH_OF_SUBJECT_PUBLIC_KEY
        | CKA_HASH_OF_ISSUER_PUBLIC_KEY
            if class == CKO_CERTIFICATE =>
        {
            Ok(())
        }
        _ if t >= CKA_VENDOR_DEFINED => Ok(()),
        _ => read_only("it is fixed when the object is made"),
    }
}

/// The attributes of `C_CopyObject`'s copy of `obj` with `template` applied: the object must
/// be copyable, a trusted one is copied only by the security officer (a user's copy of a
/// trusted key would be a trusted key no SO made), and every template value passes
/// `check_change` as a copy.
pub fn copy_attributes(obj: &Attributes, template: &Attributes, so_logged_in: bool) -> Result<Attributes> {
    if !obj.bool_or(CKA_COPYABLE, true) {
        return fail_because(CKR_ACTION_PROHIBITED, "the object has CKA_COPYABLE false");
    }
    if obj.bool_or(CKA_TRUSTED, false) && !so_logged_in {
        return fail_because(
            CKR_ACTION_PROHIBITED,
            "the object has CKA_TRUSTED true: only the security officer copies a trusted object",
        );
    }
    if obj.contains(CKA_USAGE_LIMIT) {
        return fail_because(
            CKR_ACTION_PROHIBITED,
            "the key has a CKA_USAGE_LIMIT: a copy would count its uses afresh",
        );
    }
    let mut a = obj.clone();
    for (t, v) in template.iter() {
        check_change(obj, t, v, Change::Copy, so_logged_in)?;
        a.set(t, v.to_vec());
    }
    check_invariants(&a)?;
    Ok(a)
}

/// Whether `a` matches a search template. A template that names a hidden attribute (the
/// secret part of a sensitive or unextractable key) never matches: comparing it would answer
/// yes or no about the secret, one search at a time.
pub fn search_matches(a: &Attributes, template: &[(CK_ATTRIBUTE_TYPE, Vec<u8>)]) -> bool {
    template.iter().all(|(t, _)| !is_hidden(a, *t)) && a.matches(template)
}

/// The nested attributes of an attribute-array value (`CKA_WRAP_TEMPLATE`, ...), if any.
fn nested(a: &Attributes, t: CK_ATTRIBUTE_TYPE) -> Option<Attributes> {
    a.get(t).and_then(Attributes::from_bytes)
}

/// Whether `target` may leave the token wrapped by `wrapper` (`C_WrapKey`): it must be
/// extractable, a `CKA_WRAP_WITH_TRUSTED` key needs a `CKA_TRUSTED` wrapper, and a wrapper's
/// `CKA_WRAP_TEMPLATE` names the attribute values every key it wraps must have.
pub fn check_wrap(wrapper: &Attributes, target: &Attributes) -> Result<()> {
    if !target.bool_or(CKA_EXTRACTABLE, false) {
        return fail_because(CKR_KEY_UNEXTRACTABLE, "the key has CKA_EXTRACTABLE false");
    }
    if target.bool_or(CKA_WRAP_WITH_TRUSTED, false) && !wrapper.bool_or(CKA_TRUSTED, false) {
        return fail_because(
            CKR_KEY_NOT_WRAPPABLE,
            "the key has CKA_WRAP_WITH_TRUSTED and the wrapping key is not CKA_TRUSTED",
        );
    }
    if let Some(required) = nested(wrapper, CKA_WRAP_TEMPLATE) {
        if let Some((t, _)) = required.iter().find(|(t, v)| target.get(*t) != Some(*v)) {
            return fail_because(
                CKR_KEY_NOT_WRAPPABLE,
                format!("the key's attribute 0x{t:x} does not match the wrapping key's CKA_WRAP_TEMPLATE"),
            );
        }
    }
    Ok(())
}

/// Whether `unwrapper` may not decrypt (`CKA_DECRYPT` false, as every trusted key): then
/// unwrapping must not be a way to decrypt with it (`unwrap_imposed`, `check_unwrap`).
fn may_not_decrypt(unwrapper: &Attributes) -> bool {
    is_trusted_key(unwrapper) || !unwrapper.bool_or(CKA_DECRYPT, false)
}

/// What every key `unwrapper` unwraps must be, whatever its templates say, so that unwrapping
/// is never a way to decrypt. A key that may not decrypt unwraps only keys that are
/// - sensitive: otherwise reading `CKA_VALUE` of a generic secret it "unwrapped" from any
///   ciphertext is the decryption its policy refuses;
/// - `CKA_WRAP_WITH_TRUSTED`: otherwise such a key, if extractable, leaves under a key the
///   caller holds and comes back readable, the same decryption in three calls; and a
///   wrap-with-trusted key a trusted key wrapped and unwraps again stays one. Such keys leave
///   the token only under a trusted key, which the SO makes and which never decrypts.
fn unwrap_imposed(unwrapper: &Attributes) -> Vec<(CK_ATTRIBUTE_TYPE, bool)> {
    if may_not_decrypt(unwrapper) {
        vec![(CKA_SENSITIVE, true), (CKA_WRAP_WITH_TRUSTED, true)]
    } else {
        Vec::new()
    }
}

/// Whether `unwrapper` may unwrap with a mechanism whose refusals reveal nothing of the blob
/// (`reveals_nothing`: its family's `unwrap_reveals_nothing`). A key that may not decrypt
/// unwraps only with such a mechanism. CBC-PAD is not one: its padding check answers, for
/// blocks and IVs the caller chooses, whether the plaintext ends in a valid pad, and a few
/// thousand such answers decrypt a blob (the padding oracle), a wrap-with-trusted key's under a
/// trusted key included. A key that may decrypt learns nothing from them that it could not
/// decrypt directly.
pub fn check_unwrap(unwrapper: &Attributes, reveals_nothing: bool) -> Result<()> {
    if may_not_decrypt(unwrapper) && !reveals_nothing {
        return fail_because(
            CKR_KEY_FUNCTION_NOT_PERMITTED,
            "a key without CKA_DECRYPT unwraps only with mechanisms that check the blob (CKM_AES_KEY_WRAP, CKM_AES_KEY_WRAP_PAD, CKM_RSA_PKCS_OAEP): a refused CBC-PAD unwrap would tell its padding, which decrypts the blob",
        );
    }
    Ok(())
}

/// The application's `template` with `imposed` values laid over it; a value that contradicts
/// one is `CKR_TEMPLATE_INCONSISTENT`, naming `why`.
fn impose(template: Template, imposed: &Attributes, why: &str) -> Result<Template> {
    let mut a = template.into_attributes();
    for (t, v) in imposed.iter() {
        if a.get(t).is_some_and(|mine| mine != v) {
            return fail_because(
                CKR_TEMPLATE_INCONSISTENT,
                format!("attribute 0x{t:x} contradicts {why}"),
            );
        }
        a.set(t, v.to_vec());
    }
    Template::parse(a.iter().map(|(t, v)| (t, v.to_vec())))
}

/// The template of a key `unwrapper` unwraps: the application's, with the unwrapping key's
/// `CKA_UNWRAP_TEMPLATE` and `unwrap_imposed` laid over it; a value that contradicts either
/// is `CKR_TEMPLATE_INCONSISTENT`.
pub fn unwrap_template(unwrapper: &Attributes, template: Template) -> Result<Template> {
    let mut template = template;
    if let Some(imposed) = nested(unwrapper, CKA_UNWRAP_TEMPLATE) {
        template = impose(template, &imposed, "the unwrapping key's CKA_UNWRAP_TEMPLATE")?;
    }
    let mut rules = Attributes::new();
    for (t, v) in unwrap_imposed(unwrapper) {
        rules.set_bool(t, v);
    }
    impose(
        template,
        &rules,
        "the unwrapping key's policy (a key without CKA_DECRYPT unwraps only sensitive keys with CKA_WRAP_WITH_TRUSTED)",
    )
}

/// The template of a key derived from `base`: the application's, with the base key's
/// `CKA_DERIVE_TEMPLATE` laid over it, as `unwrap_template` does with `CKA_UNWRAP_TEMPLATE`.
pub fn derive_template(base: &Attributes, template: Template) -> Result<Template> {
    match nested(base, CKA_DERIVE_TEMPLATE) {
        Some(imposed) => impose(template, &imposed, "the base key's CKA_DERIVE_TEMPLATE"),
        None => Ok(template),
    }
}

/// How a key derived from `base` came to be, for `complete_new`'s sticky attributes.
pub fn derived_from(base: &Attributes) -> Origin {
    Origin::Derived {
        always_sensitive: base.bool_or(CKA_ALWAYS_SENSITIVE, false),
        never_extractable: base.bool_or(CKA_NEVER_EXTRACTABLE, false),
    }
}
