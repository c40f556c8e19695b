//! Attribute policy: which attributes each kind of object has, their defaults, which are
//! sensitive, which the application may set at creation, change later, or change by copying.

use super::attributes::{ulong_bytes, Attributes, ULONG_LEN};
use crate::error::{fail_because, Result};
use cryptoki_sys::*;

/// How an object came to exist; decides `CKA_LOCAL`, `CKA_ALWAYS_SENSITIVE`, ... .
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Created,
    Generated(CK_MECHANISM_TYPE),
    Unwrapped,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    Ulong,
    Bytes,
}

fn kind(t: CK_ATTRIBUTE_TYPE) -> Kind {
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
        | CKA_NAME_HASH_ALGORITHM => Kind::Ulong,
        _ => Kind::Bytes,
    }
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
];
const PUBLIC: &[CK_ATTRIBUTE_TYPE] = &[
    CKA_SUBJECT,
    CKA_ENCRYPT,
    CKA_VERIFY,
    CKA_VERIFY_RECOVER,
    CKA_WRAP,
    CKA_TRUSTED,
    CKA_PUBLIC_KEY_INFO,
    CKA_MODULUS,
    CKA_MODULUS_BITS,
    CKA_PUBLIC_EXPONENT,
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
    CKA_PUBLIC_KEY_INFO,
    CKA_MODULUS,
    CKA_PUBLIC_EXPONENT,
    CKA_PRIVATE_EXPONENT,
    CKA_PRIME_1,
    CKA_PRIME_2,
    CKA_EXPONENT_1,
    CKA_EXPONENT_2,
    CKA_COEFFICIENT,
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

/// Attributes an object of this class may carry (vendor-defined ones are always allowed).
pub fn valid_for(attrs: &Attributes, t: CK_ATTRIBUTE_TYPE) -> bool {
    if t >= CKA_VENDOR_DEFINED || COMMON.contains(&t) {
        return true;
    }
    match attrs.class() {
        Some(CKO_PUBLIC_KEY) => KEY.contains(&t) || PUBLIC.contains(&t),
        Some(CKO_PRIVATE_KEY) => KEY.contains(&t) || PRIVATE.contains(&t),
        Some(CKO_SECRET_KEY) => KEY.contains(&t) || SECRET.contains(&t),
        Some(CKO_CERTIFICATE) => CERTIFICATE.contains(&t),
        Some(CKO_DATA) => DATA.contains(&t),
        _ => false,
    }
}

/// Whether `t` of this object may not be revealed (`CKR_ATTRIBUTE_SENSITIVE`).
pub fn is_hidden(attrs: &Attributes, t: CK_ATTRIBUTE_TYPE) -> bool {
    let secret_part = match attrs.class() {
        Some(CKO_PRIVATE_KEY) => matches!(
            t,
            CKA_PRIVATE_EXPONENT
                | CKA_PRIME_1
                | CKA_PRIME_2
                | CKA_EXPONENT_1
                | CKA_EXPONENT_2
                | CKA_COEFFICIENT
        ),
        Some(CKO_SECRET_KEY) => t == CKA_VALUE,
        _ => false,
    };
    secret_part && (attrs.bool_or(CKA_SENSITIVE, true) || !attrs.bool_or(CKA_EXTRACTABLE, false))
}

/// Attributes the token computes; an application may not set them.
fn token_managed(t: CK_ATTRIBUTE_TYPE) -> bool {
    matches!(
        t,
        CKA_LOCAL | CKA_ALWAYS_SENSITIVE | CKA_NEVER_EXTRACTABLE | CKA_KEY_GEN_MECHANISM | CKA_UNIQUE_ID
    )
}

/// Checks a template's value shapes (boolean 1 byte, `CK_ULONG` 8 bytes).
pub fn check_shapes(template: &Attributes) -> Result<()> {
    for (t, v) in template.iter() {
        let ok = match kind(t) {
            Kind::Bool => v.len() == 1,
            Kind::Ulong => v.len() == ULONG_LEN,
            Kind::Bytes => t != CKA_ALLOWED_MECHANISMS || v.len() % ULONG_LEN == 0,
        };
        if !ok {
            return fail_because(
                CKR_ATTRIBUTE_VALUE_INVALID,
                format!(
                    "attribute 0x{t:x} has a value of the wrong length ({} bytes)",
                    v.len()
                ),
            );
        }
    }
    Ok(())
}

/// Completes a new object's template: checks it, fills the defaults of its class and the
/// attributes the token derives. Key-material consistency is checked by the caller.
pub fn complete_new(mut a: Attributes, origin: Origin) -> Result<Attributes> {
    check_shapes(&a)?;
    let class = match a.class() {
        Some(c) => c,
        None => return fail_because(CKR_TEMPLATE_INCOMPLETE, "CKA_CLASS is missing"),
    };
    if origin == Origin::Created {
        if let Some((t, _)) = a.iter().find(|(t, _)| token_managed(*t)) {
            return fail_because(
                CKR_ATTRIBUTE_READ_ONLY,
                format!("attribute 0x{t:x} is set by the token, not the application"),
            );
        }
    }
    let key_type = a.key_type();
    match (class, key_type) {
        (CKO_PUBLIC_KEY | CKO_PRIVATE_KEY, Some(CKK_RSA)) => {}
        (CKO_SECRET_KEY, Some(CKK_AES | CKK_GENERIC_SECRET)) => {}
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
    if let Some((t, _)) = a.iter().find(|(t, _)| !valid_for(&a, *t)) {
        return fail_because(
            CKR_ATTRIBUTE_TYPE_INVALID,
            format!("attribute 0x{t:x} does not belong to an object of class 0x{class:x}"),
        );
    }
    let is_key = matches!(class, CKO_PUBLIC_KEY | CKO_PRIVATE_KEY | CKO_SECRET_KEY);
    let secret = matches!(class, CKO_PRIVATE_KEY | CKO_SECRET_KEY);
    a.set_default(CKA_TOKEN, vec![0]);
    a.set_default(CKA_PRIVATE, vec![secret as u8]);
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
    match class {
        CKO_PUBLIC_KEY => {
            require(&a, &[CKA_MODULUS, CKA_PUBLIC_EXPONENT])?;
            a.set_default(CKA_SUBJECT, vec![]);
            for t in [CKA_ENCRYPT, CKA_VERIFY, CKA_VERIFY_RECOVER, CKA_WRAP] {
                a.set_default(t, vec![1]);
            }
            a.set_default(CKA_TRUSTED, vec![0]);
        }
        CKO_PRIVATE_KEY | CKO_SECRET_KEY => {
            if class == CKO_PRIVATE_KEY {
                require(&a, &[CKA_MODULUS, CKA_PUBLIC_EXPONENT, CKA_PRIVATE_EXPONENT])?;
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
            for t in [CKA_DECRYPT, CKA_SIGN, CKA_UNWRAP, CKA_SENSITIVE] {
                a.set_default(t, vec![1]);
            }
            a.set_default(CKA_EXTRACTABLE, vec![0]);
            a.set_default(CKA_WRAP_WITH_TRUSTED, vec![0]);
            let generated = matches!(origin, Origin::Generated(_));
            let sensitive = a.bool_or(CKA_SENSITIVE, true);
            let extractable = a.bool_or(CKA_EXTRACTABLE, false);
            a.set_bool(CKA_ALWAYS_SENSITIVE, generated && sensitive);
            a.set_bool(CKA_NEVER_EXTRACTABLE, generated && !extractable);
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

fn require(a: &Attributes, needed: &[CK_ATTRIBUTE_TYPE]) -> Result<()> {
    match needed.iter().find(|t| !a.contains(**t)) {
        Some(t) => fail_because(
            CKR_TEMPLATE_INCOMPLETE,
            format!("attribute 0x{t:x} is required for this object"),
        ),
        None => Ok(()),
    }
}

/// Why an attribute change is refused, if it is: `copying` allows the attributes that
/// `C_CopyObject` may change (`CKA_TOKEN`, `CKA_PRIVATE`, `CKA_MODIFIABLE`).
pub fn check_change(
    obj: &Attributes,
    t: CK_ATTRIBUTE_TYPE,
    new: &[u8],
    copying: bool,
    so_logged_in: bool,
) -> Result<()> {
    let old = obj.get(t);
    if old == Some(new) {
        return Ok(());
    }
    if !valid_for(obj, t) {
        return fail_because(
            CKR_ATTRIBUTE_TYPE_INVALID,
            format!("attribute 0x{t:x} does not belong to this object"),
        );
    }
    let class = obj.class().unwrap_or(CKO_DATA);
    let to_true = new == [1];
    let read_only = || {
        fail_because(
            CKR_ATTRIBUTE_READ_ONLY,
            format!("attribute 0x{t:x} cannot be changed on this object"),
        )
    };
    match t {
        CKA_TOKEN | CKA_PRIVATE if copying => Ok(()),
        CKA_MODIFIABLE if copying && !to_true => Ok(()),
        CKA_LABEL
        | CKA_ID
        | CKA_START_DATE
        | CKA_END_DATE
        | CKA_SUBJECT
        | CKA_DERIVE
        | CKA_ENCRYPT
        | CKA_DECRYPT
        | CKA_SIGN
        | CKA_VERIFY
        | CKA_SIGN_RECOVER
        | CKA_VERIFY_RECOVER
        | CKA_WRAP
        | CKA_UNWRAP
        | CKA_ALLOWED_MECHANISMS
        | CKA_ALWAYS_AUTHENTICATE => Ok(()),
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
        CKA_SENSITIVE | CKA_WRAP_WITH_TRUSTED if to_true => Ok(()),
        CKA_EXTRACTABLE | CKA_COPYABLE | CKA_DESTROYABLE if !to_true => Ok(()),
        CKA_TRUSTED if so_logged_in => Ok(()),
        CKA_TRUSTED => fail_because(
            CKR_ATTRIBUTE_READ_ONLY,
            "only the security officer may set CKA_TRUSTED",
        ),
        _ if t >= CKA_VENDOR_DEFINED => Ok(()),
        _ => read_only(),
    }
}
